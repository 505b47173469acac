"""Every metric the Grafana dashboards and the Prometheus rules query is one a live
attnserve exports, with the label values they select on.

Starts the real server, sends Attend calls (flash and materialized kernels) with
attnctl so that the histograms have series, scrapes /metrics, then checks:
- each dashboard under deploy/grafana/dashboards is valid JSON with unique panel ids
  and a PromQL query on every panel;
- every attnserve_* name in those queries and in deploy/prometheus/rules is a sample
  name in the scrape (histograms as _bucket/_sum/_count), every recording-rule name
  the dashboards use is defined, and every `label="value"` matcher names a label the
  metric has and a value some series of it carries;
- `promtool check metrics` finds nothing to complain about in the scrape.

usage: metrics_names_test.py ATTNSERVE ATTNCTL [PROMTOOL]   (default: promtool on PATH)
"""

import glob
import json
import os
import re
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.dirname(__file__))
from deploy_lib import SOURCE_DIR, Server, fail, parse_metrics, run  # noqa: E402

# Labels Prometheus itself attaches to every scraped series.
TARGET_LABELS = {"job", "instance"}
METRIC = re.compile(r"\b([a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]*|attnserve_[a-zA-Z0-9_]+)\b")
SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def dashboard_queries(path):
    try:
        with open(path) as f:
            dash = json.load(f)
    except json.JSONDecodeError as e:
        fail(f"{path} is not valid JSON: {e}")
    for key in ("uid", "title", "panels"):
        if key not in dash:
            fail(f"{path}: no {key}")
    queries, ids = [], set()

    def walk(panels):
        for p in panels:
            if p.get("id") in ids:
                fail(f"{path}: panel id {p.get('id')} appears twice")
            ids.add(p.get("id"))
            if p.get("type") == "row":
                walk(p.get("panels", []))
                continue
            exprs = [t.get("expr", "") for t in p.get("targets", [])]
            if not exprs or not all(exprs):
                fail(f"{path}: panel {p.get('title')!r} has a target without a query")
            queries.extend((p.get("title"), e) for e in exprs)
    walk(dash["panels"])
    for var in dash.get("templating", {}).get("list", []):
        q = var.get("query")
        if var.get("type") == "query":
            queries.append((f"variable {var['name']}", q["query"] if isinstance(q, dict) else q))
    return queries


def main():
    attnserve, attnctl = sys.argv[1], sys.argv[2]
    promtool = sys.argv[3] if len(sys.argv) > 3 else "promtool"

    queries = []
    dashboards = sorted(glob.glob(os.path.join(SOURCE_DIR, "deploy/grafana/dashboards/*.json")))
    if not dashboards:
        fail("no dashboards under deploy/grafana/dashboards")
    for path in dashboards:
        queries += [(f"{os.path.basename(path)}: {t}", e) for t, e in dashboard_queries(path)]
    recorded = set()
    rule_files = sorted(glob.glob(os.path.join(SOURCE_DIR, "deploy/prometheus/rules/*.yml")))
    for path in rule_files:
        with open(path) as f:
            for group in yaml.safe_load(f)["groups"]:
                for rule in group["rules"]:
                    name = rule.get("record") or rule.get("alert")
                    if "record" in rule:
                        recorded.add(rule["record"])
                    queries.append((f"{os.path.basename(path)}: {name}", rule["expr"]))

    with Server(attnserve, ["--workers=1", "--threads_per_worker=1"]) as server:
        for extra in ([], ["--return_weights"], ["--lq=1", "--lk=512"]):
            r = run([attnctl, "infer", f"--target={server.target}", "--heads=2",
                     "--lq=32"] + extra, timeout=60)
            if r.returncode != 0:
                fail(f"attnctl infer {' '.join(extra)}: exit {r.returncode}: {r.stderr}")
        text = server.scrape()
        server.stop()
    samples = parse_metrics(text)
    series = {}
    for name, labels, _ in samples:
        series.setdefault(name, []).append(labels)
    print(f"scrape: {len(samples)} samples of {len(series)} names")

    checked = set()
    for where, expr in queries:
        # Grafana's variables stand for label values or ranges, not metric names.
        bare = re.sub(r"\$__\w+|\$\{?\w+\}?", "x", expr)
        for name in METRIC.findall(bare):
            if ":" in name:
                if name not in recorded:
                    fail(f"{where}: {name} is no recording rule in deploy/prometheus/rules")
            elif name not in series:
                fail(f"{where}: {name} is not exported by attnserve (scrape has "
                     f"{', '.join(sorted(n for n in series if n.startswith('attnserve_')))})")
            checked.add(name)
        for name, matchers in SELECTOR.findall(expr):
            if name not in series:
                continue  # a recording rule (checked above) or an outside series
            for label, op, value in MATCHER.findall(matchers):
                if label in TARGET_LABELS:
                    continue
                values = {l.get(label) for l in series[name]} - {None}
                if not values:
                    fail(f"{where}: {name} has no label {label!r}")
                if op == "=" and "$" not in value and value not in values:
                    fail(f"{where}: no {name} series has {label}={value!r} "
                         f"(values: {', '.join(sorted(values))})")
                if op == "=~" and "$" not in value and not any(
                        re.fullmatch(value, v) for v in values):
                    fail(f"{where}: {label}=~{value!r} matches no {name} series")
                if op == "=~" and "$" not in value:
                    for alternative in value.split("|"):
                        if re.fullmatch(r"[A-Za-z0-9_]+", alternative) and alternative not in values:
                            fail(f"{where}: {label}=~ names {alternative!r}, which no "
                                 f"{name} series has")
    print(f"{len(queries)} queries over {len(checked)} names: every metric exists")

    check = subprocess.run([promtool, "check", "metrics"], input=text,
                           capture_output=True, text=True, timeout=60)
    if check.returncode != 0:
        fail(f"promtool check metrics on the scrape:\n{check.stdout}{check.stderr}")
    print("promtool check metrics: clean")
    print("metric names: ok")


if __name__ == "__main__":
    main()
