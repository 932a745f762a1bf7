"""What a multi-node job costs an MLflow server as bridge builds it (issue
39; docs/multinode.md "Server capacity"). Started by bench/job_cost.sh.

  job_cost.py count --requests R.jsonl --nodes N --t0 T --t1 T --dur S --ticks TICKS --out counted.json
      classifies the requests bench/countproxy.py wrote down while N real
      bridges ran one job: by kind, at the start (before the first whole
      minute counted), a node a minute while the job runs (whole minutes
      from 90 s after the start to 15 s before the first node's end), and at
      the end (from the first node's end on); with the server's own CPU over
      the minutes counted (TICKS: bench/job_cost.sh's /proc samples).
  job_cost.py measure --url U --pgids P --counted counted.json --metrics-doc docs/metrics.md --ns 16,128,1024 --backend B --out costs.jsonl
      fills a job of each size (the job's run with the job's tags and a line
      a node as the real job wrote them, a run a node with its tags and a
      sample), for a CPU node (as counted) and an 8-GPU node (its sample
      from docs/metrics.md's catalogue, 8 InfiniBand ports; its lines
      GPU8_LINES; its run's tags the stand-in GPU node's), and times each
      kind of request counted
      by sending the real request again (its run ids, experiment, key,
      steps and times replaced) from the server's CPU (median over batches).
  job_cost.py table --counted counted.json --costs costs-sqlite.jsonl [--costs costs-postgres.jsonl]
      the tables: counted requests times measured costs.
"""
import argparse
import json
import os
import re
import statistics
import sys
import time
import urllib.parse

import jobsize  # bench/ is sys.path[0]

HZ = os.sysconf("SC_CLK_TCK")
ENDED = re.compile(r"\bstatus=(FINISHED|FAILED|KILLED)\b")
# The evaluator's job series (b39-eval, not in this build until it lands):
# min, median and max of 12 signals and two counts, a point each a minute.
MODEL_JOB_SERIES = jobsize.JOB_SERIES


# An 8-GPU node's lines (docs/multinode.md's examples: every field of a
# busy 8-GPU node with InfiniBand, report.TestLatestInTheLine's while it
# runs): the stand-in NVML's one GPU writes fewer.
GPU8_LINES = {
    "live": "who=node-1023 status=RUNNING attempt=0 at=1796583600000 run=0123456789abcdef0123456789abcdef samples=360 "
            "ws_peak_mb=250.0 mem_limit_mb=256.4 cpu_limit=112 throttled_pct=12.5 gpu_j=8623841.5 cpu_j=1234568 "
            "sug_mem_mb=320 sug_cpu=104 cost=1234.56 cpu_mean=95.967 cpu_peak=110.97 gpu_util_pct=97.312 sm_active=0.781 "
            "net_mbps=12.345 ib_mbps=18235 xid=0 ecc_unc=2 l_sm=0.735 l_gu=97 l_gw=650 l_mhz=1980 l_gm=88.3 l_cpu=85.7 "
            "l_thr=12.3 l_ws=61.5 l_nrx=123.5 l_ntx=99.9 l_irx=98765.4 l_itx=96000",
    "end": "who=node-17 status=FINISHED exit=0 reason=success attempt=0 ended=1796656418450 "
           "clock=\"tsc, synchronized (max error 16 ms)\" run=5f0c2b7e9a0d4c1e8b3f6a2d7c9e1b40 samples=360 ws_peak_mb=412611 "
           "mem_limit_mb=1717987 cpu_limit=112 throttled_pct=0.412 gpu_j=8623841 cpu_j=1234568 dur_s=3600.2 cpu_mean=95.967 "
           "cpu_peak=110.97 gpu_util_pct=97.312 sm_active=0.781 net_mbps=12.345 ib_mbps=18235 xid=0 ecc_unc=0",
}


# ---------------------------------------------------------------- count

def norm_key(k):
    k = re.sub(r"^bridge\.state\.[^/]+", "bridge.state.<node>", k)
    k = re.sub(r"^bridge\.failed\.[^/]+", "bridge.failed.<node>", k)
    return k


def line_fields(v):
    return dict(re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', v))


class Runs:
    """The job's run, the nodes' runs and the candidates, from the
    requests."""

    def __init__(self, recs):
        state_targets = {}
        self.node_of = {}
        for r in recs:
            for k in r.get("tag_keys", []):
                if k.startswith("bridge.state."):
                    state_targets[r["run_id"]] = state_targets.get(r["run_id"], 0) + 1
            if "line" in r:
                f = line_fields(r["line"])
                if "run" in f and "who" in f:
                    self.node_of[f["run"]] = f["who"]
        self.job = max(state_targets, key=state_targets.get)
        self.created = {r["created"]: r.get("create_tags", {}) for r in recs if "created" in r}
        for run, tags in self.created.items():
            if tags.get("mlflow.parentRunId") == self.job and "bridge.node_id" in tags:
                self.node_of.setdefault(run, tags["bridge.node_id"])
        self.key = self.created.get(self.job, {}).get("bridge.job_key", "")

    def target(self, run):
        if not run:
            return ""
        if run == self.job:
            return "job run"
        if run in self.node_of:
            return "node run"
        return "candidate run"


def kind(r, runs):
    """A request's kind, and "read" for a read of the job's run (whether
    another kind is a node's or the job's, count decides by its count)."""
    path = r["path"].split("/mlflow/", 1)[-1] if "/mlflow/" in r["path"] else r["path"]
    target = runs.target(r.get("run_id"))
    if path == "runs/log-batch" and r.get("metrics") and target == "node run":
        return "sample: log-batch to the node's run", "node"
    if r.get("job_series"):
        return "job series: log-batch to the job's run", "job"
    if path == "runs/get" and target == "job run":
        return "runs/get of the job's run", "read"
    keys = sorted({norm_key(k) for k in r.get("tag_keys", [])})
    if target == "job run" and keys:
        if keys == ["bridge.state.<node>"]:
            return f"line: {path} to the job's run", "node"
        return f"{path} to the job's run [{', '.join(keys)}]", "node"
    what = f"{r['method']} {path}" if r["method"] == "GET" else path
    if target:
        what += f" ({target})"
    if path == "runs/search" and "filter" in r:
        f = r["filter"]
        f = f.replace(runs.job, "<job run>").replace(runs.key, "<key>") if runs.key else f.replace(runs.job, "<job run>")
        f = re.sub(r"'node-\d+'", "'<node>'", f)
        what += f" [{f}]"
    if r["status"] != 200:
        what += f" -> {r['status']}"
    if r.get("client_gone"):
        what += " (the client gave up)"
    return what, "node"


def interp(samples, t):
    for (ta, ca), (tb, cb) in zip(samples, samples[1:]):
        if ta <= t <= tb:
            return ca + (cb - ca) * (t - ta) / (tb - ta)
    raise ValueError(f"no CPU sample around {t}")


def count(a):
    recs = [json.loads(line) for line in open(a.requests) if line.strip()]
    recs = [r for r in recs if r["path"] != "/health"]
    recs.sort(key=lambda r: r["t"])
    runs = Runs(recs)
    n = a.nodes
    ended = [r["t"] for r in recs if "line" in r and ENDED.search(r["line"])]
    t_end = min(ended) if ended else a.t1
    ws = a.t0 + 90
    minutes = int((t_end - 15 - ws) // 60)
    if minutes < 1:
        sys.exit(f"job_cost.py: the job ran too short to count a whole minute (DUR={a.dur}); use DUR=240 or more")
    we = ws + 60 * minutes
    phases = {"start": {}, "live": {}, "end": {}}
    examples = {}
    for r in recs:
        k, scope = kind(r, runs)
        ph = "start" if r["t"] < ws else "live" if r["t"] < we else "end" if r["t"] >= t_end - 2 else None
        if ph is None or (ph == "start" and (scope == "read" or k.startswith(("sample:", "line:")))):
            continue  # the first minutes' samples and lines: counted while live
        e = phases[ph].setdefault(k, {"count": 0, "scope": scope, "req_bytes": 0, "resp_bytes": 0})
        e["count"] += 1
        e["req_bytes"] += r["req_bytes"]
        e["resp_bytes"] += r["resp_bytes"]
        # The request to send again: a CPU node's (node-2's where it is
        # one), and node-1's sample and line (the stand-in GPU).
        node = runs.node_of.get(r.get("run_id", "")) or line_fields(r.get("line", "")).get("who")
        ex = examples.setdefault(ph, {}).setdefault(k, {})
        slot = "gpu" if node == "node-1" else "cpu"
        if "body" in r or r["method"] == "GET":
            if slot not in ex or node == "node-2":
                ex[slot] = {"method": r["method"], "path": r["path"], "query": r.get("query", ""),
                            "run_id": r.get("run_id", ""), "status": r["status"], "body": r.get("body", ""), "node": node}
    for ph, kinds in phases.items():
        for e in kinds.values():
            # A node's kind is made about once a node (a minute, while
            # live); a job's, once a job whatever its size.
            if e["scope"] != "read":
                e["scope"] = "node" if e["count"] / (minutes if ph == "live" else 1) >= n / 2 else "job"
            e["req_bytes"] //= e["count"]
            e["resp_bytes"] //= e["count"]
    cpu = [tuple(map(float, line.split())) for line in open(a.ticks) if line.strip()]
    live_cpu_ms = (interp(cpu, we) - interp(cpu, ws)) / HZ * 1000
    all_cpu_ms = (cpu[-1][1] - cpu[0][1]) / HZ * 1000

    # The runs' tags as the job left them, for measure to rebuild, and the
    # job run's as they were while it ran.
    tags, live_tags = {}, {}
    for r in recs:
        if r["t"] >= t_end - 2 and not live_tags:
            live_tags = dict(tags.get(runs.job, {}))
        if r["path"].endswith("runs/create") and "created" in r:
            tags.setdefault(r["created"], {}).update(r.get("create_tags", {}))
        if "body" not in r or not r.get("run_id"):
            continue
        b = json.loads(r["body"])
        if r["path"].endswith("runs/set-tag"):
            tags.setdefault(r["run_id"], {})[b["key"]] = b["value"]
        elif r["path"].endswith("runs/log-batch"):
            for t in b.get("tags") or []:
                tags.setdefault(r["run_id"], {})[t["key"]] = t["value"]
    lines = {"live": {}, "end": {}}
    for r in recs:
        if "line" in r:
            f = line_fields(r["line"])
            ph = "end" if ENDED.search(r["line"]) else "live"
            if ws <= r["t"] or ph == "end":
                lines[ph][f.get("who")] = r["line"]
    node_run = {v: k for k, v in runs.node_of.items()}
    out = {
        "nodes": n, "minutes": minutes, "window": [ws, we], "t_end": t_end, "dur": a.dur,
        "load": open("/proc/loadavg").read().split()[:3],
        "server_cpu_ms_live_per_node_minute": live_cpu_ms / (n * minutes),
        "server_cpu_ms_all": all_cpu_ms,
        "phases": phases, "examples": examples, "key": runs.key, "job_run": runs.job,
        "job_tags": tags.get(runs.job, {}),
        "job_tags_live": live_tags,
        "node_tags": {nd: tags.get(node_run.get(nd, ""), {}) for nd in ("node-1", "node-2")},
        "node_runs": {nd: node_run.get(nd, "") for nd in ("node-1", "node-2")},
        "lines": {ph: {nd: lines[ph].get(nd, "") for nd in ("node-0", "node-1", "node-2")} for ph in lines},
    }
    json.dump(out, open(a.out, "w"), indent=1)
    print(f"== counted {len(recs)} requests of {n} nodes; {minutes} whole minutes while the job ran; "
          f"the server's CPU over them: {live_cpu_ms:,.0f} ms, {out['server_cpu_ms_live_per_node_minute']:.1f} ms a node a minute "
          f"(over the whole job, start and end included: {all_cpu_ms:,.0f} ms)")
    for ph, label in (("start", "at the start, a node"), ("live", "a node a minute"), ("end", "at the end, a node")):
        print(f"-- {label}:")
        for k, e in sorted(phases[ph].items(), key=lambda x: -x[1]["count"]):
            per = e["count"] / n / (minutes if ph == "live" else 1)
            jobper = e["count"] / (minutes if ph == "live" else 1)
            print(f"   {per:7.3f}  ({jobper:6.2f} a job)  {e['scope']:4}  {k}  ({e['req_bytes']} B in, {e['resp_bytes']} B out)")
    for ph in lines:
        for nd, v in lines[ph].items():
            print(f"   {ph} line {nd}: {len(v)} chars")


# ---------------------------------------------------------------- measure

def gpu_sample_keys(cpu_keys, metrics_doc):
    """An 8-GPU node's sample: the CPU node's series and, from
    docs/metrics.md, each GPU's (GPM activity included), the job's GPU
    memory and 8 InfiniBand ports, less the steady ones (sent only when
    they change), as bench/jobsize.py builds its gpu8 shape."""
    sec = jobsize.doc_series(metrics_doc)
    per_gpu = {n.replace("gpu_N_", "") for s in ("Per GPU: `gpu_N_…`", "Activity (GPM): `gpu_N_prof_…`")
               for n, steady in sec[s] if n.startswith("gpu_N_") and not steady}
    keys = set(cpu_keys)
    for i in range(8):
        keys |= {f"system/gpu_{i}_{n}" for n in per_gpu}
    keys |= {"system/" + n for n, steady in sec["The job's own GPU memory: `process_gpu_…`"] if not steady}
    for d in range(8):
        keys |= {"system/" + n.replace("<device>", f"mlx5_{d}").replace("<port>", "1")
                 for n, steady in sec["InfiniBand and RoCE ports"] if n.startswith("node_infiniband_") and not steady}
    return sorted(keys)


class Filled:
    """A job of a shape in an experiment of its own, filled node by node to
    each N, as the counted job left its runs."""

    def __init__(self, cl, c, shape, metrics_doc):
        self.cl, self.c, self.shape = cl, c, shape
        self.tmpl = "node-1" if shape == "gpu8" else "node-2"
        self.step = 10 ** 6
        self.exp_name = f"job-cost-{shape}-{time.time_ns()}"
        self.exp = cl.post("experiments/create", {"name": self.exp_name})["experiment_id"]
        self.key = f"{c['key']}-{shape}-{time.time_ns()}"
        def job_tags(tags):
            return {k: v for k, v in tags.items() if not k.startswith(("bridge.state.", "bridge.failed.", "mlflow.runName"))}
        jt = job_tags(c["job_tags_live"])
        jt["bridge.job_key"] = self.key
        # What the job's end adds to the job's run (the report, the note):
        # written for the end's requests, deleted after.
        self.end_tags = {k: v for k, v in job_tags(c["job_tags"]).items() if k not in jt}
        self.job = cl.post("runs/create", {"experiment_id": self.exp, "run_name": "train.py",
                                           "start_time": int(time.time() * 1000)})["run"]["info"]["run_id"]
        self.log_tags(self.job, jt)
        cl.post("runs/log-parameter", {"run_id": self.job, "key": "bridge.election", "value": "eligible:1000"})
        self.series_counted = any(k.startswith("job series") for ph in c["phases"].values() for k in ph)
        if not self.series_counted:  # the evaluator's series, modelled
            self.post_job_series()
        self.node_tags = {k: v for k, v in c["node_tags"][self.tmpl].items()}
        sample = c["examples"]["live"]["sample: log-batch to the node's run"]
        cpu_keys = [m["key"] for m in json.loads(sample["cpu"]["body"])["metrics"]]
        self.sample_keys = gpu_sample_keys(cpu_keys, metrics_doc) if shape == "gpu8" else cpu_keys
        self.runs = {}
        self.nodes = 0
        print(f"== {shape}: a sample of {len(self.sample_keys)} points; lines of {len(self.line('live', 'node-0')) + 32} characters "
              f"while it runs, {len(self.line('end', 'node-0')) + 32} at the end", flush=True)

    def log_tags(self, run, tags):
        items = [{"key": k, "value": v} for k, v in tags.items()]
        for i in range(0, len(items), 100):
            self.cl.post("runs/log-batch", {"run_id": run, "tags": items[i:i + 100]})

    def next_step(self):
        self.step += 1
        return self.step

    def post_sample(self, run):
        s = self.next_step()
        body = {"run_id": run, "metrics": [{"key": k, "value": 352.321536, "timestamp": 1796656418450 + s, "step": s}
                                           for k in self.sample_keys]}
        return len(self.cl.call("POST", "runs/log-batch", body))

    def post_job_series(self):
        s = self.next_step()
        return len(self.cl.call("POST", "runs/log-batch", {"run_id": self.job, "metrics": [
            {"key": k, "value": 0.5, "timestamp": 1796656418450 + s, "step": s} for k in MODEL_JOB_SERIES]}))

    def line(self, ph, node):
        v = GPU8_LINES[ph] if self.shape == "gpu8" else self.c["lines"][ph]["node-2"]
        v = re.sub(r"\bwho=\S+", f"who={node}", v)
        return re.sub(r"\brun=\w+", f"run={self.runs.get(node, '')}", v)

    def fill(self, upto):
        for i in range(self.nodes, upto):
            node = f"node-{i}"
            tags = dict(self.node_tags)
            tags.update({"mlflow.parentRunId": self.job, "bridge.node_id": node, "bridge.job": self.key, "mlflow.runName": node})
            run = self.cl.post("runs/create", {"experiment_id": self.exp, "run_name": node, "start_time": int(time.time() * 1000),
                                               "tags": [{"key": "mlflow.parentRunId", "value": self.job}]})["run"]["info"]["run_id"]
            self.runs[node] = run
            self.log_tags(run, tags)
            self.post_sample(run)
        self.nodes = upto
        self.lines("live")

    def lines(self, ph):
        self.log_tags(self.job, {f"bridge.state.node-{i}": self.line(ph, f"node-{i}") for i in range(self.nodes)})

    def replay(self, ex):
        """Sends a counted request again, on this job's runs: the job's run
        for the counted job's run, the last node's run for a node's, this
        experiment and key; metrics at new steps."""
        node = f"node-{self.nodes - 1}"
        c = self.c
        real = {c["job_run"]: self.job}
        for nd, run in c["node_runs"].items():
            real[run] = self.runs[node]

        def sub(s):
            for a, b in real.items():
                if a:
                    s = s.replace(a, b)
            s = s.replace(c["key"], self.key)
            s = re.sub(r"bridge\.state\.node-\d+", f"bridge.state.{node}", s)
            s = re.sub(r"who=node-\d+", f"who={node}", s)
            return s
        if ex["method"] == "GET":
            path = ex["path"].split("/mlflow/", 1)[1]
            q = urllib.parse.parse_qs(sub(ex.get("query", "")))
            q = {k: v[0] for k, v in q.items()}
            if path == "runs/get":
                q["run_id"] = real.get(ex["run_id"], ex["run_id"])
            if path == "experiments/get-by-name":
                q["experiment_name"] = self.exp_name if ex.get("status", 200) == 200 else self.exp_name + "-none"
            return lambda: self.call(ex, "GET", path, None, q)
        body = json.loads(sub(ex["body"]))
        if "experiment_id" in body:
            body["experiment_id"] = self.exp
        if "experiment_ids" in body:
            body["experiment_ids"] = [self.exp]
        path = ex["path"].split("/mlflow/", 1)[1]
        for t in body.get("tags") or []:
            if t["key"].startswith("bridge.state.") and self.shape == "gpu8":
                t["value"] = self.line("end" if ENDED.search(t["value"]) else "live", node)
        if path == "runs/set-tag" and body.get("key", "").startswith("bridge.state.") and self.shape == "gpu8":
            body["value"] = self.line("end" if ENDED.search(body["value"]) else "live", node)
        if path == "experiments/create":
            body["name"] = self.exp_name  # there already: the 400 most nodes get
        if path == "runs/create":
            body["tags"] = [t for t in body.get("tags", []) if t["key"] != "bridge.job_key"]  # no second job run

        def send():
            for m in body.get("metrics") or []:
                m["step"] = self.next_step()
                m["timestamp"] = 1796656418450 + m["step"]
            return self.call(ex, "POST", path, body)
        return send

    def call(self, ex, method, path, body, query=None):
        """The request; an error answer where the counted request had one
        (a 404 or 400 of the start's experiment lookups) counts."""
        try:
            return len(self.cl.call(method, path, body, query))
        except RuntimeError as e:
            if ex.get("status", 200) != 200 and f": {ex['status']}:" in str(e) or path == "experiments/create":
                return 0
            raise


def timed(cl, fn, label, batches=5, batch_cpu=0.15, most=40):
    """The server's CPU a request of fn, as bench/jobsize.py's timed but
    with batches sized by the server's CPU, not by wall time: on a machine
    busy with other work a request's wall time is mostly waiting, and a
    batch of one request would be one 10 ms tick of /proc. Each batch is
    about batch_cpu seconds of the server's CPU (at most `most` requests);
    per request: the median and range over the batches."""
    c0 = cl.cpu()
    size = 0
    for _ in range(3):
        size = fn()
    one = max((cl.cpu() - c0) / 3, 0.002)
    per = max(3, min(most, int(batch_cpu / one)))
    cpus = []
    for _ in range(batches):
        c = cl.cpu()
        for _ in range(per):
            fn()
        cpus.append((cl.cpu() - c) / per * 1000)
    return {"what": label, "bytes": size, "requests": per * batches, "batches": batches,
            "cpu_ms": statistics.median(cpus), "cpu_ms_min": min(cpus), "cpu_ms_max": max(cpus)}


def measure(a):
    c = json.load(open(a.counted))
    cl = jobsize.Client(a.url, [int(p) for p in a.pgids.split(",") if p])
    ns = [int(x) for x in a.ns.split(",")]
    out = open(a.out, "a")

    def add(shape, n, ph, what, r):
        r.update({"backend": a.backend, "shape": shape, "n": n, "phase": ph, "what": what,
                  "load": open("/proc/loadavg").read().split()[0]})
        out.write(json.dumps(r) + "\n")
        out.flush()
        print(f"  {a.backend} {shape:4} N={n:<5} {ph:5} {what[:70]:<70} {r['bytes']:>9} B cpu {r['cpu_ms']:7.1f} ms "
              f"[{r['cpu_ms_min']:.1f}-{r['cpu_ms_max']:.1f}] ({r['requests']} req)", flush=True)

    for shape in a.shapes.split(","):
        job = Filled(cl, c, shape, a.metrics_doc)
        for n in ns:
            t0 = time.time()
            job.fill(n)
            print(f"== {a.backend} {shape}: {n} nodes filled in {time.time() - t0:.0f} s; load {open('/proc/loadavg').read().split()[0]}", flush=True)
            for ph in ("start", "live", "end"):
                if ph == "end":
                    job.lines("end")
                    job.log_tags(job.job, job.end_tags)
                for k, e in c["phases"][ph].items():
                    # Sent again at every N and for both shapes: what goes
                    # to the job's run or reads it (it grows with N, and an
                    # 8-GPU node's line is longer) and the samples; the
                    # rest once, at the first N of the CPU shape (the same
                    # request whatever the job's size and the node's).
                    grows = "job's run" in k or k.startswith(("runs/search", "job series", "sample:"))
                    if not grows and (n != ns[0] or shape != "cpu"):
                        continue
                    if k.startswith("sample:") and (ph == "live" or shape == "gpu8"):
                        fn = lambda: job.post_sample(job.runs[f"node-{job.nodes - 1}"])  # noqa: E731
                    elif k.startswith("job series") and (shape == "gpu8" or not job.series_counted):
                        fn = job.post_job_series  # an 8-GPU job's: every signal, 38 points
                    else:
                        ex = c["examples"][ph].get(k, {})
                        ex = ex.get("gpu" if shape == "gpu8" else "cpu") or ex.get("cpu") or ex.get("gpu")
                        if not ex:
                            continue
                        if ex["path"].endswith(("runs/delete", "runs/restore")):
                            continue  # needs a run of its own each time: measured below
                        fn = job.replay(ex)
                    add(shape, n, ph, k, timed(cl, fn, k))
                if ph == "live" and not job.series_counted:
                    add(shape, n, ph, "job series: log-batch to the job's run (modelled)", timed(cl, job.post_job_series, ""))
            del_kinds = [k for ph in c["phases"].values() for k in ph if "runs/delete" in k]
            if del_kinds:
                spare = []

                def delete():
                    if not spare:
                        spare.extend(cl.post("runs/create", {"experiment_id": job.exp})["run"]["info"]["run_id"] for _ in range(30))
                    return len(cl.call("POST", "runs/delete", {"run_id": spare.pop()}))
                add(shape, n, "start", del_kinds[0], timed(cl, delete, "", most=10))
            job.lines("live")
            for k in job.end_tags:
                cl.post("runs/delete-tag", {"run_id": job.job, "key": k})


# ---------------------------------------------------------------- table

def table(a):
    c = json.load(open(a.counted))
    n0, minutes = c["nodes"], c["minutes"]
    rows = [json.loads(line) for p in a.costs for line in open(p) if line.strip()]
    cost = {}
    for r in rows:
        cost[(r["backend"], r["shape"], r["n"], r["phase"], r["what"])] = r
    # A request whose work does not grow with the job (a node's writes to
    # its run, one tag of the job's run) costs the same at every N: its
    # cost is the median over the N measured, which evens out the
    # machine's load. The job run's reads grow with N: each N its own.
    by_kind = {}
    for r in rows:
        by_kind.setdefault((r["backend"], r["shape"], r["phase"], r["what"]), []).append(r)
    ns_all = sorted({r["n"] for r in rows})
    for (b, shape, ph, what), rs in by_kind.items():
        if what.startswith(("runs/get", "runs/search")):
            continue
        med = statistics.median(r["cpu_ms"] for r in rs)
        for n in ns_all:
            cost[(b, shape, n, ph, what)] = dict(rs[0], cpu_ms=med, n=n)
            # measured once, for the CPU node: the same request for the other
            if shape == "cpu" and (b, "gpu8", ph, what) not in by_kind:
                cost[(b, "gpu8", n, ph, what)] = dict(rs[0], cpu_ms=med, n=n, shape="gpu8")
    backends = sorted({r["backend"] for r in rows}, key=lambda b: b != "sqlite")
    shapes = [s for s in ("cpu", "gpu8") if any(r["shape"] == s for r in rows)]
    ns = sorted({r["n"] for r in rows})
    modelled = not any(k.startswith("job series") for ph in c["phases"].values() for k in ph)

    def per_node(ph, n, kind, e):
        """Requests a node (a minute, while live) at N: a node's own kinds
        as counted; the job's (made once a job) spread over N nodes; the
        job run's reads: the evaluator's once a job while it runs, each
        node's own at the end."""
        k = e["count"] / (minutes if ph == "live" else 1)
        if e["scope"] == "job" or (e["scope"] == "read" and ph != "end"):
            return k / n
        return k / n0

    print(f"Counted: {n0} real bridges, {minutes} whole minutes while the job ran (bench/job_cost.sh). "
          f"Server CPU measured over those minutes: {c['server_cpu_ms_live_per_node_minute']:.1f} ms a node a minute (sqlite).")
    print()
    print("Requests a node, counted (a minute while the job runs; at the start and the end in all), and their "
          "server CPU at N (ms, median over batches; " + ", ".join(backends) + "):")
    for shape in shapes:
        print()
        print(f"{shape}: | phase | request | requests a node at N = {n0} | " + " | ".join(f"ms at {n:,} ({b})" for n in ns for b in backends) + " |")
        print("|---|---|---|" + "---|" * (len(ns) * len(backends)))
        for ph in ("start", "live", "end"):
            kinds = dict(c["phases"][ph])
            if ph == "live" and modelled:
                kinds["job series: log-batch to the job's run (modelled)"] = {"count": minutes, "scope": "job"}
            for k, e in sorted(kinds.items(), key=lambda x: -x[1]["count"]):
                cells = []
                for n in ns:
                    for b in backends:
                        r = cost.get((b, shape, n, ph, k))
                        cells.append(f"{r['cpu_ms']:.1f} ({r['bytes'] / 1000:,.0f} KB)" if r and r["bytes"] > 5000 else
                                     f"{r['cpu_ms']:.1f}" if r else "")
                print(f"| {ph} | {k} | {per_node(ph, n0, k, e):.3f} | " + " | ".join(cells) + " |")
    print()
    print("Server CPU a job of N nodes needs at the default interval (10 s samples, 1 m tick): counted requests a node "
          "times measured costs (ms; job-wide requests spread over the N nodes; a request that does not grow with N "
          "at the median of its costs over the N measured). "
          "sqlite [PostgreSQL, the database's CPU included]:")
    print("| nodes | N | live: requests a node a minute | live: ms a node a minute | cores for the job | "
          "end: requests a node | end: ms a node | start: requests a node | start: ms a node | job run's runs/get, live / at the end |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for shape in shapes:
        for n in ns:
            res = {}
            for b in backends:
                tot = {}
                for ph in ("start", "live", "end"):
                    kinds = dict(c["phases"][ph])
                    if ph == "live" and modelled:
                        kinds["job series: log-batch to the job's run (modelled)"] = {"count": minutes, "scope": "job"}
                    reqs = ms = 0.0
                    for k, e in kinds.items():
                        r = cost.get((b, shape, n, ph, k))
                        q = per_node(ph, n, k, e)
                        reqs += q
                        if r:
                            ms += q * r["cpu_ms"]
                    tot[ph] = (reqs, ms)
                res[b] = tot
            b0 = backends[0]

            def both(ph):
                v = [res[b][ph][1] for b in backends]
                return f"{v[0]:,.0f}" + (f" [{v[1]:,.0f}]" if len(v) > 1 else "")
            live_cores = [res[b]["live"][1] * n / 60000 for b in backends]
            get_live = cost.get((b0, shape, n, "live", "runs/get of the job's run"))
            get_end = cost.get((b0, shape, n, "end", "runs/get of the job's run"))
            size = f"{get_live['bytes'] / 1000:,.0f} KB / {get_end['bytes'] / 1000:,.0f} KB" if get_live and get_end else ""
            label = "CPU" if shape == "cpu" else "8 GPUs"
            print(f"| {label} | {n:,} | {res[b0]['live'][0]:.2f} | {both('live')} | "
                  f"{live_cores[0]:.2f}" + (f" [{live_cores[1]:.2f}]" if len(live_cores) > 1 else "") +
                  f" | {res[b0]['end'][0]:.1f} | {both('end')} | {res[b0]['start'][0]:.1f} | {both('start')} | {size} |")
    if modelled:
        print()
        print("(modelled: the evaluator's job series, one log-batch of "
              f"{len(MODEL_JOB_SERIES)} points a minute a job, not in this build)")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("count")
    p.add_argument("--requests", required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--t0", type=float, required=True)
    p.add_argument("--t1", type=float, required=True)
    p.add_argument("--dur", type=float, required=True)
    p.add_argument("--ticks", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("measure")
    p.add_argument("--url", required=True)
    p.add_argument("--pgids", required=True)
    p.add_argument("--counted", required=True)
    p.add_argument("--metrics-doc", required=True)
    p.add_argument("--ns", default="16,128,1024")
    p.add_argument("--shapes", default="cpu,gpu8")
    p.add_argument("--backend", default="sqlite")
    p.add_argument("--out", required=True)
    p = sub.add_parser("table")
    p.add_argument("--counted", required=True)
    p.add_argument("--costs", action="append", required=True)
    a = ap.parse_args()
    {"count": count, "measure": measure, "table": table}[a.cmd](a)


if __name__ == "__main__":
    main()
