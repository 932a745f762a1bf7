"""bench/latency.py: how long bridge delays the child's start and how long it
takes to exit after the child, against a real, healthy MLflow server.

    python bench/latency.py BRIDGE_BIN TRACKING_URI RUNS

For each of RUNS repetitions, in each mode:
  direct     the child alone (what starting a process costs here);
  offline    bridge with --trackers none (no tracker at all);
  run-id     bridge with MLFLOW_RUN_ID set (a run created beforehand);
  create     bridge creating the run itself (MLFLOW_EXPERIMENT_NAME).
The child writes time.time_ns() as it starts and again just before it exits;
start delay = child's start - the moment before bridge was spawned, exit =
bridge's exit (wait returns) - the child's last stamp. Prints p50 and max in
ms for each mode as a Markdown table.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

CHILD = (
    "import os, sys, time\n"
    "t = time.time_ns()\n"
    "open(sys.argv[1], 'w').write(str(t))\n"
    "time.sleep(float(sys.argv[3]))\n"
    "open(sys.argv[2], 'w').write(str(time.time_ns()))\n"
)


def rest(uri, path, body):
    req = urllib.request.Request(uri + "/api/2.0/mlflow/" + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def drop_cache(path):
    """Drops path's cached pages that no process maps, as on a node where it
    was not run before (COLD=1)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def once(argv, env, start_file, end_file):
    if os.environ.get("COLD") == "1" and argv[0] == sys.argv[1]:
        drop_cache(argv[0])
    t0 = time.time_ns()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = p.communicate(timeout=120)
    t_exit = time.time_ns()
    if p.returncode != 0:
        sys.exit(f"{argv[0]} exited {p.returncode}:\n{err.decode(errors='replace')[-2000:]}")
    started = int(open(start_file).read())
    ended = int(open(end_file).read())
    return (started - t0) / 1e6, (t_exit - ended) / 1e6


def main():
    bridge, uri, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sleep = os.environ.get("CHILD_SECONDS", "1.5")
    exp = "bridge-latency-%d" % time.time_ns()
    exp_id = rest(uri, "experiments/create", {"name": exp})["experiment_id"]
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "BRIDGE_", "WANDB_"))}
    base_env.update(MLFLOW_TRACKING_URI=uri, MLFLOW_DISABLE_TELEMETRY="true")
    res = {"direct": [], "offline": [], "run-id": [], "create": []}
    with tempfile.TemporaryDirectory() as d:
        child = os.path.join(d, "child.py")
        open(child, "w").write(CHILD)
        sf, ef = os.path.join(d, "start"), os.path.join(d, "end")
        cmd = [sys.executable, child, sf, ef, sleep]
        flags = ["--interval", "1s", "--trackers", "mlflow", "--spool", os.path.join(d, "s.jsonl"), "--"]
        for i in range(runs):
            # Interleaved, so that a change in the machine's load hits every mode.
            res["direct"].append(once(cmd, base_env, sf, ef))
            off = ["--trackers", "none"] + flags[flags.index("--spool"):]
            res["offline"].append(once([bridge, "--interval", "1s"] + off + cmd, base_env, sf, ef))
            os.remove(os.path.join(d, "s.jsonl"))
            run_id = rest(uri, "runs/create", {"experiment_id": exp_id, "start_time": int(time.time() * 1000)})["run"]["info"]["run_id"]
            res["run-id"].append(once([bridge] + flags + cmd, dict(base_env, MLFLOW_RUN_ID=run_id), sf, ef))
            os.remove(os.path.join(d, "s.jsonl"))
            res["create"].append(once([bridge] + flags + cmd, dict(base_env, MLFLOW_EXPERIMENT_NAME=exp), sf, ef))
            os.remove(os.path.join(d, "s.jsonl"))
    # "added" pairs each run with the direct start just before it.
    print("| mode | runs | start delay p50 ms | max ms | added by bridge p50 ms | max ms | exit after child p50 ms | max ms |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, xs in res.items():
        st = [x[0] for x in xs]
        add = [x[0] - d[0] for x, d in zip(xs, res["direct"])]
        ex = [x[1] for x in xs]
        print("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |" % (
            mode, len(xs), statistics.median(st), max(st), statistics.median(add), max(add), statistics.median(ex), max(ex)))


if __name__ == "__main__":
    main()
