"""python -m attnserve.bench and attnserve.bench_steps run end to end against a
server they start and report each figure they measure (no figure is held to a
target here)."""

import json
import pathlib
import subprocess
import sys

import pytest

from conftest import SERVER_BINARY


def test_the_client_benchmark_reports_every_figure():
    attnctl = pathlib.Path(SERVER_BINARY).parent.parent / "client" / "attnctl"
    assert attnctl.exists(), f"{attnctl} is not built"
    run = subprocess.run(
        [sys.executable, "-m", "attnserve.bench", "--server", SERVER_BINARY,
         "--attnctl", str(attnctl), "--rounds=1", "--seconds=0.3", "--first_calls=2",
         "--max_overhead=1e9", "--json"],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    median = report["median"]
    for key in ("attnctl_p50_us", "python_p50_us", "first_call_us", "own_us"):
        assert median[key] > 0, key
    assert report["first_call_over_python_p50"] == pytest.approx(
        median["first_call_us"] / median["python_p50_us"])


def test_the_step_benchmark_reports_every_mode():
    run = subprocess.run(
        [sys.executable, "-m", "attnserve.bench_steps", "--server", SERVER_BINARY,
         "--steps=30", "--rounds=2", "--kvcache", "--json"],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    modes = {"unary", "stream", "channel", "tcp", "kvcache_unary", "kvcache_channel",
             "kvcache_tcp"}
    assert set(report["median"]) == modes
    assert [set(r) for r in report["rounds"]] == [modes, modes]
    for m, figures in report["median"].items():
        assert 0 < figures["p50_us"] <= figures["p90_us"], m
