"""Generates the gRPC stubs from the repository's proto/ at build time.

The stubs are made by protoc and grpc_python_plugin (Debian: protobuf-compiler and
protobuf-compiler-grpc, the same gRPC release as python3-grpcio), not committed,
so they always match proto/. Everything else is in pyproject.toml.
"""

import os
import pathlib
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
# attnserve.v1 keeps the proto's own package path, so the generated imports
# (`from attnserve.v1 import attention_pb2`) resolve inside this package.
WIRE_PROTOS = ["attnserve/v1/attention.proto", "attnserve/v1/sessions.proto",
               "attnserve/v1/shared_memory.proto"]
# The standard health protocol: only its messages; the package calls the one
# method itself (a generated grpc stub would import the `grpc.health` package).
HEALTH_PROTO = "grpc/health/v1/health.proto"


def _find_tool(env, name, package):
    path = os.environ.get(env) or shutil.which(name) or f"/usr/bin/{name}"
    if not os.path.exists(path):
        raise SystemExit(
            f"attnserve: {name} not found (set {env}, or install Debian's {package})")
    return path


def _proto_root():
    for candidate in (os.environ.get("ATTNSERVE_PROTO_DIR"), HERE.parent / "proto",
                      HERE / "proto"):
        if candidate and (pathlib.Path(candidate) / WIRE_PROTOS[0]).exists():
            return pathlib.Path(candidate)
    raise SystemExit("attnserve: proto/ not found next to python/ "
                     "(set ATTNSERVE_PROTO_DIR to the repository's proto directory)")


def generate_stubs(out_package_dir):
    protoc = _find_tool("PROTOC", "protoc", "protobuf-compiler")
    plugin = _find_tool("GRPC_PYTHON_PLUGIN", "grpc_python_plugin",
                        "protobuf-compiler-grpc")
    root = _proto_root()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([protoc, f"--proto_path={root}", f"--python_out={tmp}",
                        f"--plugin=protoc-gen-grpc_python={plugin}",
                        f"--grpc_python_out={tmp}",
                        *[str(root / p) for p in WIRE_PROTOS]], check=True)
        subprocess.run([protoc, f"--proto_path={root}", f"--python_out={tmp}",
                        str(root / HEALTH_PROTO)], check=True)
        v1 = out_package_dir / "v1"
        v1.mkdir(parents=True, exist_ok=True)
        for generated in (pathlib.Path(tmp) / "attnserve" / "v1").glob("*.py"):
            shutil.copy(generated, v1 / generated.name)
        shutil.copy(pathlib.Path(tmp) / "grpc/health/v1/health_pb2.py",
                    out_package_dir / "_health_pb2.py")


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        generate_stubs(pathlib.Path(self.build_lib) / "attnserve")


setup(cmdclass={"build_py": BuildPyWithStubs})
