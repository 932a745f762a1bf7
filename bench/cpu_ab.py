"""A/B: CPU per sample of two bridge builds, run in turn on this machine.

usage: bench/cpu_ab.py ROUNDS SECONDS BIN_A BIN_B   (e.g. 4 15 /tmp/bridge-base /tmp/bridge-new)
Each round runs A then B: bridge --trackers none --interval 100ms --spool F -- sleep SECONDS,
CPU from getrusage(RUSAGE_CHILDREN) (bridge and its sleep child), samples from the spool.
Every scope is on; on a machine without an NVIDIA driver this measures what the GPU collector
costs where there is no GPU. The machine is whatever it is: compare the two medians of one run.
"""
import json, os, resource, subprocess, sys, tempfile
rounds, secs, bins = int(sys.argv[1]), sys.argv[2], sys.argv[3:5]
res = {b: [] for b in bins}
for r in range(rounds):
    for b in bins:
        d = tempfile.mkdtemp()
        spool = os.path.join(d, "s.jsonl")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([b, "--trackers", "none", "--interval", "100ms", "--spool", spool, "--keep-spool", "--", "sleep", secs],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        n = sum(1 for l in open(spool) if '"type":"sample"' in l)
        res[b].append(1e3 * cpu / n)
        print(f"round {r} {b}: {n} samples, {1e3*cpu/n:.3f} ms CPU per sample", flush=True)
for b in bins:
    v = sorted(res[b])
    print(f"{b}: median {v[len(v)//2]:.3f} ms/sample, min {v[0]:.3f}, max {v[-1]:.3f} over {len(v)} runs")
