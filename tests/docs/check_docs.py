#!/usr/bin/env python3
"""Checks that the documentation says what the code does.

Three checks over README.md and docs/*.md (standard library only):

  flags    every `--name` the docs write is a flag of one of the project's own
           programs (attnserve, attnctl, the benchmarks, the Python package's
           benchmark modules, the scripts), read from their sources, or of an
           outside tool on EXTERNAL_FLAGS below; and where a doc line runs
           `attnserve`, `attnctl` or a benchmark binary, each flag on that command
           is one of that program's.
  layering the #include lines of every .cc/.h/.inc under base/ core/ wire/ kvcache/
           model/ server/ client/ bench/ against docs/architecture.md's
           "Dependency direction" table (parsed from the markdown: the table is
           the one statement of the rules). Every include must be allowed, every
           entry of the table must be used, and the folders must form no cycle.
  links    every relative markdown link in README.md and docs/*.md names an
           existing file and, for `file.md#anchor` or `#anchor`, a heading of it
           (GitHub's anchors).

usage: check_docs.py [--root DIR] [flags|layering|links ...]
Exits 0 when every check passes, 1 naming each failure otherwise.
"""

import argparse
import os
import re
import sys
from collections import defaultdict

# --- shared -------------------------------------------------------------------


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def doc_files(root):
    """README.md and docs/*.md, relative to root."""
    docs = sorted(
        os.path.join("docs", name)
        for name in os.listdir(os.path.join(root, "docs"))
        if name.endswith(".md"))
    return ["README.md"] + docs


FENCE = re.compile(r"^\s*(```|~~~)")


def split_markdown(text):
    """Yields (line_number, line, in_code_block) for each line."""
    in_code = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            yield number, line, True
            in_code = not in_code
            continue
        yield number, line, in_code


# --- flags --------------------------------------------------------------------

# Flags of programs that are not the project's own, which the docs show in their
# commands. Each entry says whose flag it is and where the docs use it.
EXTERNAL_FLAGS = {
    # podman / docker (operations.md "In a container", the README's deploy step)
    "build-arg": "docker/podman build: the Dockerfile's BASE_IMAGE argument",
    "platform": "docker buildx build --platform (operations.md: a multi-platform image)",
    "cap-drop": "podman run: the image test's capability drop",
    "cpus": "docker/podman run: a CPU limit for the container",
    "format": "podman build --format docker (keeps HEALTHCHECK)",
    "health-cmd": "docker/podman run: override the image's HEALTHCHECK",
    "interval": "docker/podman HEALTHCHECK --interval",
    "mount": "Dockerfile RUN --mount=type=cache (ccache's directory)",
    "network": "podman build --network=host",
    "read-only": "docker/podman run --read-only",
    "read-only-tmpfs": "podman run --read-only-tmpfs=false",
    "rm": "docker/podman run --rm",
    "runtime": "podman --runtime runc",
    "security-opt": "podman run --security-opt=no-new-privileges",
    "time": "podman stop --time",
    # debootstrap (scripts/podman-base.sh, operations.md)
    "variant": "debootstrap --variant=minbase",
    # Python's venv and pip (README, python.md)
    "system-site-packages": "python3 -m venv --system-site-packages",
    "no-index": "pip install --no-index",
    "no-build-isolation": "pip install --no-build-isolation",
    # ctest (README's Testing section)
    "test-dir": "ctest --test-dir build",
    "output-on-failure": "ctest --output-on-failure",
    # GoogleTest (benchmarks.md: the overload fault test)
    "gtest_filter": "GoogleTest's test selection flag",
    # Triton's perf_analyzer (operations.md, Open Inference Protocol)
    "shape": "perf_analyzer --shape",
    # Placeholders in attnctl.md's description of the flag syntax
    "name": "attnctl.md: '--name=value' describes the syntax, not a flag",
    "noname": "attnctl.md: '--noname' describes the syntax, not a flag",
}

ABSL_FLAG = re.compile(
    r"ABSL_FLAG\(\s*([\w:<>]+)\s*,\s*(\w+)\s*,", re.MULTILINE)
# Flags every absl::ParseCommandLine program takes.
ABSL_BUILTIN = {"help", "helpfull", "helpshort", "version", "flagfile"}


class Flags:
    """The flags of one program: names, and which of them are booleans."""

    def __init__(self):
        self.names = set()
        self.bools = set()

    def add_absl(self, text):
        for type_name, name in ABSL_FLAG.findall(text):
            self.names.add(name)
            if type_name == "bool":
                self.bools.add(name)

    def knows(self, token):
        """`token` is `name` or, for a boolean, `noname`."""
        if token in self.names:
            return True
        return token.startswith("no") and token[2:] in self.bools


def cmake_executables(cmake_text):
    """add_executable(name sources...) of a CMakeLists.txt: name -> [*.cc]."""
    out = {}
    for name, body in re.findall(r"add_executable\(\s*(\w+)([^)]*)\)",
                                 cmake_text):
        out[name] = re.findall(r"[\w/]+\.cc", body)
    return out


def program_flags(root):
    """Program name -> Flags, for every program of the project the docs run."""
    programs = {}

    attnserve = Flags()
    attnserve.add_absl(read(os.path.join(root, "server", "main.cc")))
    attnserve.names |= ABSL_BUILTIN
    programs["attnserve"] = attnserve

    # attnctl declares its flags in its entry files and reads --help itself
    # (client/cli/flag_parser.cc).
    attnctl = Flags()
    cli = os.path.join(root, "client", "cli")
    for name in sorted(os.listdir(cli)):
        if name.endswith(".cc"):
            attnctl.add_absl(read(os.path.join(cli, name)))
    attnctl.names.add("help")
    programs["attnctl"] = attnctl

    # The benchmarks: bench/, and server/bench/ (the RPC benchmark and its echo).
    for folder in ("bench", os.path.join("server", "bench")):
        bench = os.path.join(root, folder)
        for name, sources in cmake_executables(
                read(os.path.join(bench, "CMakeLists.txt"))).items():
            flags = Flags()
            for source in sources:
                flags.add_absl(read(os.path.join(bench, source)))
            flags.names |= ABSL_BUILTIN
            programs[name] = flags

    # argparse options: python -m attnserve.<module>, and the examples' scripts.
    for folder, prefix in ((os.path.join("python", "attnserve"), "attnserve."),
                           ("examples", "")):
        path = os.path.join(root, folder)
        for name in sorted(os.listdir(path)):
            if not name.endswith(".py"):
                continue
            text = read(os.path.join(path, name))
            options = re.findall(r"add_argument\(\s*[\"']--([\w-]+)[\"']", text)
            if options:
                flags = Flags()
                flags.names |= set(options) | {"help"}
                programs[prefix + (name[:-3] if prefix else name)] = flags

    # Shell scripts: the options of their `case` over the arguments.
    for folder in ("scripts", "bench", os.path.join("tests", "deploy")):
        path = os.path.join(root, folder)
        for name in sorted(os.listdir(path)):
            if not name.endswith(".sh"):
                continue
            text = read(os.path.join(path, name))
            options = re.findall(r"^\s*--([\w-]+)(?:=\*)?(?:\|[^)]*)?\)", text,
                                 re.MULTILINE)
            if options:
                flags = Flags()
                flags.names |= set(options)
                programs[name] = flags
    return programs


FLAG_TOKEN = re.compile(r"(?<![\w\-/.])--([A-Za-z][\w-]*)")
INLINE_CODE = re.compile(r"`([^`]+)`")
# Tokens after which a new command starts, and the words that run the command
# that follows them.
COMMAND_START = {"|", "||", "&&", ";", "&", "(", "$", "--", "do", "then"}
WRAPPERS = {"sudo", "exec", "time", "env", "nohup", "timeout"}
IMAGE = re.compile(r"^(?:[\w.-]+/)*attnserve:[\w.-]+$")


def program_of(token):
    """The project program a command word runs, or None."""
    base = os.path.basename(token)
    if base in ("attnserve", "attnctl") or base.startswith("attnserve_"):
        return base
    if IMAGE.match(token):
        return "attnserve"  # docker/podman run IMAGE [server flags]
    if base.endswith((".sh", ".py")):
        return base
    return None


def commands_in(code):
    """(program, [flag names]) for each project program a line of code runs.

    A program is recognised as the first word of a command (after `$ `, a pipe,
    `&&`, `;`, `--`, environment assignments and sudo/exec/...), as the image of
    `docker/podman run`, or as `python -m attnserve.<module>`; its flags are the
    `--name` words up to the end of its command."""
    tokens = code.split()
    found = []
    at_start = True
    i = 0
    while i < len(tokens):
        token = tokens[i]
        program = None
        if token in COMMAND_START:
            at_start = True
            i += 1
            continue
        if at_start and (re.match(r"^\w+=", token) or token in WRAPPERS):
            i += 1
            continue
        if at_start and os.path.basename(token).startswith("python"):
            i += 1  # python [-m module | script.py]: the script is the program
            continue
        if token == "-m" and i + 1 < len(tokens):
            program = tokens[i + 1]
            i += 1
        elif at_start or IMAGE.match(token):
            program = program_of(token)
        at_start = False
        i += 1
        if program is None:
            continue
        flags = []
        while i < len(tokens) and tokens[i] not in COMMAND_START - {"--"} \
                and not tokens[i].startswith("#"):
            match = re.match(r"--([A-Za-z][\w-]*)", tokens[i])
            if match:
                flags.append(match.group(1))
            i += 1
        found.append((program, flags))
    return found


def check_flags(root):
    programs = program_flags(root)
    known = set(EXTERNAL_FLAGS)
    for flags in programs.values():
        known |= flags.names
        known |= {"no" + name for name in flags.bools}
    errors = []
    for doc in doc_files(root):
        text = read(os.path.join(root, doc))
        lines = list(split_markdown(text))
        # Every --name anywhere must be somebody's flag.
        for number, line, _ in lines:
            line = re.sub(r"https?://\S+", "", line)
            for name in FLAG_TOKEN.findall(line):
                if name not in known:
                    errors.append(
                        f"{doc}:{number}: --{name} is not a flag of attnserve, "
                        "attnctl or any other program of the project (and not on "
                        "check_docs.py's EXTERNAL_FLAGS)")
        # A command line of a project program takes only that program's flags.
        code_lines = []
        pending = ""
        for number, line, in_code in lines:
            if in_code and not FENCE.match(line):
                if line.rstrip().endswith("\\"):
                    pending += line.rstrip()[:-1] + " "
                    continue
                code_lines.append((number, pending + line))
                pending = ""
            else:
                for span in INLINE_CODE.findall(line):
                    code_lines.append((number, span))
        for number, code in code_lines:
            for program, flags in commands_in(code):
                if program not in programs:
                    continue
                for name in flags:
                    if not programs[program].knows(name):
                        errors.append(
                            f"{doc}:{number}: `{program}` has no flag --{name}")
    return errors


# --- layering -----------------------------------------------------------------

SCANNED = ["base", "core", "wire", "kvcache", "model", "server", "client",
           "bench"]
# Outside libraries, by how their headers are included; the names are the ones
# the architecture table uses.
EXTERNAL_INCLUDES = [
    ("absl/", "Abseil"),
    ("grpc/health/", "proto/"),   # generated from proto/grpc/health/v1/
    ("grpcpp/", "gRPC"),
    ("grpc/", "gRPC"),
    ("google/protobuf/", "protobuf"),
    ("nlohmann/", "nlohmann/json"),
    ("prometheus/", "prometheus-cpp"),
    ("oneapi/", "oneDNN"),
    ("dnnl.hpp", "oneDNN"),
    ("omp.h", "OpenMP"),
    ("hwy/", "Highway"),
    ("png.h", "libpng"),
    ("attnserve/", "proto/"),     # generated from proto/attnserve/
    ("inference/", "proto/"),     # generated from proto/inference/
]
LIBRARIES = sorted({name for _, name in EXTERNAL_INCLUDES
                    if not name.endswith("/")})
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]', re.MULTILINE)


def parse_dependency_table(root):
    """docs/architecture.md's "Dependency direction" table: folder -> uses."""
    text = read(os.path.join(root, "docs", "architecture.md"))
    match = re.search(r"^## Dependency direction\n(.*?)(?=^## )", text,
                      re.MULTILINE | re.DOTALL)
    if not match:
        raise ValueError("docs/architecture.md has no "
                         "'## Dependency direction' section")
    table = {}
    for line in match.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not line.lstrip().startswith("|"):
            continue
        folders = re.findall(r"`([\w/]+/)`", cells[0])
        if not folders:
            continue  # the header and the separator
        uses = set(re.findall(r"`([\w/]+/)`", cells[1]))
        for library in LIBRARIES:
            if re.search(r"(?<![\w-])" + re.escape(library) + r"(?![\w-])",
                         cells[1]):
                uses.add(library)
        for folder in folders:
            if folder in table:
                raise ValueError(f"docs/architecture.md: {folder} is in the "
                                 "dependency table twice")
            table[folder] = uses
    if not table:
        raise ValueError("docs/architecture.md: the dependency table is empty")
    return table


def folder_of(path, folders):
    """The longest folder of the table that holds `path`."""
    best = None
    for folder in folders:
        if path.startswith(folder) and (best is None or len(folder) > len(best)):
            best = folder
    return best


def check_layering(root):
    try:
        table = parse_dependency_table(root)
    except ValueError as e:
        return [str(e)]
    folders = list(table)
    errors = []
    used = defaultdict(set)
    for top in SCANNED:
        if folder_of(top + "/", folders) is None:
            errors.append(f"docs/architecture.md: the dependency table has no "
                          f"row for {top}/")
            continue
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith((".cc", ".h", ".inc")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                source = folder_of(path, folders)
                for bracket, header in INCLUDE.findall(
                        read(os.path.join(root, path))):
                    target = folder_of(header, folders)
                    if target is None:
                        for prefix, library in EXTERNAL_INCLUDES:
                            if header == prefix or (prefix.endswith("/") and
                                                    header.startswith(prefix)):
                                target = library
                                break
                    if target is None:
                        if bracket == '"':
                            errors.append(
                                f"{path}: #include \"{header}\": no folder of the "
                                "dependency table and no library check_docs.py "
                                "knows (add it to EXTERNAL_INCLUDES)")
                        continue  # a system header
                    if target == source:
                        continue
                    used[source].add(target)
                    if target not in table[source]:
                        errors.append(
                            f"{path}: includes \"{header}\" ({target}), which "
                            f"docs/architecture.md's dependency table does not "
                            f"allow {source}")
    for folder, uses in table.items():
        if not os.path.isdir(os.path.join(root, folder)):
            errors.append(f"docs/architecture.md: {folder} in the dependency "
                          "table does not exist")
            continue
        if folder.rstrip("/").split("/")[0] not in SCANNED:
            continue  # proto/: generated code, nothing to scan
        for unused in sorted(uses - used[folder]):
            errors.append(
                f"docs/architecture.md: the dependency table says {folder} uses "
                f"{unused}, but nothing in {folder} includes it")
    # No cycles among the folders.
    graph = {f: {u for u in uses if u in table} for f, uses in table.items()}
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycle = stack[stack.index(nxt):] + [nxt]
                errors.append("docs/architecture.md: the dependency table has "
                              "a cycle: " + " -> ".join(cycle))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return errors


# --- links --------------------------------------------------------------------


def github_anchor(heading):
    """The id GitHub gives a heading (before de-duplication)."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [text](url)
    text = text.strip().lower()
    return "".join(c for c in text
                   if c.isalnum() or c in "-_ ").replace(" ", "-")


def anchors_of(text):
    anchors = set()
    seen = defaultdict(int)
    for _, line, in_code in split_markdown(text):
        if in_code:
            continue
        match = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        anchor = github_anchor(match.group(2))
        count = seen[anchor]
        seen[anchor] += 1
        anchors.add(anchor if count == 0 else f"{anchor}-{count}")
    anchors |= set(re.findall(r'<a\s+(?:name|id)="([^"]+)"', text))
    return anchors


LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def check_links(root):
    errors = []
    anchor_cache = {}

    def anchors(path):
        if path not in anchor_cache:
            anchor_cache[path] = anchors_of(read(path))
        return anchor_cache[path]

    for doc in doc_files(root):
        doc_path = os.path.join(root, doc)
        for number, line, in_code in split_markdown(read(doc_path)):
            if in_code:
                continue
            line = INLINE_CODE.sub("", line)
            for target in LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                file_part, _, anchor = target.partition("#")
                path = (os.path.normpath(
                    os.path.join(os.path.dirname(doc_path), file_part))
                        if file_part else doc_path)
                if not os.path.exists(path):
                    errors.append(f"{doc}:{number}: link to {target}: "
                                  f"{os.path.relpath(path, root)} does not exist")
                    continue
                if anchor and path.endswith(".md") and \
                        anchor not in anchors(path):
                    errors.append(
                        f"{doc}:{number}: link to {target}: "
                        f"{os.path.relpath(path, root)} has no heading "
                        f"#{anchor}")
    return errors


# --- main ---------------------------------------------------------------------

CHECKS = {"flags": check_flags, "layering": check_layering,
          "links": check_links}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", ".."),
        help="the repository (default: two folders up from this script)")
    parser.add_argument("checks", nargs="*",
                        help="the checks to run: flags, layering, links "
                        "(default: all)")
    args = parser.parse_args()
    for name in args.checks:
        if name not in CHECKS:
            parser.error(f"unknown check {name!r} (expected one of "
                         f"{', '.join(CHECKS)})")
    root = os.path.abspath(args.root)
    failed = False
    for name in args.checks or list(CHECKS):
        errors = CHECKS[name](root)
        if errors:
            failed = True
            print(f"{name}: {len(errors)} problem(s)")
            for error in errors:
                print("  " + error)
        else:
            print(f"{name}: ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
