"""The generated gRPC code of attnserve: which generator makes it, and how.

The package ships its generated modules (attnserve/v1/*_pb2*.py and
attnserve/_health_pb2.py), so that it installs with no code generator at all.
At build time setup.py regenerates them from the repository's proto/ when a
generator is at hand, in this order:

  grpc_tools   grpcio-tools (`python -m grpc_tools.protoc`), importable by the
               interpreter that builds
  protoc       protoc and grpc_python_plugin, on PATH (or PROTOC and
               GRPC_PYTHON_PLUGIN)
  shipped      neither, or no proto/ next to python/: the shipped modules

ATTNSERVE_STUBS=grpc_tools|protoc|shipped picks one instead (a generator that is
not there is then an error). tests/python/test_stubs.py checks that the shipped
modules are what proto/ generates.

Run as a script to regenerate the shipped modules after a change to proto/:

    python3 python/_stubgen.py            # the first generator found
    python3 python/_stubgen.py protoc     # a given one
"""

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
PACKAGE = HERE / "attnserve"

# attnserve.v1 keeps the proto's own package path, so the generated imports
# (`from attnserve.v1 import attention_pb2`) resolve inside this package.
WIRE_PROTOS = ["attnserve/v1/attention.proto", "attnserve/v1/sessions.proto",
               "attnserve/v1/shared_memory.proto"]
# The standard health protocol: only its messages; the package calls the one
# method itself (a generated grpc stub would import the `grpc.health` package).
HEALTH_PROTO = "grpc/health/v1/health.proto"

# Every generated module, relative to the package directory attnserve/.
GENERATED = sorted(
    [f"v1/{pathlib.Path(p).stem}_pb2.py" for p in WIRE_PROTOS]
    + [f"v1/{pathlib.Path(p).stem}_pb2_grpc.py" for p in WIRE_PROTOS]
    + ["_health_pb2.py"])

GENERATORS = ("grpc_tools", "protoc")

# What made the shipped modules: the test compares them byte for byte with what
# this generator makes, and any other generator's output by content.
SHIPPED_WITH = ("protoc", "libprotoc 3.21.12")


def proto_root():
    """The repository's proto/ directory (ATTNSERVE_PROTO_DIR, ../proto, ./proto), or None."""
    for candidate in (os.environ.get("ATTNSERVE_PROTO_DIR"), HERE.parent / "proto",
                      HERE / "proto"):
        if candidate and (pathlib.Path(candidate) / WIRE_PROTOS[0]).exists():
            return pathlib.Path(candidate)
    return None


def _protoc_tools():
    """(protoc, grpc_python_plugin) when both are found, else None."""
    protoc = os.environ.get("PROTOC") or shutil.which("protoc")
    plugin = os.environ.get("GRPC_PYTHON_PLUGIN") or shutil.which("grpc_python_plugin")
    if protoc and plugin and os.path.exists(protoc) and os.path.exists(plugin):
        return protoc, plugin
    return None


def available(python=None):
    """The generators usable here, in order of preference. `python`: the
    interpreter that would run grpc_tools (default: this one)."""
    found = []
    if python is None:
        if importlib.util.find_spec("grpc_tools") is not None:
            found.append("grpc_tools")
    elif subprocess.run([python, "-c", "import grpc_tools.protoc"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
        found.append("grpc_tools")
    if _protoc_tools() is not None:
        found.append("protoc")
    return found


def version(generator, python=None):
    """The protoc version a generator runs, e.g. "libprotoc 3.21.12"."""
    cmd = _protoc_command(generator, python)
    if generator == "protoc":
        cmd = cmd[:1]  # the plugin has no version of its own to print
    return subprocess.run([*cmd, "--version"], check=True, capture_output=True,
                          text=True).stdout.strip()


def _protoc_command(generator, python=None):
    if generator == "grpc_tools":
        return [python or sys.executable, "-m", "grpc_tools.protoc"]
    if generator == "protoc":
        tools = _protoc_tools()
        if tools is None:
            raise RuntimeError("protoc and grpc_python_plugin: not both found on PATH "
                               "(or in PROTOC and GRPC_PYTHON_PLUGIN)")
        protoc, plugin = tools
        return [protoc, f"--plugin=protoc-gen-grpc_python={plugin}"]
    raise ValueError(f"generator: expected one of {GENERATORS}, got {generator!r}")


def _include_args(generator, python=None):
    """grpcio-tools carries the well-known types' protos; Debian's protoc finds
    its own (none of attnserve's protos imports them today)."""
    if generator != "grpc_tools":
        return []
    out = subprocess.run(
        [python or sys.executable, "-c",
         "import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "
         "'_proto'))"], check=True, capture_output=True, text=True).stdout.strip()
    return [f"--proto_path={out}"] if os.path.isdir(out) else []


def generate(out_package_dir, generator, root=None, python=None):
    """Writes every module of GENERATED under out_package_dir (a directory laid
    out as attnserve/), made by `generator` from the protos under `root`."""
    root = pathlib.Path(root or proto_root() or "")
    if not (root / WIRE_PROTOS[0]).exists():
        raise RuntimeError(f"proto/ not found (looked in {root}; set ATTNSERVE_PROTO_DIR)")
    cmd = _protoc_command(generator, python) + _include_args(generator, python)
    out_package_dir = pathlib.Path(out_package_dir)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([*cmd, f"--proto_path={root}", f"--python_out={tmp}",
                        f"--grpc_python_out={tmp}", *[str(root / p) for p in WIRE_PROTOS]],
                       check=True)
        subprocess.run([*cmd, f"--proto_path={root}", f"--python_out={tmp}",
                        str(root / HEALTH_PROTO)], check=True)
        v1 = out_package_dir / "v1"
        v1.mkdir(parents=True, exist_ok=True)
        for name in GENERATED:
            source = (pathlib.Path(tmp) / "grpc/health/v1/health_pb2.py"
                      if name == "_health_pb2.py" else pathlib.Path(tmp) / "attnserve" / name)
            shutil.copy(source, out_package_dir / name)


def main(argv):
    if len(argv) > 1 or (argv and argv[0] not in GENERATORS):
        print(f"usage: {sys.argv[0]} [{'|'.join(GENERATORS)}]", file=sys.stderr)
        return 2
    found = available()
    generator = argv[0] if argv else (found[0] if found else None)
    if generator is None:
        print("no generator: install grpcio-tools, or protoc and grpc_python_plugin "
              "(Debian: protobuf-compiler-grpc)", file=sys.stderr)
        return 1
    generate(PACKAGE, generator)
    made_with = (generator, version(generator))
    print(f"regenerated {len(GENERATED)} modules under {PACKAGE} with {made_with[0]} "
          f"({made_with[1]})")
    if made_with != SHIPPED_WITH:
        print(f"note: SHIPPED_WITH in {__file__} says {SHIPPED_WITH}: update it", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
