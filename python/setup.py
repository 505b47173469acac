"""The gRPC code of the package at build time (everything else is in pyproject.toml).

The package ships its generated modules, so it builds with no code generator.
When grpcio-tools is importable, or protoc and grpc_python_plugin are on PATH,
and the repository's proto/ is next to python/, the build regenerates them from
proto/ instead (_stubgen.py says the order and ATTNSERVE_STUBS), and keeps the
shipped ones if the regenerated code does not load with the protobuf runtime of
the building interpreter.
"""

import os
import pathlib
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _stubgen  # noqa: E402  (next to this file; in the sdist through MANIFEST.in)

CHOICES = ("auto", "shipped") + _stubgen.GENERATORS


def _say(message):
    print(f"attnserve: {message}", file=sys.stderr)


def _runtime_loads(package_dir):
    """Whether the generated modules under package_dir import with this
    interpreter's protobuf and grpc (None when they are not installed here, as
    in an isolated build: nothing to check against)."""
    if subprocess.run([sys.executable, "-c", "import google.protobuf, grpc"],
                      stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        return None
    # Empty package files, so that the staged modules import on their own even
    # where an attnserve is installed already.
    for init in (package_dir / "__init__.py", package_dir / "v1" / "__init__.py"):
        init.touch()
    modules = ", ".join("attnserve." + m[:-3].replace("/", ".") for m in _stubgen.GENERATED)
    # Run in the staging directory: `-c` puts the working directory first on sys.path.
    result = subprocess.run([sys.executable, "-c", f"import {modules}"],
                            cwd=package_dir.parent, capture_output=True, text=True)
    if result.returncode != 0:
        _say(result.stderr.strip().splitlines()[-1] if result.stderr.strip() else
             "the generated code does not import")
    return result.returncode == 0


def _pick():
    choice = os.environ.get("ATTNSERVE_STUBS", "auto") or "auto"
    if choice not in CHOICES:
        raise SystemExit(f"attnserve: ATTNSERVE_STUBS={choice!r}: expected one of "
                         f"{', '.join(CHOICES)}")
    if choice == "shipped":
        return None, "ATTNSERVE_STUBS=shipped"
    root = _stubgen.proto_root()
    found = _stubgen.available()
    if choice != "auto":
        if root is None:
            raise SystemExit(f"attnserve: ATTNSERVE_STUBS={choice}, but proto/ is not next "
                             "to python/ (set ATTNSERVE_PROTO_DIR)")
        if choice not in found:
            raise SystemExit(f"attnserve: ATTNSERVE_STUBS={choice}, but it is not available "
                             "(grpc_tools: pip install grpcio-tools; protoc: protoc and "
                             "grpc_python_plugin on PATH)")
        return choice, None
    if root is None:
        return None, "no proto/ next to python/"
    if not found:
        return None, "neither grpcio-tools nor protoc with grpc_python_plugin found"
    return found[0], None


def build_stubs(out_package_dir):
    generator, why = _pick()
    if generator is None:
        _say(f"gRPC code: the shipped modules ({why})")
        return
    with tempfile.TemporaryDirectory() as tmp:
        staged = pathlib.Path(tmp) / "attnserve"
        _stubgen.generate(staged, generator)
        loads = _runtime_loads(staged)
        if loads is False and os.environ.get("ATTNSERVE_STUBS", "auto") == "auto":
            _say(f"gRPC code: the shipped modules (what {generator} made does not load "
                 "with this protobuf)")
            return
        for name in _stubgen.GENERATED:
            (out_package_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (out_package_dir / name).write_bytes((staged / name).read_bytes())
    _say(f"gRPC code: generated from proto/ by {generator} ({_stubgen.version(generator)})")


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        build_stubs(pathlib.Path(self.build_lib) / "attnserve")


setup(cmdclass={"build_py": BuildPyWithStubs})
