"""Every YAML file under deploy/ parses, and the Compose stack and the Kubernetes base
say what docs/operations.md promises:
- Kubernetes: the kustomization lists every manifest and only existing ones, and
  names every container's image in `images:` with an explicit tag (where a user
  points it at the image they built and pushed); the
  Deployment derives --threads_per_worker from limits.cpu (downward API), sets
  requests = limits, native gRPC probes on 50051, a preStop hook, a
  terminationGracePeriodSeconds above preStop + --shutdown_grace, non-root and a
  read-only root filesystem; a ClusterIP and a headless Service select its pods; the
  HPA and PDB target it; the ServiceMonitor scrapes the metrics port of exactly one
  Service, named attnserve (the rules' job label).
- The shared-memory overlay (deploy/k8s-shm-sidecar) adds to the base Deployment a
  memory-backed emptyDir (medium Memory, with a sizeLimit) mounted at /dev/shm in
  attnserve and in a sidecar, and --shared_memory, without --max_connection_age
  (which would end every registration with its connection); the patched flags start
  a live attnserve; its own `images:` names the image of every container it adds
  as the base does (the base's entry does not reach them).
- Compose: three attnserve replicas, Prometheus and Grafana; every mounted path exists;
  the stop grace exceeds --shutdown_grace.
- The flags in both are real: a live attnserve starts with each set of arguments
  (addresses swapped for loopback ephemeral ports) and stops cleanly on SIGTERM.
Every alert has a promtool case where it fires and one where it does not.
With kubectl on PATH, `kubectl kustomize deploy/k8s` must also render.

usage: manifests_test.py ATTNSERVE
"""

import copy
import os
import re
import shutil
import sys

import yaml

sys.path.insert(0, os.path.dirname(__file__))
from deploy_lib import SOURCE_DIR, Server, fail, run  # noqa: E402

DEPLOY = os.path.join(SOURCE_DIR, "deploy")


def load_all_yaml():
    docs = {}
    for root, _, files in os.walk(DEPLOY):
        for name in sorted(files):
            if not name.endswith((".yaml", ".yml")):
                continue
            path = os.path.join(root, name)
            try:
                with open(path) as f:
                    docs[os.path.relpath(path, SOURCE_DIR)] = [
                        d for d in yaml.safe_load_all(f) if d is not None]
            except yaml.YAMLError as e:
                fail(f"{os.path.relpath(path, SOURCE_DIR)} does not parse: {e}")
    if not docs:
        fail("no YAML files under deploy/")
    return docs


def duration_seconds(text):
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", text)
    if not m or not text:
        fail(f"cannot read duration {text!r}")
    return int(m.group(1) or 0) * 60 + int(m.group(2) or 0)


def flag(args, name, default=None):
    value = default
    for a in args:
        if a.startswith(f"--{name}="):
            value = a.split("=", 1)[1]
    return value


def start_with(attnserve, args, where):
    """Starts attnserve with `args` (addresses swapped for loopback port 0)."""
    args = [a for a in args if not a.startswith(("--listen=", "--metrics_listen="))]
    with Server(attnserve, args, name=f"attnserve with the {where} flags") as s:
        if s.stop() != 0:
            fail(f"attnserve with the {where} flags exited {s.proc.returncode} on "
                 f"SIGTERM:\n{s.log_text()}")
        return s.log_text()


def check_kubernetes(docs, attnserve):
    base = "deploy/k8s"
    kust = docs.get(f"{base}/kustomization.yaml")
    if not kust:
        fail(f"{base}/kustomization.yaml missing")
    listed = kust[0].get("resources", [])
    files = sorted(p[len(base) + 1:] for p in docs
                   if p.startswith(base + "/") and not p.endswith("kustomization.yaml"))
    for r in listed:
        if r not in files:
            fail(f"{base}/kustomization.yaml lists {r}, which does not exist")
    for f in files:
        if f not in listed:
            fail(f"{base}/{f} is not listed in kustomization.yaml resources")
    objects = {}
    for f in listed:
        for d in docs[f"{base}/{f}"]:
            for key in ("apiVersion", "kind", "metadata"):
                if key not in d:
                    fail(f"{base}/{f}: a document without {key}")
            objects.setdefault(d["kind"], []).append(d)

    deployments = objects.get("Deployment", [])
    if len(deployments) != 1:
        fail(f"expected one Deployment, got {len(deployments)}")
    dep = deployments[0]
    name = dep["metadata"]["name"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    selector = dep["spec"]["selector"]["matchLabels"]
    if not selector.items() <= pod_labels.items():
        fail("the Deployment's selector does not match its pod labels")
    pod = dep["spec"]["template"]["spec"]
    containers = [c for c in pod["containers"] if c["name"] == "attnserve"]
    if not containers:
        fail("no container named attnserve in the Deployment")
    c = containers[0]
    args = c.get("args", [])

    images = {e.get("name"): e for e in kust[0].get("images", [])}
    for container in pod["containers"] + pod.get("initContainers", []):
        image = container.get("image", "")
        name = image.split("@")[0].rsplit(":", 1)[0] if ":" in image.split("/")[-1] \
            else image.split("@")[0]
        entry = images.get(name)
        if not entry or not entry.get("newName") or not str(entry.get("newTag", "")):
            fail(f"container {container['name']}: image {image!r} needs an entry in "
                 f"{base}/kustomization.yaml images: (name {name}, newName, newTag), "
                 "where users name the image they built")
        if str(entry["newTag"]) == "latest":
            fail(f"{base}/kustomization.yaml: image {name} tagged latest; name a version")

    res = c.get("resources", {})
    if "cpu" not in res.get("limits", {}) or res.get("requests", {}).get("cpu") != res["limits"]["cpu"]:
        fail(f"the container needs a CPU limit equal to its request, got {res}")
    env = {e["name"]: e for e in c.get("env", [])}
    threads = flag(args, "threads_per_worker", "")
    m = re.fullmatch(r"\$\((\w+)\)", threads)
    if not m:
        fail(f"--threads_per_worker must come from the CPU limit as $(VAR), got {threads!r}")
    ref = env.get(m.group(1), {}).get("valueFrom", {}).get("resourceFieldRef", {})
    if ref.get("resource") != "limits.cpu" or str(ref.get("divisor", "1")) != "1":
        fail(f"${m.group(1)} must be resourceFieldRef limits.cpu with divisor 1, got {ref}")
    workers = int(flag(args, "workers", "1"))
    limit = str(res["limits"]["cpu"])
    cores = int(limit[:-1]) / 1000 if limit.endswith("m") else float(limit)
    if cores != int(cores):
        # The downward API rounds a fractional limit up: 2500m would read as 3 threads
        # on 2.5 CPUs of quota (oversubscribed and throttled).
        fail(f"limits.cpu {limit} is not a whole number of CPUs")
    if workers > max(1, int(cores)):
        fail(f"--workers={workers} exceeds the CPU limit {limit}")

    ports = {p["containerPort"]: p.get("name") for p in c.get("ports", [])}
    if ports.get(50051) != "grpc" or ports.get(9464) != "metrics":
        fail(f"container ports must be grpc 50051 and metrics 9464, got {ports}")
    for probe in ("readinessProbe", "livenessProbe"):
        if c.get(probe, {}).get("grpc", {}).get("port") != 50051:
            fail(f"{probe} must be a native grpc probe on port 50051, got {c.get(probe)}")
    pre_stop = c.get("lifecycle", {}).get("preStop", {})
    if not pre_stop:
        fail("the container needs a preStop hook")
    pre_stop_s = 0
    cmd = pre_stop.get("exec", {}).get("command", [])
    if cmd[:1] == ["sleep"]:
        pre_stop_s = int(cmd[1])
    elif "sleep" in pre_stop:
        pre_stop_s = int(pre_stop["sleep"]["seconds"])
    grace = duration_seconds(flag(args, "shutdown_grace", "30s"))
    tgps = pod.get("terminationGracePeriodSeconds", 30)
    if tgps < pre_stop_s + grace + 5:
        fail(f"terminationGracePeriodSeconds {tgps} < preStop {pre_stop_s} s + "
             f"--shutdown_grace {grace} s + 5 s margin")
    psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
    if not (psc.get("runAsNonRoot") or csc.get("runAsNonRoot")):
        fail("runAsNonRoot is not set")
    if not csc.get("readOnlyRootFilesystem"):
        fail("readOnlyRootFilesystem is not set on the attnserve container")
    if csc.get("allowPrivilegeEscalation") is not False:
        fail("allowPrivilegeEscalation must be false")
    if "ALL" not in csc.get("capabilities", {}).get("drop", []):
        fail("capabilities must drop ALL")

    services = objects.get("Service", [])
    headless = [s for s in services if s["spec"].get("clusterIP") == "None"]
    cluster = [s for s in services if s["spec"].get("clusterIP") != "None"
               and s["spec"].get("type", "ClusterIP") == "ClusterIP"]
    if len(headless) != 1 or len(cluster) != 1:
        fail(f"expected one ClusterIP and one headless Service, got {len(cluster)} and {len(headless)}")
    for s in services:
        if not s["spec"]["selector"].items() <= pod_labels.items():
            fail(f"Service {s['metadata']['name']} does not select the Deployment's pods")
        for p in s["spec"]["ports"]:
            if p["targetPort"] not in ports.values() and p["targetPort"] not in ports:
                fail(f"Service {s['metadata']['name']} targets port {p['targetPort']}, "
                     "which the container does not expose")

    for kind in ("HorizontalPodAutoscaler", "PodDisruptionBudget", "ServiceMonitor"):
        if len(objects.get(kind, [])) != 1:
            fail(f"expected one {kind}, got {len(objects.get(kind, []))}")
    hpa = objects["HorizontalPodAutoscaler"][0]["spec"]
    if hpa["scaleTargetRef"] != {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}:
        fail(f"the HPA targets {hpa['scaleTargetRef']}, not Deployment {name}")
    if not 1 <= hpa["minReplicas"] <= hpa["maxReplicas"]:
        fail("HPA replicas out of order")
    pdb = objects["PodDisruptionBudget"][0]["spec"]
    if not pdb["selector"]["matchLabels"].items() <= pod_labels.items():
        fail("the PDB does not select the Deployment's pods")
    if pdb.get("minAvailable", 0) and int(pdb["minAvailable"]) >= hpa["minReplicas"]:
        fail("the PDB's minAvailable blocks every eviction at minReplicas")
    sm = objects["ServiceMonitor"][0]["spec"]
    endpoint_ports = {e["port"] for e in sm["endpoints"]}
    scraped = [s for s in services
               if sm["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
               and endpoint_ports & {p["name"] for p in s["spec"]["ports"]}]
    if [s["metadata"]["name"] for s in scraped] != ["attnserve"]:
        fail("the ServiceMonitor must scrape exactly one Service, attnserve (the job "
             f"label of the alerts); it scrapes {[s['metadata']['name'] for s in scraped]}")

    start_with(attnserve, [a.replace(m.group(0), "1") for a in args], "Deployment")

    kubectl = shutil.which("kubectl")
    if kubectl:
        r = run([kubectl, "kustomize", os.path.join(SOURCE_DIR, base)], timeout=120)
        if r.returncode != 0:
            fail(f"kubectl kustomize {base}: {r.stderr}")
        rendered = [d for d in yaml.safe_load_all(r.stdout) if d]
        if len(rendered) != sum(len(v) for v in objects.values()):
            fail("kubectl kustomize rendered a different set of objects")
        print(f"kubectl kustomize {base}: {len(rendered)} objects")
    print(f"kubernetes: {sum(len(v) for v in objects.values())} objects ok")


def json_patch(doc, op, where):
    """The JSON Patch (RFC 6902) operations add, remove and test on nested dicts
    and lists; anything else fails."""
    keys = op["path"].lstrip("/").split("/")
    target = doc
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    last = keys[-1]
    index = (len(target) if last == "-" else int(last)) if isinstance(target, list) else last
    if op["op"] == "add":
        if isinstance(target, list):
            target.insert(index, op["value"])
        else:
            target[index] = op["value"]
    elif op["op"] == "remove":
        del target[index]
    elif op["op"] == "test":
        if target[index] != op["value"]:
            fail(f"{where}: test of {op['path']} expects {op['value']!r}, the base has "
                 f"{target[index]!r}")
    else:
        fail(f"{where}: unexpected patch operation {op}")


def check_shm_overlay(docs, attnserve):
    base = "deploy/k8s-shm-sidecar"
    kust = docs.get(f"{base}/kustomization.yaml")
    if not kust:
        fail(f"{base}/kustomization.yaml missing")
    kust = kust[0]
    if kust.get("resources") != ["../k8s"]:
        fail(f"{base} must build on ../k8s, got resources {kust.get('resources')}")
    dep = copy.deepcopy([d for d in docs["deploy/k8s/deployment.yaml"]
                         if d["kind"] == "Deployment"][0])
    patches = kust.get("patches", [])
    if len(patches) != 1 or patches[0].get("target", {}).get("kind") != "Deployment":
        fail(f"{base}: expected one patch of the Deployment, got {patches}")
    for op in yaml.safe_load(patches[0]["patch"]):
        json_patch(dep, op, base)
    pod = dep["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    memory = [n for n, v in volumes.items()
              if v.get("emptyDir", {}).get("medium") == "Memory"]
    if len(memory) != 1:
        fail(f"{base}: expected one emptyDir with medium Memory, got volumes {volumes}")
    name = memory[0]
    if not volumes[name]["emptyDir"].get("sizeLimit"):
        fail(f"{base}: the memory-backed emptyDir needs a sizeLimit (its pages count "
             "against the pod's memory)")
    mounted = [c["name"] for c in pod["containers"]
               if any(m["name"] == name and m["mountPath"] == "/dev/shm"
                      for m in c.get("volumeMounts", []))]
    if "attnserve" not in mounted or len(mounted) < 2:
        fail(f"{base}: /dev/shm must be the emptyDir in attnserve and a sidecar; "
             f"mounted in {mounted}")
    base_images = docs["deploy/k8s/kustomization.yaml"][0].get("images", [])
    base_names = {c["name"] for d in docs["deploy/k8s/deployment.yaml"]
                  if d["kind"] == "Deployment"
                  for c in d["spec"]["template"]["spec"]["containers"]}
    overlay_images = {e.get("name"): e for e in kust.get("images", [])}
    for c in pod["containers"]:
        if c["name"] in base_names:
            continue
        entry = overlay_images.get(c.get("image"))
        same = [e for e in base_images if e.get("name") == c.get("image")]
        if not entry or not same or entry != same[0]:
            fail(f"{base}: the added container {c['name']} (image {c.get('image')!r}) "
                 "needs the base's images: entry for it in this overlay's images: (the "
                 "base's entry retags the base's containers only)")
    server = [c for c in pod["containers"] if c["name"] == "attnserve"][0]
    if "--shared_memory" not in server["args"]:
        fail(f"{base}: attnserve needs --shared_memory, args {server['args']}")
    if flag(server["args"], "max_connection_age", "0") not in ("0", "0s"):
        fail(f"{base}: --max_connection_age would end every registration with its "
             f"connection; args {server['args']}")
    for c in pod["containers"]:
        csc = c.get("securityContext", {})
        if not csc.get("readOnlyRootFilesystem") or csc.get("allowPrivilegeEscalation") is not False:
            fail(f"{base}: container {c['name']} must keep a read-only root and no "
                 "privilege escalation")
    kubectl = shutil.which("kubectl")
    if kubectl:
        r = run([kubectl, "kustomize", os.path.join(SOURCE_DIR, base)], timeout=120)
        if r.returncode != 0:
            fail(f"kubectl kustomize {base}: {r.stderr}")
        rendered = [d for d in yaml.safe_load_all(r.stdout)
                    if d and d["kind"] == "Deployment"]
        def essentials(p):  # images are retagged by the base's kustomization
            return (p.get("volumes"),
                    [(c["name"], c.get("args"), c.get("volumeMounts"))
                     for c in p["containers"]])
        if len(rendered) != 1 or essentials(rendered[0]["spec"]["template"]["spec"]) \
                != essentials(pod):
            fail(f"kubectl kustomize {base} renders other volumes, mounts or flags than "
                 "the patch applied here")
    cpu_var = re.fullmatch(r"\$\((\w+)\)", flag(server["args"], "threads_per_worker"))
    start_with(attnserve, [a.replace(cpu_var.group(0), "1") for a in server["args"]],
               "shared-memory overlay")
    print(f"{base}: /dev/shm is a memory emptyDir shared by {', '.join(mounted)}")


def check_compose(docs, attnserve):
    path = "deploy/compose/compose.yaml"
    compose = docs.get(path)
    if not compose:
        fail(f"{path} missing")
    services = compose[0]["services"]
    replicas = [n for n in services if n.startswith("attnserve")]
    if len(replicas) < 3 or "prometheus" not in services or "grafana" not in services:
        fail(f"{path}: expected 3 attnserve replicas, prometheus and grafana; got {list(services)}")
    compose_dir = os.path.join(SOURCE_DIR, "deploy/compose")
    for name, svc in services.items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")) and not os.path.exists(
                    os.path.join(compose_dir, source)):
                fail(f"{path}: {name} mounts {source}, which does not exist")
        build = svc.get("build")
        if build and not os.path.exists(os.path.join(compose_dir, build["context"],
                                                     build.get("dockerfile", "Dockerfile"))):
            fail(f"{path}: {name} builds from a missing Dockerfile")
    args = services[replicas[0]]["command"]
    for n in replicas:
        if services[n]["command"] != args:
            fail(f"{path}: the replicas run different flags")
        grace = duration_seconds(flag(args, "shutdown_grace", "30s"))
        stop = duration_seconds(services[n].get("stop_grace_period", "10s"))
        if stop <= grace:
            fail(f"{path}: {n} stop_grace_period {stop} s <= --shutdown_grace {grace} s")
    workers = int(flag(args, "workers", "1"))
    threads = int(flag(args, "threads_per_worker", "0"))
    cpus = float(services[replicas[0]].get("cpus", 0))
    if cpus and workers * threads > cpus:
        fail(f"{path}: workers × threads = {workers * threads} exceeds cpus {cpus}")
    prometheus_config = docs["deploy/prometheus/prometheus.yml"][0]
    scraped = [t for job in prometheus_config["scrape_configs"] if job["job_name"] == "attnserve"
               for sc in job.get("static_configs", []) for t in sc["targets"]]
    if sorted(scraped) != sorted(f"{n}:9464" for n in replicas):
        fail(f"deploy/prometheus/prometheus.yml scrapes {scraped}, not the replicas {replicas}")
    start_with(attnserve, args, "Compose")
    print(f"compose: {len(services)} services ok")


def check_rule_tests(docs):
    """Every alert has a promtool case where it fires and one where it stays quiet."""
    alerts = {r["alert"] for path, d in docs.items() if path.startswith("deploy/prometheus/rules/")
              for g in d[0]["groups"] for r in g["rules"] if "alert" in r}
    fires, quiet = set(), set()
    for path, d in docs.items():
        if path.startswith("deploy/prometheus/tests/"):
            for t in d[0]["tests"]:
                for a in t.get("alert_rule_test", []):
                    (fires if a.get("exp_alerts") else quiet).add(a["alertname"])
    for alert in sorted(alerts):
        if alert not in fires or alert not in quiet:
            fail(f"deploy/prometheus/tests: {alert} needs a case where it fires and one "
                 "where it does not")
    print(f"prometheus rule tests: each of {len(alerts)} alerts fires and stays quiet")


def main():
    attnserve = sys.argv[1]
    docs = load_all_yaml()
    print(f"{len(docs)} YAML files parse")
    check_rule_tests(docs)
    check_kubernetes(docs, attnserve)
    check_shm_overlay(docs, attnserve)
    check_compose(docs, attnserve)
    print("manifests: ok")


if __name__ == "__main__":
    main()
