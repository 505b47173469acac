"""Fixtures of the Python client's tests: real attnserve processes.

ctest (tests/python/CMakeLists.txt) sets ATTNSERVE_SERVER_BINARY and
ATTNSERVE_SOURCE_DIR and runs pytest in a venv where the package is installed.
Nothing here skips: a missing binary, package or dependency fails the run, and
a test that calls pytest.skip is reported as a failure.
"""

import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

# Imported here so that a missing dependency fails collection of every test.
import matplotlib  # noqa: F401
import numpy  # noqa: F401
import pytest
import torch  # noqa: F401

import attnserve


def _required_env(name):
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set (ctest sets it; see tests/python/CMakeLists.txt)")
    return value


SERVER_BINARY = _required_env("ATTNSERVE_SERVER_BINARY")
SOURCE_DIR = pathlib.Path(_required_env("ATTNSERVE_SOURCE_DIR"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """attnserve on 127.0.0.1 with its stderr captured."""

    def __init__(self, *args, port=0, wait=True):
        self.args = list(args)
        self.requested_port = port
        self.proc = subprocess.Popen(
            [SERVER_BINARY, f"--listen=127.0.0.1:{port}", "--metrics_listen=", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self._log = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.port = None
        if wait:
            self.wait_started()

    def _read(self):
        for line in self.proc.stderr:
            with self._lock:
                self._log.append(line)

    def log(self):
        with self._lock:
            return "".join(self._log)

    def wait_started(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log().splitlines():
                if " port=" in line:
                    self.port = int(line.split(" port=")[1].split()[0])
                    self.metrics_port = int(line.split(" metrics_port=")[1].split()[0])
                    return self
            if self.proc.poll() is not None:
                self._reader.join(5)
                raise RuntimeError(f"attnserve exited with {self.proc.returncode}: {self.log()}")
            time.sleep(0.01)
        raise RuntimeError(f"attnserve did not start in {timeout} s: {self.log()}")

    def metric(self, series):
        """A sample of /metrics (start the server with --metrics_listen=127.0.0.1:0)."""
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                      timeout=10).read().decode()
        for line in body.splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
        return 0.0

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)


@pytest.fixture
def start_server():
    """start_server(*flags, port=0) -> a running ServerProcess, stopped after the test."""
    started = []

    def start(*args, **kw):
        s = ServerProcess(*args, **kw)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def model_repository(tmp_path_factory):
    out = tmp_path_factory.mktemp("models")
    subprocess.run([sys.executable, str(SOURCE_DIR / "examples/make_model_repository"),
                    str(out)], check=True, stdout=subprocess.DEVNULL)
    return out


@pytest.fixture(scope="session")
def server(model_repository):
    """One server for the tests that need no special flags: 2 workers of 1 thread
    (calls of one test may run at once), the example models."""
    s = ServerProcess("--workers=2", "--threads_per_worker=1",
                      f"--model_repository={model_repository}")
    yield s
    s.stop()


@pytest.fixture
def client(server):
    with attnserve.Client(server.target, timeout=60) as c:
        yield c


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped tests count as failures here: {report.longrepr}"
