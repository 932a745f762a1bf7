"""A/B: CPU per sample of two or more bridge builds, run in turn on this machine.

usage: bench/cpu_ab.py ROUNDS SECONDS BIN_A BIN_B [BIN_C...]   (e.g. 4 15 /tmp/bridge-base /tmp/bridge-new)
Each round runs every build in turn, a different one first each round: bridge --trackers none --interval 100ms --spool F -- sleep SECONDS,
CPU from getrusage(RUSAGE_CHILDREN) (bridge and its sleep child), samples from the spool.
Every scope is on unless ARGS says otherwise (ARGS="--scopes container,node" adds those flags).
TRACKER=mlflow posts to a real MLflow server, as in use: it starts one (bench/mlflow_server.sh,
sqlite on 127.0.0.1) shared by every run, each run its own run of it. On a machine without an
NVIDIA driver this measures what the GPU collector costs where there is no GPU. The machine is
whatever it is: compare the medians of one invocation (and each build's per-round ratio to the
first build), and say its load (printed at the end).
"""
import json, os, resource, shlex, subprocess, sys, tempfile
rounds, secs, bins = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
extra = shlex.split(os.environ.get("ARGS", ""))
tracker = os.environ.get("TRACKER", "none")
env = dict(os.environ)
server = None
if tracker == "mlflow":
    here = os.path.dirname(os.path.abspath(__file__))
    srv_dir = tempfile.mkdtemp(prefix="cpu_ab_mlflow.")
    py = os.environ.get("PYTHON", os.path.join(here, "..", ".venv", "bin", "python"))
    # The server's process group stays until stop_mlflow.
    port = subprocess.run(["bash", "-c", f'. "{here}/mlflow_server.sh"; start_mlflow "$0" "$1" >&2 && echo $mlflow_port', srv_dir, py],
                          check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    server = srv_dir
    env.update(MLFLOW_TRACKING_URI=f"http://127.0.0.1:{port}", MLFLOW_EXPERIMENT_NAME="bench-cpu-ab")
elif tracker != "none":
    sys.exit(f'TRACKER must be none or mlflow, not "{tracker}"')
res = {b: [] for b in bins}
try:
    for r in range(rounds):
        for b in bins[r % len(bins):] + bins[:r % len(bins)]:  # each build first in turn
            d = tempfile.mkdtemp()
            spool = os.path.join(d, "s.jsonl")
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([b, "--trackers", tracker, "--interval", "100ms", "--spool", spool, "--keep-spool", *extra, "--", "sleep", secs],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            n = sum(1 for l in open(spool) if '"type":"sample"' in l)
            res[b].append(1e3 * cpu / n)
            print(f"round {r} {b}: {n} samples, {1e3*cpu/n:.3f} ms CPU per sample", flush=True)
finally:
    if server:
        subprocess.run(["bash", "-c", f'. "{here}/mlflow_server.sh"; stop_mlflow "$0"', server])
for b in bins:
    v = sorted(res[b])
    line = f"{b}: median {v[len(v)//2]:.3f} ms/sample, min {v[0]:.3f}, max {v[-1]:.3f} over {len(v)} runs"
    if b != bins[0]:
        # Each round's ratio to the first build's run in the same round: the
        # load drifts less within a round than across the window.
        q = sorted(x / y for x, y in zip(res[b], res[bins[0]]))
        line += f"; per round x{q[len(q)//2]:.3f} of {bins[0]} (min {q[0]:.3f}, max {q[-1]:.3f})"
    print(line)
print("load average at the end (1, 5, 15 min): %.2f %.2f %.2f" % os.getloadavg())
