"""What a multi-node job's run costs an MLflow server, by design (issue 39,
docs/multinode.md "A job at scale"). Started by bench/jobsize.sh, which
starts the server and captures what a real 2-node job wrote.

For each shape (a CPU-only node; an 8-GPU node with GPM and 8 InfiniBand
ports) and each design, it fills the experiment node by node up to the
largest N, and at each N measures, against the real server:

  c (today)   one run: every node's tags under bridge.node.<id>., every
              node's series under system/<id>/;
  a (nested)  the job's run is a parent holding the job's tags, the job's
              series (min/median/max of 12 signals, nodes reporting,
              nodes differing) and one state tag a node
              (bridge.state.<id>, one logfmt line: live values while it
              runs, its end and figures once it ended); one run a node
              (mlflow.parentRunId, bridge.node_id, the job's key as
              bridge.job) with its own tags and its series unprefixed
              (system/<name>);
  b (bounded) one run: the job's tags, series and state tags as in (a),
              and per-node series and tags for at most K nodes (all nodes
              up to K, above it the nodes that differ, at most K).

Figures: the bytes of the job run's runs/get (exact: every value is
fixed); the server's CPU (utime+stime of its process groups, the
database's included, /proc) and wall time a request, median and range
over batches of requests sent one after another; for (a) the paged read
of every child (pages that stay under 1 MiB), the bounded searches the
end and a restarted node make, and the requests a node makes a minute.

usage: jobsize.py --url URL --pgids PGID[,PGID] --captured RUN.json
                  --golden WIRE.txt --metrics-doc docs/metrics.md
                  [--ns 8,16,64,128,300,1024] [--shapes cpu,gpu8]
                  [--designs c,a,b] [--k 8] [--out RESULTS.jsonl]
       jobsize.py --table RESULTS.jsonl...  (the figures as Markdown tables)
"""
import argparse
import http.client
import json
import os
import re
import statistics
import sys
import time
import urllib.parse

from load_helper import ticks  # bench/ is sys.path[0]

HZ = os.sysconf("SC_CLK_TCK")
MiB = 1 << 20
TS = 1796656418450  # every timestamp: sizes do not depend on the clock
# Steps of the recorded points, and of the samples posted while measuring
# (STEP + 1, + 2, ...): always six digits, so the sizes do not depend on how
# many requests a measurement made.
STEP = 100000
DIFFERS = "node-17: CPU throttled in 85% of periods; node-203: GPU SM active 41% against the job's median 78%"


# ---------------------------------------------------------------- shapes

def doc_series(path):
    """Series names of docs/metrics.md's tables, by section, with whether
    the unit column says steady (sent only when it changes)."""
    sections, sec = {}, ""
    for line in open(path):
        if line.startswith("#"):
            sec = line.strip("# \n")
            continue
        m = re.match(r"^\| `([a-z0-9_<>N]+)` \| ([^|]*)\|", line)
        if m:
            sections.setdefault(sec, []).append((m.group(1), "steady" in m.group(2)))
    return sections


def shapes(captured, golden, metrics_doc):
    """The series and tags a node sends, read from a real job's run (node-0
    ran here without GPUs, node-1 on the stand-in NVML), the golden wire
    file (a cgroup v2 container with limits) and docs/metrics.md's
    catalogue (what a real GPU and HCA give that the stand-in lacks)."""
    run = json.load(open(captured))["runs"][0]
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    keys = [m["key"] for m in run["data"]["metrics"]]
    sec = doc_series(metrics_doc)
    steady = {n: s for rows in sec.values() for n, s in rows}

    cpu_series = {k.split("/", 2)[2] for k in keys if k.startswith("system/node-0/")}
    cpu_series |= set(re.findall(r'"key": "system/([^"]+)"', open(golden).read()))
    gpu0 = {k.split("/", 2)[2] for k in keys if k.startswith("system/node-1/gpu_0_")}
    per_gpu = {n.replace("gpu_N_", "") for s in ("Per GPU: `gpu_N_…`", "Activity (GPM): `gpu_N_prof_…`")
               for n, _ in sec[s] if n.startswith("gpu_N_")}
    per_gpu |= {k.replace("gpu_0_", "") for k in gpu0}
    gpu_series = set(cpu_series)
    for i in range(8):
        gpu_series |= {f"gpu_{i}_{n}" for n in per_gpu}
    gpu_series |= {n for n, _ in sec["The job's own GPU memory: `process_gpu_…`"]}
    for d in range(8):
        gpu_series |= {n.replace("<device>", f"mlx5_{d}").replace("<port>", "1")
                       for n, _ in sec["InfiniBand and RoCE ports"] if n.startswith("node_infiniband_")}

    def is_steady(name):
        gen = re.sub(r"^gpu_\d+_", "gpu_N_", name)
        gen = re.sub(r"^node_infiniband_mlx5_\d+_port_1_", "node_infiniband_<device>_port_<port>_", gen)
        return steady.get(gen, False)

    def node_tags(node):
        p = f"bridge.node.{node}."
        return {k[len(p):]: v for k, v in tags.items() if k.startswith(p)}

    cpu_tags = node_tags("node-0")
    gpu_tags = node_tags("node-1")
    for i in range(8):
        gpu_tags[f"gpu.{i}.name"] = "NVIDIA H100 80GB HBM3"
        gpu_tags[f"gpu.{i}.uuid"] = f"GPU-{i:08x}-1f2e-4d3c-8b7a-69584736251{i}"
    gpu_tags.update({"gpu.count": "8", "gpu.driver": "550.54.15", "gpu.cuda_driver": "12.4"})
    for d in range(8):
        gpu_tags.update({f"infiniband.mlx5_{d}.1.state": "ACTIVE", f"infiniband.mlx5_{d}.1.phys_state": "LinkUp",
                         f"infiniband.mlx5_{d}.1.link_layer": "InfiniBand", f"infiniband.mlx5_{d}.1.rate": "400 Gb/s"})
    # A busy node's figures, with its limits (a pod's): wide values.
    fig = json.loads(cpu_tags["figures"])
    fig.update({"samples": 360, "peak_working_set_megabytes": 61234.567, "memory_limit_megabytes": 68719.477,
                "cpu_mean_cores": 30.512, "cpu_peak_cores": 31.934, "cpu_limit_cores": 32,
                "throttled_share_percentage": 1.234, "network_megabytes_per_second": 12.345})
    cpu_tags["figures"] = json.dumps(fig, separators=(",", ":"))
    # A busy 8-GPU node's figures: every field the report knows, wide values.
    fig = json.loads(gpu_tags["figures"])
    fig.update({"samples": 360, "peak_working_set_megabytes": 412611.234, "memory_limit_megabytes": 1717986.918,
                "cpu_mean_cores": 95.967, "cpu_peak_cores": 110.968, "cpu_limit_cores": 112,
                "throttled_share_percentage": 0.412, "gpu_utilization_percentage": 97.312,
                "gpu_sm_active_ratio": 0.781, "gpu_energy_joules": 8623841.234, "node_cpu_energy_joules": 1234567.891,
                "network_megabytes_per_second": 12.345, "infiniband_megabytes_per_second": 18234.567,
                "gpu_xid_errors": 0, "gpu_ecc_uncorrected_errors": 0})
    gpu_tags["figures"] = json.dumps(fig, separators=(",", ":"))
    job_tags = {k: v for k, v in tags.items() if not k.startswith("bridge.node.")}
    return {
        "cpu": {"series": sorted(cpu_series), "tags": cpu_tags},
        "gpu8": {"series": sorted(gpu_series), "tags": gpu_tags},
    }, job_tags, is_steady


# The job-level signals (issue 39: what decides a job's speed).
SIGNALS = ["gpu_sm_active_ratio", "gpu_utilization_percentage", "gpu_power_usage_watts", "gpu_sm_clock_mhz",
           "gpu_memory_usage_percentage", "container_cpu_utilization_percentage",
           "container_cpu_throttled_periods_percentage", "container_memory_working_set_percentage",
           "netns_network_receive_megabytes_per_second", "netns_network_transmit_megabytes_per_second",
           "node_infiniband_receive_megabytes_per_second", "node_infiniband_transmit_megabytes_per_second"]
JOB_SERIES = [f"system/job_{s}_{q}" for s in SIGNALS for q in ("min", "median", "max")] + \
             ["system/job_nodes_reporting_count", "system/job_nodes_differing_count"]


def g(x):
    """A number as the state tag writes it: 5 significant digits, whole
    numbers from 100,000 on (never an exponent)."""
    return f"{x:.0f}" if abs(x) >= 1e5 else f"{x:.5g}"


# The report's figures in the state tag, by short name (report.Figures's
# JSON names on the left).
FIGURE_NAMES = {"samples": "samples", "peak_working_set_megabytes": "ws_peak_mb", "memory_limit_megabytes": "mem_limit_mb",
                "cpu_mean_cores": "cpu_mean", "cpu_peak_cores": "cpu_peak", "cpu_limit_cores": "cpu_limit",
                "throttled_share_percentage": "throttled_pct", "gpu_utilization_percentage": "gpu_util_pct",
                "gpu_sm_active_ratio": "sm_active", "gpu_energy_joules": "gpu_j", "node_cpu_energy_joules": "cpu_j",
                "network_megabytes_per_second": "net_mbps", "infiniband_megabytes_per_second": "ib_mbps",
                "gpu_xid_errors": "xid", "gpu_ecc_uncorrected_errors": "ecc_unc"}
LIVE_NAMES = ["sm_active", "gpu_util_pct", "gpu_w", "sm_mhz", "gpu_mem_pct", "cpu_pct", "throttled_pct", "ws_pct",
              "net_rx_mbps", "net_tx_mbps", "ib_rx_mbps", "ib_tx_mbps"]


def live_state(node_tags):
    """A node's state tag while it runs (logfmt, one line: no quotes to
    escape in JSON): attempt, start, when, and the latest values of the
    job-level signals."""
    vals = [0.78125, 97.3125, 612.34, 1980, 81.234, 85.712, 0.41234, 62.123, 12.345, 11.234, 18234.5, 18120.25]
    return " ".join(["status=RUNNING", "attempt=0", f"started={TS - 3600000}", f"at={TS}"] +
                    [f"{k}={g(v)}" for k, v in zip(LIVE_NAMES, vals)])


def end_state(node_tags):
    """A node's state tag once it ended: what the job's end and the report
    read (status, exit, reason, times, the clock, the figures)."""
    fig = json.loads(node_tags["figures"])
    return " ".join(["status=FINISHED", "exit=0", "reason=success", "attempt=0", f"started={TS - 3600000}",
                     f"ended={TS}", "clock=tsc/ntp/16ms"] +
                    [f"{FIGURE_NAMES[k]}={g(v)}" for k, v in fig.items() if k in FIGURE_NAMES])


def node_run_tags(node_tags, key, job_tags):
    """A node's run's tags: the node's own, as a single-node run has them,
    and the job's key under bridge.job (never bridge.job_key: the
    election finds the job's run by that tag)."""
    tags = {"bridge." + k: v for k, v in node_tags.items() if k not in ("job_key", "job_key_from", "job_nodes")}
    return tags | {"bridge.job": key, "mlflow.source.name": job_tags["mlflow.source.name"], "mlflow.source.type": "LOCAL"}


def report_summary(job_tags, n):
    """bridge.job.report_summary: a line for the job, one a node, within
    8,000 characters, as tracker/mlflow writes it."""
    head, *lines = job_tags["bridge.job.report_summary"].split("\n")
    out = head
    for i in range(n):
        line = re.sub(r"^node-\d+", f"node-{i}", lines[0])
        if len(out) + 1 + len(line) > 7900:
            return out + f"\n... {n - i} more lines (bridge report RUN shows them all)"
        out += "\n" + line
    return out


# ---------------------------------------------------------------- client

class Client:
    def __init__(self, url, pgids):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
        self.pgids = pgids

    def call(self, method, path, body=None, query=None):
        if query:
            path += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        for attempt in range(3):
            try:
                self.conn.request(method, "/api/2.0/mlflow/" + path, data, headers)
                r = self.conn.getresponse()
                raw = r.read()
                break
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
                if attempt == 2:
                    raise
        if r.status != 200:
            raise RuntimeError(f"{method} {path}: {r.status}: {raw[:500]!r}")
        return raw

    def post(self, path, body):
        return json.loads(self.call("POST", path, body))

    def cpu(self):
        return ticks(self.pgids) / HZ


def timed(cl, fn, label, budget=6.0, max_batch=25, batches=7):
    """Server CPU and wall time a request of fn (which makes one request and
    returns the response's bytes), from batches of requests one after
    another: per request, the median and range over the batches."""
    t0, c0 = time.perf_counter(), cl.cpu()
    size = fn()
    one = max(time.perf_counter() - t0, cl.cpu() - c0, 1e-3)
    per = max(1, min(max_batch, int(0.3 / one)))  # a batch: about 0.3 s of CPU (ticks of 10 ms)
    nb = batches if one * per * batches < budget else 3
    cpus, walls = [], []
    for _ in range(nb):
        c, w = cl.cpu(), time.perf_counter()
        for _ in range(per):
            fn()
        walls.append((time.perf_counter() - w) / per * 1000)
        cpus.append((cl.cpu() - c) / per * 1000)
    return {"what": label, "bytes": size, "requests": per * nb, "batches": nb,
            "cpu_ms": statistics.median(cpus), "cpu_ms_min": min(cpus), "cpu_ms_max": max(cpus),
            "wall_ms": statistics.median(walls), "wall_ms_min": min(walls), "wall_ms_max": max(walls)}


# ---------------------------------------------------------------- designs

class Job:
    """One job's runs in an experiment of its own, filled node by node."""

    def __init__(self, cl, design, shape_name, shape, job_tags, is_steady, k):
        self.cl, self.design, self.shape_name, self.shape, self.k = cl, design, shape_name, shape, k
        self.is_steady = is_steady
        self.nodes = 0
        self.children = {}
        self.step = STEP
        name = f"jobsize-{design}-{shape_name}-{time.time_ns()}"
        self.exp = cl.post("experiments/create", {"name": name})["experiment_id"]
        self.key = f"bench:{design}:{shape_name}"
        jt = dict(job_tags)
        jt["bridge.job_key"] = self.key
        jt.pop("mlflow.runName", None)
        self.job_tags = jt
        self.run = cl.post("runs/create", {"experiment_id": self.exp, "start_time": TS - 3600000, "run_name": "job",
                                           "tags": [{"key": "bridge.start_id", "value": jt["bridge.start_id"]}]})["run"]["info"]["run_id"]
        self.tags(self.run, jt)
        cl.post("runs/log-parameter", {"run_id": self.run, "key": "bridge.election", "value": "eligible:1000"})
        if design in ("a", "b"):
            self.metrics(self.run, [(k, 0.5) for k in JOB_SERIES])
            self.tags(self.run, {
                "bridge.job.differs": DIFFERS,
                "bridge.job.differed": "node-17 from 12:03 to 12:41; node-203 from 12:20; node-64 from 11:02 to 11:05"})

    def tags(self, run, tags):
        items = [{"key": k, "value": v} for k, v in tags.items()]
        for i in range(0, len(items), 100):
            self.cl.post("runs/log-batch", {"run_id": run, "tags": items[i:i + 100]})

    def metrics(self, run, kv, step=STEP):
        items = [{"key": k, "value": v, "timestamp": TS, "step": step} for k, v in kv]
        for i in range(0, len(items), 1000):
            self.cl.post("runs/log-batch", {"run_id": run, "metrics": items[i:i + 1000]})

    def node_series(self, prefix):
        return [(prefix + s, 352.321536) for s in self.shape["series"]]

    def add_nodes(self, upto):
        """Adds nodes until the job has upto, as each design records them
        once every node ended (the largest the records get)."""
        st = self.shape["tags"]
        first = self.nodes
        if self.design == "c":
            for i in range(first, upto):
                node = f"node-{i}"
                self.tags(self.run, {f"bridge.node.{node}.{k}": v for k, v in st.items()})
                self.metrics(self.run, self.node_series(f"system/{node}/"))
        elif self.design == "a":
            for i in range(first, upto):
                node = f"node-{i}"
                child = self.cl.post("runs/create", {
                    "experiment_id": self.exp, "start_time": TS - 3600000, "run_name": node,
                    "tags": [{"key": "mlflow.parentRunId", "value": self.run}, {"key": "bridge.node_id", "value": node}]})["run"]["info"]["run_id"]
                self.children[node] = child
                self.tags(child, node_run_tags(st, self.key, self.job_tags))
                self.metrics(child, self.node_series("system/"))
            self.tags(self.run, {f"bridge.state.node-{i}": end_state(st) for i in range(first, upto)})
        else:  # b
            self.tags(self.run, {f"bridge.state.node-{i}": end_state(st) for i in range(first, upto)})
            # Per-node series and tags: every node up to K; above it the K
            # nodes that differ (node-0..K-1 stand for them: same sizes).
            for i in range(first, min(upto, self.k)):
                node = f"node-{i}"
                self.tags(self.run, {f"bridge.node.{node}.{k}": v for k, v in st.items()})
                self.metrics(self.run, self.node_series(f"system/{node}/"))
        self.nodes = upto
        self.tags(self.run, {"bridge.nodes": str(upto), "bridge.job.report_summary": report_summary(self.job_tags, upto)})

    # The requests, each returning the response's bytes.
    def get_job_run(self):
        return len(self.cl.call("GET", "runs/get", query={"run_id": self.run}))

    def search(self, flt, max_results, token=None):
        body = {"experiment_ids": [self.exp], "filter": flt, "run_view_type": "ACTIVE_ONLY", "max_results": max_results}
        if token:
            body["page_token"] = token
        raw = self.cl.call("POST", "runs/search", body)
        return raw, json.loads(raw)

    def children_filter(self):
        return f"tags.`mlflow.parentRunId` = '{self.run}'"

    def read_children(self, page):
        """Every child, paged: (requests, bytes, largest page)."""
        token, reqs, total, largest, seen = None, 0, 0, 0, 0
        while True:
            raw, d = self.search(self.children_filter(), page, token)
            reqs += 1
            total += len(raw)
            largest = max(largest, len(raw))
            seen += len(d.get("runs", []))
            token = d.get("next_page_token")
            if not token:
                break
        assert seen == self.nodes, (seen, self.nodes)
        return reqs, total, largest

    def one_running_child(self):
        raw, _ = self.search(self.children_filter() + " and attributes.status = 'RUNNING'", 1)
        return len(raw)

    def child_of(self, node):
        raw, d = self.search(self.children_filter() + f" and tags.`bridge.node_id` = '{node}'", 2)
        assert len(d["runs"]) == 1
        return len(raw)

    def election_search(self):
        raw, d = self.search(f"tags.`bridge.job_key` = '{self.key}'", 1000)
        assert len(d["runs"]) == 1
        return len(raw)

    def post_sample(self, run, prefix):
        """One sample of a node: a point of each series that is not steady
        (steady ones are sent only when they change)."""
        self.step += 1
        items = [{"key": prefix + s, "value": 352.321536, "timestamp": TS + self.step, "step": self.step}
                 for s in self.shape["series"] if not self.is_steady(s)]
        return len(self.cl.call("POST", "runs/log-batch", {"run_id": run, "metrics": items}))

    def set_state(self, node):
        return len(self.cl.call("POST", "runs/set-tag", {"run_id": self.run, "key": f"bridge.state.{node}",
                                                         "value": live_state(self.shape["tags"])}))

    def post_job_series(self):
        self.step += 1
        return len(self.cl.call("POST", "runs/log-batch", {
            "run_id": self.run, "metrics": [{"key": k, "value": 0.5, "timestamp": TS + self.step, "step": self.step} for k in JOB_SERIES],
            "tags": [{"key": "bridge.job.differs", "value": DIFFERS}]}))

    def end_child(self, node):
        """A node's end on its own run: its end tags and its status (left
        RUNNING, so that the search for a running node's run still finds
        one: an update costs the same whatever the status)."""
        child = self.children[node]
        st = self.shape["tags"]
        n = len(self.cl.call("POST", "runs/log-batch", {"run_id": child, "tags": [
            {"key": "bridge." + k, "value": st[k]} for k in
            ("exit_code", "exit_reason", "exit_reason_detail", "exit_evidence", "ended", "ended_clock", "figures",
             "status", "peak_usage_megabytes", "peak_working_set_megabytes", "oom_kill_count")]}))
        n += len(self.cl.call("POST", "runs/update", {"run_id": child, "status": "RUNNING"}))
        return n

    def end_state_write(self, node):
        return len(self.cl.call("POST", "runs/log-batch", {"run_id": self.run, "tags": [
            {"key": f"bridge.state.{node}", "value": end_state(self.shape["tags"])}]}))

    def end_today(self, node):
        st = self.shape["tags"]
        return len(self.cl.call("POST", "runs/log-batch", {"run_id": self.run, "tags": [
            {"key": f"bridge.node.{node}.{k}", "value": st[k]} for k in
            ("exit_code", "exit_reason", "exit_reason_detail", "exit_evidence", "ended", "ended_clock", "figures",
             "status", "peak_usage_megabytes", "peak_working_set_megabytes", "oom_kill_count")]}))


def measure(job, n, out, writes):
    """The requests at N nodes. writes: also the requests whose cost does
    not grow with N (a node's samples, its state, its end), measured at a
    few N only, to show that."""
    cl = job.cl

    def add(r):
        r.update({"design": job.design, "shape": job.shape_name, "n": n, "load": open("/proc/loadavg").read().split()[0]})
        out.write(json.dumps(r) + "\n")
        out.flush()
        print(f"  {job.design} {job.shape_name:4} N={n:<5} {r['what']:<36} {r['bytes']:>10} B "
              f"cpu {r['cpu_ms']:8.1f} ms [{r['cpu_ms_min']:.1f}-{r['cpu_ms_max']:.1f}] "
              f"wall {r['wall_ms']:8.1f} ms  ({r['requests']} req)", flush=True)

    big = job.design == "c" and n >= 300
    add(timed(cl, job.get_job_run, "runs/get job run", budget=60 if big else 6))
    add(timed(cl, job.election_search, "search by job key (election)", budget=60 if big else 6))
    node = f"node-{n - 1}"
    if job.design == "a":
        child = job.children[node]
        child_bytes = len(cl.call("GET", "runs/get", query={"run_id": child}))
        page = max(1, min(1000, int(0.9 * MiB // child_bytes)))
        info = {}

        def read_all():
            info["reqs"], total, info["largest"] = job.read_children(page)
            return total
        r = timed(cl, read_all, f"read every child, pages of {page}", budget=30, max_batch=1, batches=5)
        r.update({"pages": info["reqs"], "largest_page": info["largest"], "page": page, "child_bytes": child_bytes})
        add(r)
        add(timed(cl, job.one_running_child, "search one RUNNING child"))
        add(timed(cl, lambda: job.child_of(node), "search a node's child (restart)"))
        if writes:
            add(timed(cl, lambda: job.post_sample(child, "system/"), "node sample log-batch to its child"))
            add(timed(cl, lambda: job.set_state(node), "node state set-tag on job run"))
            add(timed(cl, job.post_job_series, "elected: job series log-batch"))
            add(timed(cl, lambda: job.end_child(node), "end: tags+update on child (2 req)"))
            add(timed(cl, lambda: job.end_state_write(node), "end: state tag on job run"))
            cl.post("runs/update", {"run_id": child, "status": "RUNNING"})
    elif job.design == "c":
        if writes:
            add(timed(cl, lambda: job.post_sample(job.run, f"system/{node}/"), "node sample log-batch to job run"))
            add(timed(cl, lambda: job.end_today(node), "end: node's tags on job run"))
    elif writes:
        add(timed(cl, lambda: job.post_sample(job.run, "system/node-0/"), "node sample log-batch to job run (<=K)"))
        add(timed(cl, lambda: job.set_state(node), "node state set-tag on job run"))
        add(timed(cl, job.post_job_series, "elected: job series log-batch"))
        job.end_state_write(node)


# ---------------------------------------------------------------- tables

def tables(paths, interval=10.0):
    """Markdown tables of results files (a later file's figure replaces an
    earlier one's): the job run's size, the reads of design (a), what each
    request costs, and the server a job needs."""
    rows = [json.loads(line) for path in paths for line in open(path) if line.strip()]
    for r in rows:
        r["what"] = re.sub(r", pages of \d+$", ", paged", r["what"])
    by = {}
    for r in rows:
        by.setdefault((r["design"], r["shape"], r["what"]), {})[r["n"]] = r
    ns = sorted({r["n"] for r in rows})
    shapes_ = [s for s in ("cpu", "gpu8") if any(r["shape"] == s for r in rows)]
    designs = [d for d in ("c", "a", "b") if any(r["design"] == d for r in rows)]

    def kb(b):
        return f"{b / 1000:,.0f} KB" if b < 10 ** 6 else f"{b / 10 ** 6:,.1f} MB"

    print("The job run's `runs/get` (bytes; ** over 1 MiB); server CPU ms, median [range]")
    print("| design | shape | " + " | ".join(f"N = {n:,}" for n in ns) + " |")
    print("|---|---|" + "---|" * len(ns))
    for d in designs:
        for s in shapes_:
            cells = by.get((d, s, "runs/get job run"), {})
            out = []
            for n in ns:
                r = cells.get(n)
                if not r:
                    out.append("")
                    continue
                mark = "**" if r["bytes"] > MiB else ""
                out.append(f"{mark}{kb(r['bytes'])}{mark}; {r['cpu_ms']:,.0f} ms [{r['cpu_ms_min']:,.0f}-{r['cpu_ms_max']:,.0f}]")
            print(f"| {d} | {s} | " + " | ".join(out) + " |")
    print()
    for d in designs:
        for s in shapes_:
            cells = by.get((d, s, "runs/get job run"), {})
            if len(cells) >= 2:
                n0, n1 = sorted(cells)[-2:]
                per = (cells[n1]["bytes"] - cells[n0]["bytes"]) / (n1 - n0)
                base = cells[n1]["bytes"] - n1 * per
                print(f"{d} {s}: {per:,.0f} B a node (N = {n0:,} to {n1:,}), 1 MiB at N = {(MiB - base) / per:,.0f}")
    print()
    print("Design (a), the reads: bytes, requests, server CPU ms (median [range])")
    print("| shape | read | " + " | ".join(f"N = {n:,}" for n in ns) + " |")
    print("|---|---|" + "---|" * len(ns))
    for s in shapes_:
        for what in sorted({w for (d, sh, w) in by if d == "a" and sh == s and (w.startswith("read every") or w.startswith("search"))}):
            cells = by[("a", s, what)]
            out = []
            for n in ns:
                r = cells.get(n)
                if not r:
                    out.append("")
                    continue
                reqs = f"{r['pages']} req of {r['page']} runs, " if "pages" in r else ""
                out.append(f"{kb(r['bytes'])}, {reqs}{r['cpu_ms']:,.0f} ms [{r['cpu_ms_min']:,.0f}-{r['cpu_ms_max']:,.0f}]")
            print(f"| {s} | {what} | " + " | ".join(out) + " |")
    print()
    print("Each request's server CPU, ms: median over the N measured [lowest-highest median]")
    print("| design | shape | request | CPU ms |")
    print("|---|---|---|---|")
    cost = {}
    for (d, s, what), cells in sorted(by.items()):
        meds = [r["cpu_ms"] for r in cells.values()]
        cost[(d, s, what)] = cells
        if len(cells) < len(ns):
            print(f"| {d} | {s} | {what} | {statistics.median(meds):.1f} [{min(meds):.1f}-{max(meds):.1f}] |")

    def c(d, s, what, n=None):
        cells = cost.get((d, s, what), {})
        if not cells:
            return 0.0
        if n is not None and n in cells:
            return cells[n]["cpu_ms"]
        return statistics.median(r["cpu_ms"] for r in cells.values())

    per_min = 60 / interval

    def pooled(s, *whats):
        """The median of a request's cost over every design and N that
        measured it: the same request costs the same, whichever run it
        goes to; pooling evens out the machine's load."""
        xs = [r["cpu_ms"] for (d, sh, w), cells in cost.items() if sh == s and w in whats for r in cells.values()]
        return statistics.median(xs) if xs else 0.0

    print()
    print(f"Server CPU a job needs at a {interval:g} s interval, from the medians above (a node's sample and its "
          "state tag pooled over the designs that send them): ms a node a minute while it runs, cores for the "
          "job, and ms a node at its end (c: one runs/get of the run; tracker/mlflow reads it 1 to 3 times)")
    print("| design | shape | N | requests a node a minute | live: ms a node a minute | cores | end: ms a node |")
    print("|---|---|---|---|---|---|---|")
    for s in shapes_:
        sample = pooled(s, "node sample log-batch to job run", "node sample log-batch to its child", "node sample log-batch to job run (<=K)")
        state = pooled(s, "node state set-tag on job run")
        series = pooled(s, "elected: job series log-batch")
        for d in designs:
            for n in (16, 128, 1024):
                near = min(ns, key=lambda x: abs(x - n))
                get = c(d, s, "runs/get job run", near)
                if d == "c":
                    reqs, live = per_min, per_min * sample
                    end = c(d, s, "end: node's tags on job run") + get
                elif d == "a":
                    reqs, live = per_min + 1, per_min * sample + state + (get + series) / n
                    end = c(d, s, "end: tags+update on child (2 req)") + c(d, s, "end: state tag on job run") + get
                else:
                    k = min(n, 8)
                    reqs, live = 1 + per_min * k / n, per_min * sample * k / n + state + (get + series) / n
                    end = state + get
                print(f"| {d} | {s} | {n:,} | {reqs:.2g} | {live:,.0f} | {live * n / 60000:,.2f} | {end:,.0f} |")
        print(f"(pooled: {s} sample {sample:.1f} ms, state tag {state:.1f} ms, job series {series:.1f} ms)")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--pgids", required=True)
    ap.add_argument("--captured", required=True)
    ap.add_argument("--golden", required=True)
    ap.add_argument("--metrics-doc", required=True)
    ap.add_argument("--ns", default="8,16,64,128,300,1024")
    ap.add_argument("--shapes", default="cpu,gpu8")
    ap.add_argument("--designs", default="c,a,b")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--out", default="/dev/null")
    ap.add_argument("--print-shapes", action="store_true")
    if sys.argv[1:2] == ["--table"]:
        tables(sys.argv[2:])
        return
    a = ap.parse_args()
    shp, job_tags, is_steady = shapes(a.captured, a.golden, a.metrics_doc)
    for name, s in shp.items():
        nonsteady = sum(not is_steady(x) for x in s["series"])
        print(f"== shape {name}: {len(s['series'])} series ({nonsteady} in each sample, the rest steady), "
              f"{len(s['tags'])} node tags ({sum(len(k) + len(v) for k, v in s['tags'].items())} chars); "
              f"state tag: live {len(live_state(s['tags']))} chars, ended {len(end_state(s['tags']))} chars")
    if a.print_shapes:
        print(json.dumps({k: v for k, v in shp.items()}, indent=1))
        return
    cl = Client(a.url, [int(p) for p in a.pgids.split(",") if p])
    ns = [int(x) for x in a.ns.split(",")]
    with open(a.out, "a") as out:
        for shape in a.shapes.split(","):
            for design in a.designs.split(","):
                job = Job(cl, design, shape, shp[shape], job_tags, is_steady, a.k)
                for n in ns:
                    t0 = time.time()
                    job.add_nodes(n)
                    print(f"== {design} {shape}: {n} nodes recorded in {time.time() - t0:.0f} s; load {open('/proc/loadavg').read().split()[0]}", flush=True)
                    measure(job, n, out, writes=n in (ns[0], 128, ns[-1]))


if __name__ == "__main__":
    main()
