"""Runs the Dockerfile's build stage outside Docker, so that the image cannot drift
from what CI builds and tests.

1. The build stage may hold only FROM, one WORKDIR, COPY (from the context) and RUN
   (with at most cache mounts), and each RUN may only call the repository's scripts (scripts/install-deps.sh,
   scripts/build-release.sh): the same ones `make build` runs in CI.
2. The Docker context is rebuilt by hand: the source tree minus .dockerignore's
   patterns, copied to WORK/src (WORKDIR maps to it). A pattern that drops a file the
   build needs fails here.
3. Every RUN line runs there with bash, in order, as Docker's /bin/sh -c would.
4. What the runtime stage copies out of the build stage (the two binaries) exists and
   works: the built attnserve starts and the built attnctl finds it SERVING.
5. No compile command of that build carries a -march flag.

usage: image_build_steps_test.py WORK_DIR
"""

import fnmatch
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from deploy_lib import (SOURCE_DIR, Server, dockerfile_stages, fail,  # noqa: E402
                        run)

ALLOWED = {"FROM", "WORKDIR", "COPY", "RUN"}
ALLOWED_SCRIPTS = {"scripts/install-deps.sh", "scripts/build-release.sh"}


def dockerignore_patterns():
    patterns = []
    with open(os.path.join(SOURCE_DIR, ".dockerignore")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                patterns.append(line.rstrip("/"))
    return patterns


def ignored(rel, patterns):
    """Docker's rules, as far as our patterns use them: a pattern matches the path
    or one of its parent directories; `**/` matches any number of directories; a
    leading `!` re-includes; the last matching pattern wins."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    result = False
    for p in patterns:
        negate = p.startswith("!")
        pat = p[1:] if negate else p
        alternatives = [pat]
        if pat.startswith("**/"):
            alternatives.append(pat[3:])
        for prefix in prefixes:
            if any(fnmatch.fnmatchcase(prefix, a) and
                   (a.count("/") == prefix.count("/") or "**" in a)
                   for a in alternatives):
                result = not negate
                break
    return result


def copy_context(dest):
    patterns = dockerignore_patterns()
    count = 0
    for root, dirs, files in os.walk(SOURCE_DIR):
        rel_root = os.path.relpath(root, SOURCE_DIR)
        rel_root = "" if rel_root == "." else rel_root + "/"
        dirs[:] = [d for d in dirs if not ignored(rel_root + d, patterns)]
        for name in files:
            rel = rel_root + name
            if ignored(rel, patterns):
                continue
            target = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(os.path.join(root, name), target, follow_symlinks=False)
            count += 1
    return count


def main():
    work = os.path.abspath(sys.argv[1])
    stages = dockerfile_stages(os.path.join(SOURCE_DIR, "Dockerfile"))
    build = stages.get("build")
    if not build:
        fail("the Dockerfile has no stage named build")
    workdir = None
    runs = []
    for ins, args in build:
        if ins not in ALLOWED:
            fail(f"build stage: {ins} {args}: only {', '.join(sorted(ALLOWED))} can be "
                 "replayed outside Docker; put the step in a script under scripts/")
        if ins == "WORKDIR":
            if workdir is not None:
                fail("build stage: more than one WORKDIR")
            workdir = args
        elif ins == "COPY":
            if args.startswith("--"):
                fail(f"build stage: COPY {args}: only plain copies from the context")
        elif ins == "RUN":
            # A cache mount (ccache's directory) changes no result, only speed: outside
            # Docker the host's own ccache plays its part.
            while args.startswith("--mount=type=cache,"):
                args = args.split(None, 1)[1]
            if args.startswith("["):
                fail(f"build stage: RUN {args}: use the shell form")
            words = shlex.split(args)
            scripts = [w for w in words if w.startswith("scripts/")]
            if words[:1] != ["bash"] or not scripts or scripts[0] != words[1] or \
                    words[1] not in ALLOWED_SCRIPTS or any(c in args for c in "&|;`$<>"):
                fail(f"build stage: RUN {args}: each RUN must be `bash <script> [args]` "
                     f"with one of {', '.join(sorted(ALLOWED_SCRIPTS))}, the scripts "
                     "CI runs")
            runs.append(args)
    if workdir is None or not runs:
        fail("build stage: needs a WORKDIR and RUN steps")
    if not any("scripts/build-release.sh" in r for r in runs):
        fail("build stage: no RUN of scripts/build-release.sh")
    # CI builds through `make build`; it must run the same script.
    make = run(["make", "-n", "-C", SOURCE_DIR, "build", "BUILD_DIR=build"])
    if "scripts/build-release.sh build" not in make.stdout:
        fail("`make build` no longer runs scripts/build-release.sh: the Dockerfile and "
             f"CI build differently:\n{make.stdout}")

    if os.path.exists(work):
        shutil.rmtree(work)
    src = os.path.join(work, "src")
    os.makedirs(src)
    n = copy_context(src)
    print(f"context: {n} files copied to {src} (.dockerignore applied)")
    for ins, args in build:
        if ins == "COPY":
            for source in shlex.split(args)[:-1]:
                if not os.path.exists(os.path.join(src, source)):
                    fail(f"build stage: COPY {source}: not in the context (.dockerignore?)")

    for args in runs:
        started = time.monotonic()
        print(f"RUN {args}", flush=True)
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", args], cwd=src,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            fail(f"RUN {args}: exit {r.returncode}")
        print(f"  done in {time.monotonic() - started:.0f} s", flush=True)

    binaries = {}
    for ins, args in stages["runtime"]:
        if ins == "COPY" and "--from=build" in args:
            for source in shlex.split(args)[1:-1]:
                if not source.startswith(workdir.rstrip("/") + "/"):
                    fail(f"runtime COPY --from=build {source}: outside WORKDIR {workdir}")
                path = os.path.join(src, os.path.relpath(source, workdir))
                if not os.access(path, os.X_OK):
                    fail(f"runtime COPY --from=build {source}: the build stage made no "
                         f"such executable ({path})")
                binaries[os.path.basename(path)] = path
    if set(binaries) != {"attnserve", "attnctl"}:
        fail(f"the runtime stage copies {sorted(binaries)}, expected attnserve and attnctl")
    with Server(binaries["attnserve"], ["--workers=1", "--threads_per_worker=1"],
                name="the image's attnserve") as server:
        h = run([binaries["attnctl"], "health", f"--target={server.target}"], timeout=30)
        if h.returncode != 0 or h.stdout.strip() != "SERVING":
            fail(f"the image's attnctl health: {h.returncode} {h.stdout!r} {h.stderr!r}")
        if server.stop() != 0:
            fail(f"the image's attnserve exited {server.proc.returncode} on SIGTERM")
    print("the image's attnserve starts, attnctl health says SERVING, SIGTERM stops it")

    commands = os.path.join(src, "build", "compile_commands.json")
    with open(commands) as f:
        for entry in json.load(f):
            command = entry.get("command") or " ".join(entry.get("arguments", []))
            if "-march" in command:
                fail(f"{entry['file']} compiles with -march: {command}")
    print("no -march in any compile command")
    shutil.rmtree(work)
    print("image build steps: ok")


if __name__ == "__main__":
    main()
