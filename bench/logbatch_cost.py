"""What one request costs an MLflow server, per request and per row: the
server's CPU (utime+stime of its process groups and of the children their
leaders reaped, /proc, bench/load_helper.py's ticks) over REQUESTS requests
made one after another, for runs/log-batch bodies of K distinct keys x S
samples (steps), and for runs/get (what MLflow's own monitor asks
every sample). Every point is new (a new step, a random value), as a
monitor's are. Then a least-squares fit of the log-batch figures to

    CPU a request = a + b * K + c * K * S

a: each request (HTTP, ASGI/WSGI, JSON and protobuf, the run looked up
twice, sessions, the commit), b: each distinct key (its latest_metrics row
read, locked and updated), c: each point (its metrics row built and
inserted). Started by bench/logbatch_cost.sh.

usage: logbatch_cost.py URL REQUESTS PGID...
"""
import json
import os
import random
import sys
import time
import urllib.request

from load_helper import ticks  # bench/ is sys.path[0]: the script's own directory

url, requests, pgids = sys.argv[1], int(sys.argv[2]), {int(p) for p in sys.argv[3:]}
hz = os.sysconf("SC_CLK_TCK")


def call(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{url}/api/2.0/mlflow/{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


exp = call("experiments/create", {"name": f"logbatch-cost-{time.time_ns()}"})["experiment_id"]


def new_run():
    return call("runs/create", {"experiment_id": exp, "start_time": int(time.time() * 1000)})["run"]["info"]["run_id"]


def log_batch_bodies(run, keys, samples, n):
    step = 0
    for _ in range(n):
        ts = int(time.time() * 1000)
        metrics = []
        for s in range(samples):
            for k in range(keys):
                metrics.append({"key": f"system/series_{k}_percentage", "value": random.random() * 100,
                                "timestamp": ts + s, "step": step + s})
        step += samples
        yield {"run_id": run, "metrics": metrics}


def measure(make):
    bodies = list(make())
    warm, bodies = bodies[:10], bodies[10:]
    for path, body in warm:
        call(path, body)
    t0 = ticks(pgids)
    for path, body in bodies:
        call(path, body)
    return (ticks(pgids) - t0) * 1000 / hz / len(bodies)


print(f"| request | keys | samples | rows | server CPU ms/request | ms/row |")
print("|---|---|---|---|---|---|")
fit = []
for keys, samples in [(1, 1), (8, 1), (40, 1), (40, 2), (40, 5), (40, 10), (8, 10), (1, 40)]:
    run = new_run()
    ms = measure(lambda: (("runs/log-batch", b) for b in log_batch_bodies(run, keys, samples, requests + 10)))
    rows = keys * samples
    fit.append((keys, samples, ms))
    print(f"| log-batch | {keys} | {samples} | {rows} | {ms:.2f} | {ms / rows:.3f} |", flush=True)

# runs/get of a run with 8 series, as MLflow's monitor's run has.
run = new_run()
for b in log_batch_bodies(run, 8, 1, 3):
    call("runs/log-batch", b)
ms = measure(lambda: (("runs/get?run_id=" + run, None) for _ in range(requests + 10)))
print(f"| runs/get (8 series) | - | - | - | {ms:.2f} | - |")

# Least squares: ms = a + b*K + c*K*S.
A = [[1.0, k, k * s] for k, s, _ in fit]
y = [ms for _, _, ms in fit]
ata = [[sum(A[r][i] * A[r][j] for r in range(len(A))) for j in range(3)] for i in range(3)]
aty = [sum(A[r][i] * y[r] for r in range(len(A))) for i in range(3)]
# Gaussian elimination on the 3x3 normal equations.
m = [row[:] + [v] for row, v in zip(ata, aty)]
for i in range(3):
    p = max(range(i, 3), key=lambda r: abs(m[r][i]))
    m[i], m[p] = m[p], m[i]
    for r in range(3):
        if r != i:
            f = m[r][i] / m[i][i]
            m[r] = [x - f * z for x, z in zip(m[r], m[i])]
a, b, c = (m[i][3] / m[i][i] for i in range(3))
print(f"\nfit: a = {a:.2f} ms a request, b = {b:.3f} ms a distinct key, c = {c:.3f} ms a point")
