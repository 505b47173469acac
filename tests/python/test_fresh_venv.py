"""`pip install ./python` in a fresh venv with no code generator on PATH.

As a user's environment would be: grpcio, protobuf and numpy already installed
(here Debian's, through --system-site-packages), no protoc and no
grpc_python_plugin, no package index. The package installs with its shipped
gRPC modules (or, where grpcio-tools is importable, modules it generates), then
makes calls against a real server. A wheel built the same way holds the modules.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

from conftest import SOURCE_DIR

# What the venv's interpreter runs: the server's target comes as argv[1].
CALLS = r"""
import pathlib, shutil, sys
import numpy as np
import attnserve

assert shutil.which("protoc") is None and shutil.which("grpc_python_plugin") is None
assert pathlib.Path(attnserve.__file__).is_relative_to(pathlib.Path(sys.prefix)), \
    attnserve.__file__

rng = np.random.default_rng(1)
q = rng.standard_normal((1, 4, 6, 16)).astype(np.float32)
k = rng.standard_normal((1, 2, 9, 16)).astype(np.float32)
v = rng.standard_normal((1, 2, 9, 16)).astype(np.float32)


def reference(q, k, v):
    k, v = (np.repeat(x, q.shape[1] // x.shape[1], axis=1).astype(np.float64) for x in (k, v))
    s = q.astype(np.float64) @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ v


with attnserve.Client(sys.argv[1], timeout=60) as client:
    assert client.health() == "SERVING"
    out = client.attend(q, k, v, None, 0.0, False, enable_gqa=True)
    assert np.abs(out - reference(q, k, v)).max() < 1e-5
    outs = list(client.attend_many([(q, k, v)] * 2))
    assert all(np.abs(o - reference(q, k, v)).max() < 1e-5 for o in outs)
    session = client.create_session("install-test", num_kv_heads=2, head_dim=16)
    session.close()
print("calls ok", attnserve.__file__)
"""


def _env(venv, home):
    """An environment whose PATH has the venv and nothing else: no protoc, no
    grpc_python_plugin, whatever the host has."""
    return {
        "PATH": str(venv / "bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INDEX": "1",
        "PIP_NO_CACHE_DIR": "1",
    }


def _run(cmd, env, cwd):
    result = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, (f"{' '.join(map(str, cmd))} failed:\n"
                                    f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result.stdout + result.stderr


def _base_python():
    # The interpreter this venv was made from (Debian's /usr/bin/python3 in ctest).
    return getattr(sys, "_base_executable", None) or sys.executable


def test_pip_install_without_protoc_in_a_fresh_venv(server, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    # pip builds in the directory it is given: a copy, as a user's checkout.
    shutil.copytree(SOURCE_DIR / "python", src / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    shutil.copytree(SOURCE_DIR / "proto", src / "proto")
    venv = tmp_path / "venv"
    _run([_base_python(), "-m", "venv", "--system-site-packages", venv], dict(os.environ),
         tmp_path)
    env = _env(venv, tmp_path)
    python = venv / "bin" / "python"

    probe = _run([python, "-c", "import shutil, importlib.util; print("
                  "shutil.which('protoc'), shutil.which('grpc_python_plugin'), "
                  "importlib.util.find_spec('grpc_tools') is not None)"], env, tmp_path)
    protoc, plugin, has_grpc_tools = probe.split()
    assert (protoc, plugin) == ("None", "None"), probe

    log = _run([python, "-m", "pip", "install", "-v", "--no-index", "--no-build-isolation",
                "--no-deps", src / "python"], env, tmp_path)
    expected = ("generated from proto/ by grpc_tools" if has_grpc_tools == "True"
                else "gRPC code: the shipped modules")
    assert f"attnserve: {expected}" in log, log[-4000:]

    site = pathlib.Path(_run([python, "-c", "import attnserve, os; "
                              "print(os.path.dirname(attnserve.__file__))"],
                             env, tmp_path).strip())
    assert site.is_relative_to(venv), site
    if has_grpc_tools != "True":
        for module in sorted(site.rglob("*_pb2*.py")):
            shipped = SOURCE_DIR / "python" / "attnserve" / module.relative_to(site)
            assert module.read_bytes() == shipped.read_bytes(), module

    out = _run([python, "-c", CALLS, server.target], env, tmp_path)
    assert "calls ok" in out, out


def test_a_wheel_builds_without_protoc(tmp_path):
    src = tmp_path / "python"
    shutil.copytree(SOURCE_DIR / "python", src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    _run([_base_python(), "-m", "venv", "--system-site-packages", venv], dict(os.environ),
         tmp_path)
    env = _env(venv, tmp_path)
    # No proto/ beside python/ either (as from an sdist): the shipped modules.
    log = _run([venv / "bin" / "python", "-m", "pip", "wheel", "-v", "--no-index",
                "--no-build-isolation", "--no-deps", "-w", tmp_path / "dist", src],
               env, tmp_path)
    assert "attnserve: gRPC code: the shipped modules (no proto/ next to python/)" in log
    wheels = list((tmp_path / "dist").glob("attnserve-*.whl"))
    assert len(wheels) == 1, wheels
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    for module in ["attnserve/_health_pb2.py", "attnserve/v1/attention_pb2.py",
                   "attnserve/v1/attention_pb2_grpc.py", "attnserve/v1/sessions_pb2_grpc.py",
                   "attnserve/v1/shared_memory_pb2_grpc.py", "attnserve/client.py"]:
        assert module in names, f"{module} is not in {wheels[0].name}"
    assert not any(n.startswith("_stubgen") for n in names)
