#!/usr/bin/env python3
"""Checks deploy/ without Docker, Kubernetes or Prometheus (none runs here).

  check.py files SLUICE_BIN   every JSON and YAML file under deploy/ parses;
                              every path the compose file and kustomization
                              name exists; the Kubernetes manifests hang
                              together (probes on /readyz and /healthz at the
                              admin port, terminationGracePeriodSeconds above
                              preStop + shutdown_grace, scrape annotations,
                              ConfigMaps and Services that match; the
                              restricted Pod Security Standard on sluice's
                              pods and the quota Redis; the quota Redis's
                              maxmemory with noeviction); each
                              sluice.ini (compose, ConfigMaps) passes
                              `sluice -t --no-resolve` as written, and
                              `sluice -t` with its host names replaced by
                              127.0.0.1 (the names resolve only in a cluster);
                              deploy/docker/sluice.ini, conf/sluice.ini and
                              conf/examples/*.ini pass -t --no-resolve.
  check.py metrics FILE       every sluice_* and process_* metric the Grafana
                              dashboard and the alert rules name is a family
                              in FILE (a /metrics answer), histogram suffixes
                              included; every dashboard query names one, and
                              groups only by labels its metrics carry in FILE
                              (or instance, job). Families FILE exports that
                              the dashboard shows nowhere are listed.
Prints what it checked; exit 1 with a line per problem otherwise."""
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

problems = []


def bad(msg):
    problems.append(msg)
    print("check.py: " + msg, file=sys.stderr)


def load_all():
    docs = {}
    for dirpath, _, names in os.walk("deploy"):
        for n in sorted(names):
            p = os.path.join(dirpath, n)
            try:
                if n.endswith(".json"):
                    docs[p] = [json.load(open(p))]
                elif n.endswith((".yaml", ".yml")):
                    docs[p] = [d for d in yaml.safe_load_all(open(p)) if d is not None]
            except Exception as e:  # a parse error names the file and line
                bad("%s does not parse: %s" % (p, e))
    return docs


def duration_s(v):
    m = re.fullmatch(r"(\d+)(ms|s|m|h)?", v)
    if not m:
        return None
    n, u = int(m.group(1)), m.group(2) or "s"
    return n * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[u]


def ini_value(text, section, key):
    cur = None
    for line in text.splitlines():
        line = line.split(";", 1)[0].split("#", 1)[0].strip()
        if line.startswith("["):
            cur = line.strip("[]").split()[0]
        elif "=" in line and cur == section:
            k, v = (x.strip() for x in line.split("=", 1))
            if k == key:
                return v
    return None


def no_resolve(sluice, path, where):
    """sluice -t --no-resolve on the file <path> as written: what CI can check
    of a file for another network (its names resolve only there)."""
    r = subprocess.run([sluice, "-t", "--no-resolve", "-c", path], capture_output=True, text=True)
    if r.returncode != 0:
        bad("%s: sluice -t --no-resolve fails: %s" % (where, (r.stderr or r.stdout).strip()))
    checked.append(where)


checked = []


def sluice_t(sluice, text, where):
    """sluice -t on <text> as written with --no-resolve, then plain -t with
    host names (not numbers, not localhost) replaced."""
    with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as f:
        f.write(text)
    try:
        no_resolve(sluice, f.name, where)
    finally:
        os.unlink(f.name)
    def repl(m):
        host = m.group(2)
        if re.fullmatch(r"[\d.]+|\*|localhost", host):
            return m.group(0)
        return m.group(1) + "127.0.0.1" + m.group(3)
    fixed = re.sub(r"(=\s*(?:redis://(?:[^@\s]*@)?)?)([A-Za-z0-9.*-]+)(:\d+)", repl, text)
    with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as f:
        f.write(fixed)
    try:
        r = subprocess.run([sluice, "-t", "-c", f.name], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        bad("%s: sluice -t fails: %s" % (where, (r.stderr or r.stdout).strip()))


def check_compose(docs, sluice):
    path = "deploy/compose/docker-compose.yml"
    c = docs.get(path, [None])[0]
    if not isinstance(c, dict) or "services" not in c:
        return bad(path + ": no services")
    base = os.path.dirname(path)
    sl = [n for n, s in c["services"].items() if "build" in s]
    if len(sl) < 2:
        bad(path + ": fewer than two sluice services")
    for name, s in c["services"].items():
        b = s.get("build")
        if b:
            ctx = os.path.normpath(os.path.join(base, b["context"]))
            if not os.path.isfile(os.path.join(ctx, b["dockerfile"])):
                bad("%s: %s: no Dockerfile %s in %s" % (path, name, b["dockerfile"], ctx))
        for v in s.get("volumes", []):
            src, dst = v.split(":")[:2]
            if src.startswith((".", "/")) and not os.path.exists(os.path.join(base, src)):
                bad("%s: %s: volume source %s does not exist" % (path, name, src))
            if dst == "/etc/sluice":
                ini = os.path.join(base, src, "sluice.ini")
                if not os.path.isfile(ini):
                    bad("%s: %s: no sluice.ini in %s" % (path, name, src))
                else:
                    text = open(ini).read()
                    sluice_t(sluice, text, ini)
                    grace = duration_s(ini_value(text, "sluice", "shutdown_grace") or "10s")
                    stop = duration_s(s.get("stop_grace_period", "10s"))
                    if stop is None or stop <= grace:
                        bad("%s: %s: stop_grace_period not above shutdown_grace" % (path, name))
        for d in s.get("depends_on", []):
            if d not in c["services"]:
                bad("%s: %s depends on unknown service %s" % (path, name, d))
    print("compose: %d services, %s checked" % (len(c["services"]), ", ".join(sl)))


def check_kubernetes(docs, sluice):
    objs = []
    for p, ds in docs.items():
        if p.startswith("deploy/kubernetes/"):
            objs += [(p, d) for d in ds if isinstance(d, dict) and "kind" in d]
    cms = {d["metadata"]["name"]: d for _, d in objs if d["kind"] == "ConfigMap"}
    k = docs.get("deploy/kubernetes/kustomization.yaml", [{}])[0]
    for r in k.get("resources", []):
        if not os.path.isfile(os.path.join("deploy/kubernetes", r)):
            bad("kustomization.yaml: resource %s does not exist" % r)
    for name, cm in cms.items():
        if "sluice.ini" in cm.get("data", {}):
            sluice_t(sluice, cm["data"]["sluice.ini"], "ConfigMap " + name)
    deployments = 0
    for p, d in objs:
        if d["kind"] != "Deployment":
            continue
        spec = d["spec"]["template"]["spec"]
        labels = d["spec"]["template"]["metadata"].get("labels", {})
        if d["spec"]["selector"]["matchLabels"].items() - labels.items():
            bad("%s: %s: selector does not match the pod labels" % (p, d["metadata"]["name"]))
        for c in spec["containers"]:
            if not c["image"].startswith("sluice:"):
                continue
            deployments += 1
            where = "%s: %s/%s" % (p, d["metadata"]["name"], c["name"])
            vols = {v["name"]: v for v in spec.get("volumes", [])}
            ini = None
            for m in c.get("volumeMounts", []):
                v = vols.get(m["name"])
                if v is None:
                    bad(where + ": mounts unknown volume " + m["name"])
                elif m["mountPath"] == "/etc/sluice" and "configMap" in v:
                    cm = cms.get(v["configMap"]["name"])
                    if cm is None:
                        bad(where + ": no ConfigMap " + v["configMap"]["name"])
                    else:
                        ini = cm["data"].get("sluice.ini")
            if ini is None:
                bad(where + ": no sluice.ini mounted at /etc/sluice")
                continue
            admin = ini_value(ini, "sluice", "admin") or "127.0.0.1:9121"
            aport = int(admin.rsplit(":", 1)[1])
            if not admin.startswith(("*", "0.0.0.0", "[::]")):
                bad(where + ": admin %s is not reachable by the kubelet's probes" % admin)
            ports = {p_["name"]: p_["containerPort"] for p_ in c.get("ports", [])}
            for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
                g = c.get(probe, {}).get("httpGet")
                if not g or g["path"] != path or ports.get(g["port"], g["port"]) != aport:
                    bad("%s: %s is not GET %s on the admin port %d" % (where, probe, path, aport))
            ann = d["spec"]["template"]["metadata"].get("annotations", {})
            if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != str(aport):
                bad(where + ": prometheus.io annotations missing or not on the admin port")
            grace = duration_s(ini_value(ini, "sluice", "shutdown_grace") or "10s")
            pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
            pre_s = int(pre[1]) if len(pre) == 2 and pre[0] == "sleep" else 0
            tgp = spec.get("terminationGracePeriodSeconds", 30)
            if tgp <= grace + pre_s:
                bad("%s: terminationGracePeriodSeconds %s not above preStop %s + shutdown_grace %s"
                    % (where, tgp, pre_s, grace))
    for p, d in objs:
        if d["kind"] == "Service":
            sel = d["spec"]["selector"].items()
            if not any(o["kind"] == "Deployment" and not sel - o["spec"]["template"]["metadata"]["labels"].items()
                       for _, o in objs):
                bad("%s: Service %s selects no Deployment" % (p, d["metadata"]["name"]))
    if deployments < 2:
        bad("kubernetes: expected the sluice Deployment and the sidecar example")
    print("kubernetes: %d objects, %d sluice containers checked" % (len(objs), deployments))


def restricted(where, pod, containers):
    """The "restricted" Pod Security Standard's rules on <containers> of the
    pod spec <pod>: runAsNonRoot, seccompProfile RuntimeDefault (or
    Localhost), allowPrivilegeEscalation false, capabilities drop ALL (add at
    most NET_BIND_SERVICE), not privileged, no host namespaces."""
    psc = pod.get("securityContext", {})
    for k in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(k):
            bad("%s: %s is set (restricted forbids it)" % (where, k))
    for c in containers:
        w = "%s/%s" % (where, c["name"])
        sc = c.get("securityContext", {})
        if not sc.get("runAsNonRoot", psc.get("runAsNonRoot")):
            bad(w + ": runAsNonRoot is not true (pod or container)")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            bad(w + ": runAsUser is 0")
        sp = sc.get("seccompProfile", psc.get("seccompProfile", {}))
        if sp.get("type") not in ("RuntimeDefault", "Localhost"):
            bad(w + ": no seccompProfile RuntimeDefault (pod or container)")
        if sc.get("allowPrivilegeEscalation") is not False:
            bad(w + ": allowPrivilegeEscalation is not false")
        if sc.get("privileged"):
            bad(w + ": privileged")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            bad(w + ": capabilities do not drop ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            bad(w + ": adds capabilities beyond NET_BIND_SERVICE")


def check_restricted(docs):
    """sluice's own Deployment and the quota Redis follow the restricted
    standard pod-wide; in the sidecar example (the application's containers
    are not ours) the sluice container does."""
    n = 0
    for p in ("deploy/kubernetes/deployment.yaml", "deploy/kubernetes/quota-redis.yaml",
              "deploy/kubernetes/sidecar.yaml"):
        for d in docs.get(p, []):
            if not isinstance(d, dict) or d.get("kind") != "Deployment":
                continue
            pod = d["spec"]["template"]["spec"]
            cs = pod["containers"]
            if p.endswith("sidecar.yaml"):
                cs = [c for c in cs if c["image"].startswith("sluice:")]
            restricted("%s: %s" % (p, d["metadata"]["name"]), pod, cs)
            n += len(cs)
    if n < 3:
        bad("restricted: expected the sluice, quota Redis and sidecar containers, found %d" % n)
    print("restricted Pod Security Standard: %d containers checked" % n)


def redis_args(args):
    """{"--maxmemory": "256mb", ...} from a redis-server argument list."""
    out = {}
    args = [a for a in args if a != "redis-server"]
    for i, a in enumerate(args):
        if a.startswith("--"):
            out[a] = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else ""
    return out


def check_quota_memory(docs):
    """The quota Redis (Kubernetes and Compose) has a maxmemory and the
    noeviction policy: an evicted quota key would be lost without a trace
    (a bucket full again, an override gone); a refused write is counted and
    on_failure applies."""
    found = []
    for d in docs.get("deploy/kubernetes/quota-redis.yaml", []):
        if isinstance(d, dict) and d.get("kind") == "Deployment":
            for c in d["spec"]["template"]["spec"]["containers"]:
                found.append(("quota-redis.yaml " + c["name"], redis_args(c.get("args", []))))
    c = docs.get("deploy/compose/docker-compose.yml", [{}])[0]
    q = c.get("services", {}).get("quota-redis")
    if q is not None:
        found.append(("docker-compose.yml quota-redis", redis_args(q.get("command", []))))
    if len(found) < 2:
        bad("quota Redis: not found in quota-redis.yaml and docker-compose.yml")
    for where, a in found:
        if not a.get("--maxmemory"):
            bad(where + ": no --maxmemory")
        if a.get("--maxmemory-policy") != "noeviction":
            bad(where + ": --maxmemory-policy is %s, not noeviction" % a.get("--maxmemory-policy"))
    print("quota Redis memory policy: %d checked" % len(found))


def names_in(text):
    return set(re.findall(r"\b(?:sluice|process)_[a-z0-9_]+", text))


def scrape(path):
    """A /metrics answer: {family: type}, and {sample name: label names}."""
    fams, labels = {}, {}
    for line in open(path):
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            fams[m.group(1)] = m.group(2)
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ", line)
        if m:
            got = labels.setdefault(m.group(1), set())
            got |= set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(2) or ""))
    return fams, labels


def check_metrics(path):
    """Every metric name in the dashboard and the rules is exported; every
    dashboard query names one; every label it groups by is one the named
    metrics carry (or one Prometheus adds)."""
    fams, labels = scrape(path)
    known = set(fams)
    for f, t in fams.items():
        if t == "histogram":
            known |= {f + "_bucket", f + "_sum", f + "_count"}
    n = 0
    for p in ("deploy/observability/grafana-dashboard.json", "deploy/observability/alerts.yaml"):
        text = open(p).read()
        used = names_in(text)
        n += len(used)
        for u in sorted(used - known):
            bad("%s names %s, which /metrics does not export" % (p, u))
        if not used:
            bad(p + " names no metric")
    dash = json.load(open("deploy/observability/grafana-dashboard.json"))
    exprs = [(pn.get("title"), t["expr"]) for pn in dash["panels"] for t in pn.get("targets", [])]
    grouped = 0
    for title, e in exprs:
        used = names_in(e) & known
        if not used:
            bad("dashboard panel %r: %s names no metric sluice exports" % (title, e))
            continue
        have = {"instance", "job"}
        sampled = False
        for u in used:
            if u in labels:
                sampled = True
                have |= labels[u]
        if not sampled:  # a family without samples in this scrape: nothing to compare
            continue
        for by in re.findall(r"\bby\s*\(([^)]*)\)", e):
            for lb in (x.strip() for x in by.split(",") if x.strip()):
                grouped += 1
                if lb not in have:
                    bad("dashboard panel %r: groups by %r, which %s do not carry" %
                        (title, lb, ", ".join(sorted(used))))
    on_dash = names_in(json.dumps(dash))
    missing = sorted(f for f in fams if (f.startswith("sluice_") or f.startswith("process_"))
                     and not ({f, f + "_bucket", f + "_sum", f + "_count"} & on_dash))
    print("metrics: %d names used, %d families exported, %d queries, %d grouping labels checked"
          % (n, len(fams), len(exprs), grouped))
    if missing:
        print("metrics: exported, not on the dashboard: " + ", ".join(missing))


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    if len(sys.argv) == 3 and sys.argv[1] == "files":
        sluice = os.path.abspath(sys.argv[2]) if os.sep in sys.argv[2] else sys.argv[2]
        docs = load_all()
        print("parsed: " + ", ".join(sorted(docs)))
        a = docs.get("deploy/observability/alerts.yaml", [{}])[0]
        if not a.get("groups") or not all("expr" in r and ("alert" in r or "record" in r)
                                          for g in a["groups"] for r in g["rules"]):
            bad("alerts.yaml: not a Prometheus rule file")
        g = docs.get("deploy/observability/grafana-dashboard.json", [{}])[0]
        if not g.get("panels") or not all(t.get("expr") for pn in g["panels"] for t in pn.get("targets", [])):
            bad("grafana-dashboard.json: no panels, or a target without expr")
        check_compose(docs, sluice)
        check_kubernetes(docs, sluice)
        check_restricted(docs)
        check_quota_memory(docs)
        # The image's own file and the examples, in place (relative paths
        # such as password_file are the file's directory's).
        for p in ["deploy/docker/sluice.ini", "conf/sluice.ini"] + sorted(
                os.path.join("conf/examples", n) for n in os.listdir("conf/examples") if n.endswith(".ini")):
            no_resolve(sluice, p, p)
        print("sluice -t --no-resolve: %d files checked: %s" % (len(checked), ", ".join(checked)))
    elif len(sys.argv) == 3 and sys.argv[1] == "metrics":
        check_metrics(sys.argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
