"""Scale-out on one machine: three attnserve servers behind one `attnctl bench
--target=a,b,c` (round-robin over the targets). Every server must answer, and the
calls must add up: each server's own attnserve_requests_total{method="Attend",
code="OK"} equals what bench reports for that target, and their sum equals bench's ok
count, which equals its request count (no errors, exit code 0).

Skips (exit 77) while attnctl has no bench subcommand.

usage: scale_out_test.py ATTNSERVE ATTNCTL WORK_DIR
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from deploy_lib import Server, fail, parse_metrics, run, sample_value  # noqa: E402

SKIP = 77


def main():
    attnserve, attnctl, work = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
    usage = run([attnctl, "--help"], timeout=30)
    if not any(line.split()[:1] == ["bench"] for line in usage.stdout.splitlines()):
        print("SKIP: attnctl has no bench subcommand yet")
        sys.exit(SKIP)
    os.makedirs(work, exist_ok=True)
    output = os.path.join(work, "bench.json")

    servers = []
    try:
        # One thread each: three servers and the client share the machine.
        for i in range(3):
            servers.append(Server(attnserve, ["--workers=1", "--threads_per_worker=1"],
                                  name=f"server {i}"))
        targets = [s.target for s in servers]
        before = [sample_value(parse_metrics(s.scrape()), "attnserve_requests_total",
                               method="Attend", code="OK") for s in servers]
        argv = [attnctl, "bench", "--target=" + ",".join(targets), "--concurrency=6",
                "--duration=3s", "--warmup=0s", "--output_format=json",
                f"--output={output}", "--heads=2", "--lq=64", "--dim=64"]
        r = run(argv, timeout=120)
        if r.returncode != 0:
            fail(f"{' '.join(argv)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
        try:
            with open(output) as f:
                report = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            fail(f"bench --output={output}: {e}\nstdout: {r.stdout}")
        for key in ("requests", "ok", "errors", "throughput_rps", "latency_us", "targets"):
            if key not in report:
                fail(f"bench JSON lacks {key!r}: {report}")
        ok, requests = report["ok"], report["requests"]
        errors = sum(report["errors"].values()) if report["errors"] else 0
        if ok <= 0 or ok != requests or errors != 0:
            fail(f"bench: requests {requests}, ok {ok}, errors {report['errors']}: "
                 "expected every request to succeed")

        counts = []
        for s, base in zip(servers, before):
            n = sample_value(parse_metrics(s.scrape()), "attnserve_requests_total",
                             method="Attend", code="OK") - base
            counts.append(n)
            if n <= 0:
                fail(f"{s.target} answered no Attend call: round-robin did not reach it "
                     f"(bench targets: {report['targets']})")
            if report["targets"].get(s.target) != n:
                fail(f"{s.target}: its metrics count {n:g} OK Attend calls, bench reports "
                     f"{report['targets'].get(s.target)} (targets: {report['targets']})")
        if sum(counts) != ok:
            fail(f"the servers answered {sum(counts):g} calls in all, bench reports ok {ok}")
        for s in servers:
            if s.stop() != 0:
                fail(f"{s.target} exited {s.proc.returncode} on SIGTERM:\n{s.log_text()}")
        print(f"bench over {len(servers)} servers: {ok} calls, per server "
              f"{', '.join(f'{c:g}' for c in counts)}, {report['throughput_rps']:.0f} calls/s")
        print("scale-out: ok")
    finally:
        for s in servers:
            s.__exit__()


if __name__ == "__main__":
    main()
