"""The generated gRPC modules shipped in python/attnserve are what proto/ generates.

Every generator found here (grpcio-tools; protoc with grpc_python_plugin)
regenerates them into a temporary directory. The one that made the shipped
modules (_stubgen.SHIPPED_WITH) must reproduce them byte for byte; any other
must produce the same file descriptors and the same service methods. With no
generator at all the test fails: CI has Debian's protoc and grpc_python_plugin.

After a change to proto/: `python3 python/_stubgen.py` regenerates them.
"""

import ast
import importlib.util
import pathlib
import re

from google.protobuf import descriptor_pb2

from conftest import SOURCE_DIR

PYTHON_DIR = SOURCE_DIR / "python"
SHIPPED = PYTHON_DIR / "attnserve"
REGENERATE = "regenerate them with `python3 python/_stubgen.py`"


def _stubgen():
    spec = importlib.util.spec_from_file_location("_stubgen", PYTHON_DIR / "_stubgen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stubgen = _stubgen()


def file_descriptor(path):
    """The FileDescriptorProto a generated *_pb2.py registers."""
    text = pathlib.Path(path).read_text()
    found = re.search(r"AddSerializedFile\((b'.*?')\)", text, re.S)
    assert found, f"{path}: no serialized file descriptor"
    fd = descriptor_pb2.FileDescriptorProto()
    fd.ParseFromString(ast.literal_eval(found.group(1)))
    return fd


def service_methods(path):
    """(stub classes, method routes) of a generated *_pb2_grpc.py."""
    text = pathlib.Path(path).read_text()
    return (sorted(re.findall(r"^class (\w+)\(", text, re.M)),
            sorted(set(re.findall(r"'(/[\w.]+/\w+)'", text))))


def test_every_proto_of_the_package_has_shipped_modules():
    protos = sorted(p.relative_to(SOURCE_DIR / "proto").as_posix()
                    for p in (SOURCE_DIR / "proto/attnserve/v1").glob("*.proto"))
    assert protos == sorted(stubgen.WIRE_PROTOS), \
        "proto/attnserve/v1 and _stubgen.WIRE_PROTOS differ: add the new proto there"
    shipped = sorted(p.relative_to(SHIPPED).as_posix()
                     for p in SHIPPED.rglob("*_pb2*.py"))
    assert shipped == stubgen.GENERATED, f"shipped modules differ from the list: {REGENERATE}"


def test_shipped_modules_match_what_the_protos_generate(tmp_path):
    found = stubgen.available()
    assert found, ("no gRPC code generator: install grpcio-tools, or protoc and "
                   "grpc_python_plugin (Debian: protobuf-compiler-grpc), to check the "
                   "shipped modules against proto/")
    for generator in found:
        out = tmp_path / generator
        stubgen.generate(out, generator, root=SOURCE_DIR / "proto")
        made_with = (generator, stubgen.version(generator))
        for name in stubgen.GENERATED:
            mine, shipped = out / name, SHIPPED / name
            where = f"{name} ({made_with[0]}, {made_with[1]})"
            if name.endswith("_pb2_grpc.py"):
                assert service_methods(mine) == service_methods(shipped), \
                    f"{where}: the shipped services differ from proto/'s: {REGENERATE}"
            else:
                assert file_descriptor(mine) == file_descriptor(shipped), \
                    f"{where}: the shipped messages differ from proto/'s: {REGENERATE}"
            if made_with == stubgen.SHIPPED_WITH:
                assert mine.read_bytes() == shipped.read_bytes(), \
                    f"{where}: the shipped module is not what this generator makes: {REGENERATE}"


def test_the_installed_package_has_the_generated_modules():
    import attnserve
    installed = pathlib.Path(attnserve.__file__).parent
    for name in stubgen.GENERATED:
        assert (installed / name).is_file(), f"{name} is missing from {installed}"
