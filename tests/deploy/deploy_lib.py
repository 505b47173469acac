"""Helpers of the deployment checks: real attnserve processes, /metrics scrapes, the
Dockerfile's stages. Standard library only (+ PyYAML where a check parses YAML), run
with Debian's /usr/bin/python3."""

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


class Server:
    """A real attnserve on ephemeral loopback ports; the bound ports come from its
    start line ("... port=N ... metrics_port=M ...")."""

    def __init__(self, binary, args=(), name="attnserve"):
        self.name = name
        self.log = []
        self._lock = threading.Lock()
        argv = [binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"]
        argv += list(args)
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = self.log_text()
            m = re.search(r" port=(\d+)", text)
            if m:
                self.port = int(m.group(1))
                mm = re.search(r" metrics_port=(\d+)", text)
                self.metrics_port = int(mm.group(1)) if mm else 0
                return
            if self.proc.poll() is not None:
                self._reader.join(5)
                fail(f"{name} exited at start with {self.proc.returncode}: "
                     f"{' '.join(map(shlex.quote, argv))}\n{self.log_text()}")
            time.sleep(0.02)
        self.proc.kill()
        fail(f"{name} did not start in 60 s:\n{self.log_text()}")

    def _read(self):
        for line in self.proc.stderr:
            with self._lock:
                self.log.append(line)

    def log_text(self):
        with self._lock:
            return "".join(self.log)

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    def scrape(self):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def stop(self):
        """SIGTERM, as Kubernetes and Docker stop it; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                fail(f"{self.name} did not stop within 60 s of SIGTERM")
        self._reader.join(5)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Prometheus text format -> list of (name, {label: value}, float)."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            fail(f"unparsable /metrics line: {line!r}")
        labels = dict(_LABEL.findall(m.group(2) or ""))
        samples.append((m.group(1), labels, float(m.group(3))))
    return samples


def sample_value(samples, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`."""
    return sum(v for n, l, v in samples
               if n == name and all(l.get(k) == x for k, x in labels.items()))


def run(argv, **kwargs):
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, **kwargs)


# --- Dockerfile ------------------------------------------------------------------

def dockerfile_instructions(path):
    """[(instruction, arguments)] with comments dropped and continuations joined."""
    out, pending = [], ""
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if pending and (not line.strip() or line.lstrip().startswith("#")):
                continue  # Docker skips comments and blank lines inside continuations
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            text = (pending + line).strip()
            pending = ""
            word, _, rest = text.partition(" ")
            out.append((word.upper(), rest.strip()))
    if pending:
        fail(f"{path}: the last instruction ends with a continuation")
    return out


def dockerfile_stages(path):
    """{stage name: [(instruction, arguments)]}, in order; each starts with its FROM."""
    stages, current = {}, None
    for ins, args in dockerfile_instructions(path):
        if ins == "FROM":
            words = args.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else str(len(stages))
            current = stages.setdefault(name, [])
        elif current is None:
            if ins == "ARG":
                continue  # global ARGs before the first FROM
            fail(f"{path}: {ins} before the first FROM")
        current.append((ins, args))
    return stages


def dockerfile_global_args(path):
    """{name: default} of the ARGs before the first FROM (None: no default)."""
    args = {}
    for ins, rest in dockerfile_instructions(path):
        if ins == "FROM":
            break
        if ins == "ARG":
            name, eq, value = rest.partition("=")
            args[name.strip()] = value.strip().strip('"') if eq else None
    return args


def apt_install_packages(run_args):
    """The packages of every `apt-get install` in a shell-form RUN."""
    packages = []
    for segment in re.split(r"&&|;|\|\|", run_args):
        words = shlex.split(segment)
        if "apt-get" in words and "install" in words:
            after = words[words.index("install") + 1:]
            packages += [w for w in after if not w.startswith("-")]
    return packages
