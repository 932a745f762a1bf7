"""Records one job of N nodes in the nested design (bench/jobsize.py's
design a) with a history to draw, for a look at MLflow's UI
(bench/jobsize_ui.sh): the job's run (parent) with the job's tags, its
series (min/median/max of the job-level signals, nodes reporting, nodes
differing, 40 steps), the training script's loss, and a state tag a node;
one child run a node (mlflow.parentRunId) with the CPU node's series
unprefixed (system/<name>, 40 steps) and its tags. One node failed (OOM
killed) and one differs. Prints {"experiment", "parent", "children"}.

usage: jobsize_ui.py URL CAPTURED.json GOLDEN.txt METRICS.md N
"""
import json
import math
import sys
import time
import urllib.request

import jobsize

url, captured, golden, metrics_doc, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
shp, job_tags, is_steady = jobsize.shapes(captured, golden, metrics_doc)
shape = shp["cpu"]
STEPS = 40
T0 = int(time.time() * 1000) - STEPS * 10000


def call(path, body):
    req = urllib.request.Request(f"{url}/api/2.0/mlflow/{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def tags(run, kv):
    items = [{"key": k, "value": v} for k, v in kv.items()]
    for i in range(0, len(items), 100):
        call("runs/log-batch", {"run_id": run, "tags": items[i:i + 100]})


def series(run, points):
    for i in range(0, len(points), 1000):
        call("runs/log-batch", {"run_id": run, "metrics": points[i:i + 1000]})


def value(name, node, step):
    """A plausible, node-dependent curve; node 5 is throttled, node 11 is
    OOM-killed at step 30 (its series stop there); the others
    are stopped after it."""
    base = 40 + 3 * math.sin(step / 5 + node)
    if "throttled_periods_percentage" in name:
        return 85.0 if node == 5 else 0.5
    if "utilization_percentage" in name or "usage_percentage" in name or "working_set_percentage" in name:
        return base + (20 if node == 11 else 0) + step * (0.5 if node == 11 else 0)
    if name.endswith("_megabytes"):
        return 4000 + 100 * node + 10 * step
    return base


exp = call("experiments/create", {"name": f"job-{n}-nodes-{time.time_ns()}"})["experiment_id"]
parent = call("runs/create", {"experiment_id": exp, "start_time": T0, "run_name": "train.py",
                              "tags": [{"key": "bridge.job_key", "value": "slurm:alps:4242.0"}]})["run"]["info"]["run_id"]
jt = {k: v for k, v in job_tags.items() if k not in ("mlflow.runName", "bridge.job_key")}
jt.update({"bridge.nodes": str(n), "bridge.job.report_summary": jobsize.report_summary(job_tags, n),
           "bridge.job.first_failure": "node-11: cgroup_oom_kill at 2026-12-07T15:11:51.292Z (killed by the kernel's OOM killer in the container's cgroup, near its memory limit)",
           "bridge.job.differs": "node-5: CPU throttled in 85% of periods",
           "bridge.job.differed": "node-5 from 14:41; node-11 from 14:44 to 14:46"})
tags(parent, jt)
pts = []
for step in range(STEPS):
    ts = T0 + step * 10000
    for k in jobsize.JOB_SERIES:
        v = 0 if "differing" in k else n if "reporting" in k else value(k, 0, step) * {"min": 0.8, "median": 1, "max": 1.2}.get(k.rsplit("_", 1)[1], 1)
        pts.append({"key": k, "value": v, "timestamp": ts, "step": step})
    pts.append({"key": "loss", "value": 3 * math.exp(-step / 15), "timestamp": ts, "step": step})
series(parent, pts)
children = {}
state = {}
for i in range(n):
    node = f"node-{i}"
    child = call("runs/create", {"experiment_id": exp, "start_time": T0, "run_name": node,
                                 "tags": [{"key": "mlflow.parentRunId", "value": parent}, {"key": "bridge.node_id", "value": node}]})["run"]["info"]["run_id"]
    children[node] = child
    tags(child, jobsize.node_run_tags(shape["tags"], "slurm:alps:4242.0", job_tags))
    last = 30 if i == 11 else STEPS
    series(child, [{"key": "system/" + s, "value": value(s, i, step), "timestamp": T0 + step * 10000, "step": step}
                   for step in range(last) for s in shape["series"]])
    failed = i == 11
    st = jobsize.end_state(shape["tags"])
    if failed:
        st = st.replace("status=FINISHED exit=0 reason=success", "status=FAILED exit=137 reason=cgroup_oom_kill")
        tags(parent, {"bridge.failed.node-11": "FAILED: exit 137, attempt 0"})
    else:  # stopped by the launcher after node-11's failure
        st = st.replace("status=FINISHED exit=0 reason=success", "status=KILLED exit=143 reason=killed_by_signal")
    state[f"bridge.state.{node}"] = st
    call("runs/update", {"run_id": child, "status": "FAILED" if failed else "KILLED", "end_time": T0 + last * 10000})
tags(parent, state)
call("runs/update", {"run_id": parent, "status": "FAILED", "end_time": T0 + STEPS * 10000})
print(json.dumps({"experiment": exp, "parent": parent, "children": children}))
