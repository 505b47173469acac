"""A rolling restart under a decoding model: examples/decoder_offload.py's decoder
generates a batch of 8 sequences through a real haproxy (the shipped
deploy/haproxy/haproxy.cfg) in front of two real replicas that hand their
sessions to each other on SIGTERM (--handoff_to). Mid-generation the replica
holding the batch is drained and replaced by a new process on the same ports.
The cache's layer calls go through a TCP step channel of its own, which the
drain ends and the cache opens again on the survivor. The tokens must equal
those of local attention, with no sequence re-created (on_lost never asked) and
nothing re-sent."""

import importlib.util
import re
import shutil
import signal
import subprocess
import time

import torch

from conftest import SOURCE_DIR, ServerProcess, free_port
from attnserve import Client, StepChannel
from attnserve.torch import KVCache

EXAMPLE = SOURCE_DIR / "examples" / "decoder_offload.py"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


def load_example():
    spec = importlib.util.spec_from_file_location("decoder_offload", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Replica:
    """A replica on fixed ports (so that a new process can take its place)."""

    def __init__(self, peer_port):
        self.port, self.metrics_port, self.peer_port = free_port(), free_port(), peer_port
        self.process = None

    def start(self):
        self.process = ServerProcess(
            "--workers=1", "--threads_per_worker=1",
            f"--metrics_listen=127.0.0.1:{self.metrics_port}",
            f"--handoff_to=127.0.0.1:{self.peer_port}", port=self.port)
        return self

    def holds(self, session):
        with Client(f"127.0.0.1:{self.port}", timeout=10) as c:
            try:
                c.session(session).info()
                return True
            except Exception:
                return False


def haproxy_config(port, a, b):
    cfg = (SOURCE_DIR / "deploy" / "haproxy" / "haproxy.cfg").read_text()
    cfg = cfg.replace("0.0.0.0:50050", f"127.0.0.1:{port}")
    for name, r in (("attnserve-a", a), ("attnserve-b", b)):
        cfg = cfg.replace(f"{name}:50051 proto h2 check port 9464",
                          f"127.0.0.1:{r.port} proto h2 check port {r.metrics_port}")
    return cfg


class Restarting:
    """A cache whose layer calls drain the replica holding the batch at call
    `drain_at` (SIGTERM, without waiting) and, at call `replace_at`, wait for that
    process to exit and start a new one on its ports: the decoder keeps calling
    meanwhile, as it would during a rolling update."""

    def __init__(self, cache, replicas, drain_at, replace_at):
        self.cache, self.replicas = cache, replicas
        self.drain_at, self.replace_at = drain_at, replace_at
        self.calls = 0
        self.drained = None

    def attend(self, layer, q, k, v):
        if self.calls == self.drain_at:
            session = f"{self.cache.session_prefix}-0"
            self.drained = next(r for r in self.replicas if r.holds(session))
            self.drained.process.signal(signal.SIGTERM)
        if self.calls == self.replace_at:
            old = self.drained.process
            assert old.proc.wait(60) == 0, old.log()
            self.handoff_log = old.log()
            self.drained.start()
        self.calls += 1
        return self.cache.attend(layer, q, k, v)


def test_a_rolling_restart_loses_no_sequence_and_changes_no_token(tmp_path):
    a = Replica(peer_port=0)
    b = Replica(peer_port=a.port)
    a.peer_port = b.port
    a.start()
    b.start()
    port = free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(haproxy_config(port, a, b))
    balancer = subprocess.Popen([HAPROXY, "-db", "-f", str(config)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        example = load_example()
        cfg = example.Config(vocab=256, hidden=64, layers=4, heads=4, kv_heads=2)
        model = example.build_model(cfg, seed=3)
        prompt = torch.randint(0, cfg.vocab, (8, 24), generator=torch.Generator().manual_seed(4))
        new_tokens = 24
        local_tokens, local_logits, *_ = example.generate(
            model, example.LocalKVCache(cfg.layers), prompt, new_tokens)

        client = Client(f"127.0.0.1:{port}", timeout=30)
        deadline = time.monotonic() + 30
        while True:  # haproxy up and both replicas checked healthy
            try:
                client.server_info()
                break
            except Exception:
                assert time.monotonic() < deadline, balancer.stderr.read()
                time.sleep(0.1)
        asked = []
        cache = KVCache(client, num_layers=cfg.layers, num_kv_heads=cfg.kv_heads,
                        head_dim=cfg.head_dim, on_lost=lambda i, n: asked.append(i) or [])
        # Drain after the prefill and 5 tokens; replace 8 tokens later.
        restarting = Restarting(cache, [a, b], drain_at=cfg.layers * 6,
                                replace_at=cfg.layers * 14)
        with cache:
            tokens, logits, *_ = example.generate(model, restarting, prompt, new_tokens)
            # The layer calls went through a step channel of the cache's own (the
            # balancer, the replicas and this process share the host); the
            # drained replica's ended, and the survivor's took over.
            assert isinstance(cache.transport, StepChannel), cache.step_channel_error
            survivor = b if restarting.drained is a else a
            moved = [f"{cache.session_prefix}-{i}" for i in range(8)]
            assert all(survivor.holds(s) for s in moved)
            assert not any(restarting.drained.holds(s) for s in moved)
        client.close()

        assert restarting.drained is not None
        assert re.search(r"handed 8 sessions \(\d+ bytes\) to ", restarting.handoff_log), \
            restarting.handoff_log
        assert torch.equal(tokens, local_tokens)
        assert (logits - local_logits).abs().max().item() <= 1e-4
        assert asked == [] and cache.recovered == 0
        print(f"rolling restart: 8 sequences, 0 lost, 0 re-prefilled, "
              f"{cache.retried} layer calls retried")
    finally:
        balancer.kill()
        balancer.wait()
        for r in (a, b):
            r.process.stop()
