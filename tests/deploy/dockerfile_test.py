"""The Dockerfile's promises, checked without a Docker engine:
- the runtime stage's apt packages cover `ldd` of attnserve and attnctl (each library
  mapped to its Debian package with dpkg -S; libc6 comes with the base image), and
  it installs no package that neither binary needs;
- both stages start from BASE_IMAGE, by default a public Debian 12 image (so that a
  plain `docker build .` or `podman build .` works); the offline image test passes
  the base scripts/podman-base.sh makes as --build-arg;
- no architecture in any instruction (no amd64/x86_64 paths or package qualifiers),
  so that the image builds for any platform;
- non-root numeric USER, EXPOSE 50051 9464, ENTRYPOINT ["attnserve"], OCI labels,
  no -march=native, a .dockerignore that keeps .git, build trees and .deps out;
- its HEALTHCHECK command succeeds against a live server (and fails against a
  stopped one).

usage: dockerfile_test.py ATTNSERVE ATTNCTL
"""

import json
import os
import re
import shlex
import sys

sys.path.insert(0, os.path.dirname(__file__))
from deploy_lib import (SOURCE_DIR, Server, apt_install_packages,  # noqa: E402
                        dockerfile_global_args, dockerfile_instructions,
                        dockerfile_stages, fail, run)

BASE_IMAGE_PACKAGES = {"libc6"}
# Docker Hub's Debian 12 images, short or fully qualified.
PUBLIC_BASE = re.compile(r"(docker\.io/(library/)?)?debian:bookworm(-slim)?")
# Words that tie an instruction to one architecture.
ARCH_SPECIFIC = re.compile(
    r"x86_64|x86-64|amd64|i386|i686|aarch64|arm64|armhf|ppc64|s390x|/lib64\b|-linux-gnu")


def library_packages(binary):
    """{Debian package: [sonames]} of every library `ldd binary` resolves."""
    out = run(["ldd", binary])
    if out.returncode != 0:
        fail(f"ldd {binary}: {out.stderr}")
    libraries = []
    for line in out.stdout.splitlines():
        if "not found" in line:
            fail(f"ldd {binary}: {line.strip()}")
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if m:  # linux-vdso and the dynamic loader have no "=>"
            soname, path = m.groups()
            candidates = {path, os.path.realpath(path)}
            for p in list(candidates):  # merged /usr: dpkg may know either spelling
                if p.startswith("/usr/lib/"):
                    candidates.add(p[len("/usr"):])
                elif p.startswith("/lib/"):
                    candidates.add("/usr" + p)
            libraries.append((soname, path, candidates))
    # One dpkg call for every path: it prints "package[:arch]: path" for the known
    # ones (and complains about the others, which is fine).
    every = sorted({c for _, _, cs in libraries for c in cs})
    owner = {}
    for line in run(["dpkg", "-S"] + every).stdout.splitlines():
        package, _, path = line.partition(": ")
        owner[path.strip()] = package.split(",")[0].split(":")[0].strip()
    packages = {}
    for soname, path, candidates in libraries:
        found = [owner[c] for c in sorted(candidates) if c in owner]
        if not found:
            fail(f"{binary} needs {soname} ({path}), which no Debian package provides: "
                 "a library built by hand cannot be installed in the runtime stage")
        packages.setdefault(found[0], []).append(soname)
    return packages


def main():
    attnserve, attnctl = sys.argv[1], sys.argv[2]
    dockerfile = os.path.join(SOURCE_DIR, "Dockerfile")
    stages = dockerfile_stages(dockerfile)
    if list(stages)[:1] != ["build"] or "runtime" not in stages:
        fail(f"Dockerfile: expected stages build, runtime; got {list(stages)}")
    runtime = stages["runtime"]
    if list(stages)[-1] != "runtime":
        fail("Dockerfile: the runtime stage must be the last one (the default target)")
    # Both stages start from BASE_IMAGE, by default a public Debian 12 image; the
    # image test, which reaches no registry, passes the local base of
    # scripts/podman-base.sh instead.
    base_arg = dockerfile_global_args(dockerfile).get("BASE_IMAGE")
    if not base_arg or not PUBLIC_BASE.fullmatch(base_arg):
        fail(f"Dockerfile ARG BASE_IMAGE={base_arg}: the default must be a public Debian "
             "12 image (docker.io/library/debian:bookworm-slim), so that `docker build .` "
             "works with no arguments")
    for stage in ("build", "runtime"):
        if stages[stage][0][1].split()[0] != "${BASE_IMAGE}":
            fail(f"{stage} stage FROM {stages[stage][0][1]}, expected ${{BASE_IMAGE}}")
    with open(os.path.join(SOURCE_DIR, "scripts", "podman-base.sh")) as f:
        made = re.search(r'image="\$\{1:-([^}]+)\}"', f.read())
    with open(os.path.join(SOURCE_DIR, "tests", "deploy", "image_test.sh")) as f:
        image_test = f.read()
    tested = re.search(r'base_image="\$\{BASE_IMAGE:-([^}]+)\}"', image_test)
    if not made or not tested or made.group(1) != tested.group(1):
        fail("tests/deploy/image_test.sh must build on the base scripts/podman-base.sh "
             f"makes ({made.group(1) if made else 'not found'}), got "
             f"{tested.group(1) if tested else 'none'}")
    commands = image_test.replace("\\\n", " ").splitlines()
    podman_builds = [c for c in commands if " build " in c and "Dockerfile" in c
                     and not c.lstrip().startswith("#")]
    if not podman_builds or not all('--build-arg BASE_IMAGE="$base_image"' in b
                                    for b in podman_builds):
        fail("every podman build in tests/deploy/image_test.sh must pass "
             '--build-arg BASE_IMAGE="$base_image" (the Dockerfile\'s default base is '
             "on Docker Hub)")
    for ins, args in dockerfile_instructions(dockerfile):
        if ARCH_SPECIFIC.search(args):
            fail(f"Dockerfile: {ins} {args}: names an architecture "
                 f"({ARCH_SPECIFIC.search(args).group(0)}); the image must build for any")

    # Shared libraries.
    installed = []
    for ins, args in runtime:
        if ins == "RUN":
            installed += apt_install_packages(args)
    needed = {}
    for binary in (attnserve, attnctl):
        for package, sonames in library_packages(binary).items():
            needed.setdefault(package, set()).update(sonames)
    missing = sorted(set(needed) - set(installed) - BASE_IMAGE_PACKAGES)
    extra = sorted(set(installed) - set(needed))
    if missing:
        fail("the runtime stage does not install " + ", ".join(
            f"{p} ({', '.join(sorted(needed[p]))})" for p in missing)
             + ": add them to its apt-get install list")
    if extra:
        fail(f"the runtime stage installs {', '.join(extra)}, which neither binary "
             "links: remove them")
    print(f"runtime libraries: {len(needed)} packages cover ldd of both binaries")

    # The image's shape.
    def args_of(ins):
        return [a for i, a in runtime if i == ins]
    users = args_of("USER")
    if not users or not re.fullmatch(r"[1-9][0-9]*(:[0-9]+)?", users[-1]):
        fail(f"runtime USER must be a numeric non-root uid (runAsNonRoot), got {users}")
    exposed = set(" ".join(args_of("EXPOSE")).split())
    if not {"50051", "9464"} <= exposed:
        fail(f"EXPOSE {sorted(exposed)}: expected 50051 and 9464")
    entry = args_of("ENTRYPOINT")
    if not entry or json.loads(entry[-1]) != ["attnserve"]:
        fail(f'ENTRYPOINT must be ["attnserve"], got {entry}')
    labels = " ".join(args_of("LABEL"))
    for key in ("title", "description", "version", "revision", "source"):
        if f"org.opencontainers.image.{key}=" not in labels:
            fail(f"runtime stage lacks the OCI label org.opencontainers.image.{key}")
    for ins, args in runtime:
        if ins == "COPY" and "--from=build" in args:
            for src in args.split()[1:-1]:
                if src.startswith("/src/build/") and not os.path.basename(src) in (
                        "attnserve", "attnctl"):
                    fail(f"the runtime stage copies {src}: only the two binaries belong")
    health = args_of("HEALTHCHECK")
    if len(health) != 1 or " CMD " not in f" {health[0]} ":
        fail(f"expected one HEALTHCHECK ... CMD [...], got {health}")
    health_cmd = json.loads(health[0].split(" CMD ", 1)[1] if " CMD " in health[0]
                            else health[0].split("CMD ", 1)[1])
    if health_cmd[:2] != ["attnctl", "health"]:
        fail(f"HEALTHCHECK must run attnctl health, got {health_cmd}")
    with open(dockerfile) as f:
        if "march=native" in f.read():
            fail("the Dockerfile mentions -march=native: the image must run on any x86-64")
    for script in ("scripts/build-release.sh", "scripts/install-deps.sh"):
        with open(os.path.join(SOURCE_DIR, script)) as f:
            if re.search(r"-march=(?!x86-64\b)", f.read()):
                fail(f"{script} sets -march")
    with open(os.path.join(SOURCE_DIR, ".dockerignore")) as f:
        ignored = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    for pattern in (".git", "build*", ".deps"):
        if pattern not in ignored:
            fail(f".dockerignore lacks {pattern}")

    # The HEALTHCHECK, as Docker runs it, against a live server: only --target changes.
    def health_argv(target):
        argv = [attnctl] + [a for a in health_cmd[1:] if not a.startswith("--target")]
        return argv + [f"--target={target}"]
    with Server(attnserve, ["--workers=1", "--threads_per_worker=1"]) as server:
        r = run(health_argv(server.target), timeout=30)
        if r.returncode != 0 or r.stdout.strip() != "SERVING":
            fail(f"HEALTHCHECK {shlex.join(health_argv(server.target))}: exit "
                 f"{r.returncode}, {r.stdout!r} {r.stderr!r}")
        target = server.target
        if server.stop() != 0:
            fail(f"attnserve exited {server.proc.returncode} after SIGTERM:\n{server.log_text()}")
    r = run(health_argv(target), timeout=30)
    if r.returncode == 0:
        fail("HEALTHCHECK succeeded against a stopped server")
    print(f"HEALTHCHECK {shlex.join(health_cmd)}: SERVING on a live server, "
          f"exit {r.returncode} on a stopped one")
    print("dockerfile: ok")


if __name__ == "__main__":
    main()
