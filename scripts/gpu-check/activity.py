"""Check bridge's GPU activity (GPM) and energy series against the load's phases.

usage: activity.py SPOOL.jsonl RUN.log POLL.jsonl

RUN.log holds the load's phase lines, "gpu-check-phase NAME EPOCH_SECONDS"
(idle, matmul, copy, end), each printed after torch.cuda.synchronize().
POLL.jsonl is poll.py's record of bridge's /metrics and CPU time.
Checks, on GPU 0 (cuda:0 is NVML's GPU 0 on a one-GPU machine; the script
says which UUID it read):
  1. prof_sm_active_ratio near 0 idle (median <= 0.05) and high under the
     matmul loop (median >= 0.5); prof_pipe_tensor_active_ratio is shown;
  2. prof_dram_active_ratio high under the device-to-device copy loop
     (median >= 0.5);
  3. energy_joules' increase within 5% of the integral of power_usage_watts
     (trapezoids between samples), over the whole run;
  4. sampling cost with GPM on: the gpu collector's duration per sample and
     bridge's CPU time per sample (shown; no threshold).
A sample counts for a phase only if its whole interval (from the previous
sample: GPM's window) lies inside the phase. Exit 0 when every check
passed, 1 otherwise (a series missing fails its check).
"""
import json, statistics, sys

spool, runlog, poll = sys.argv[1:4]
samples = []
for line in open(spool, errors="replace"):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if isinstance(r, dict) and r.get("type") == "sample" and r.get("ts") and isinstance(r.get("metrics"), dict):
        samples.append((float(r["ts"]) / 1000, r["metrics"]))
samples.sort(key=lambda s: s[0])
phases = {}
for line in open(runlog, errors="replace"):
    f = line.split()
    if len(f) == 3 and f[0] == "gpu-check-phase":
        phases[f[1]] = float(f[2])
print(f"{len(samples)} samples; phases: " + ", ".join(f"{k} at +{v - min(phases.values()):.1f}s" for k, v in sorted(phases.items(), key=lambda kv: kv[1])) if phases else f"{len(samples)} samples; no phase lines")

failed = []
def check(name, ok, detail):
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    if not ok:
        failed.append(name)

def within(start, end, key):
    """Values of key in samples whose interval (previous sample, sample] lies in [start, end]."""
    out = []
    for (t0, _), (t1, m) in zip(samples, samples[1:]):
        if start <= t0 and t1 <= end and isinstance(m.get(key), (int, float)):
            out.append(m[key])
    return out

def median_check(name, phase, nxt, key, pred, want):
    if phase not in phases or nxt not in phases:
        check(name, False, f"the load printed no {phase}/{nxt} phase lines (torch with CUDA missing?)")
        return
    v = within(phases[phase], phases[nxt], key)
    if not v:
        check(name, False, f"no {key} in the {phase} phase (GPM not on? see bridge sample's activity)")
        return
    med = statistics.median(v)
    check(name, pred(med), f"median {key} {med:.3f} over {len(v)} samples, want {want}; values {[round(x, 3) for x in v]}")

g = "gpu_0_"
median_check("SM active idle", "idle", "matmul", g + "prof_sm_active_ratio", lambda x: x <= 0.05, "<= 0.05")
median_check("SM active under matmul", "matmul", "copy", g + "prof_sm_active_ratio", lambda x: x >= 0.5, ">= 0.5")
for phase, nxt in (("idle", "matmul"), ("matmul", "copy"), ("copy", "end")):
    for key in ("prof_pipe_tensor_active_ratio", "prof_pipe_tensor_hmma_active_ratio", "prof_dram_active_ratio", "utilization_percentage"):
        v = within(phases.get(phase, 0), phases.get(nxt, 0), g + key) if phase in phases and nxt in phases else []
        if v:
            print(f"  {phase:6s} {key:38s} median {statistics.median(v):.3f} (n={len(v)})")
median_check("DRAM active under device-to-device copy", "copy", "end", g + "prof_dram_active_ratio", lambda x: x >= 0.5, ">= 0.5")

# Energy: counter increase against the integral of the sampled power.
pts = [(t, m.get(g + "energy_joules"), m.get(g + "power_usage_watts")) for t, m in samples]
pts = [p for p in pts if isinstance(p[1], (int, float)) and isinstance(p[2], (int, float))]
if len(pts) < 10:
    check("energy vs integral of power", False, f"only {len(pts)} samples with both {g}energy_joules and {g}power_usage_watts")
else:
    integral = sum((t1 - t0) * (p0 + p1) / 2 for (t0, _, p0), (t1, _, p1) in zip(pts, pts[1:]))
    counted = pts[-1][1] - pts[0][1]
    ratio = counted / integral if integral > 0 else float("nan")
    check("energy vs integral of power", abs(ratio - 1) <= 0.05,
          f"counter +{counted:.1f} J, power integral {integral:.1f} J over {pts[-1][0] - pts[0][0]:.1f} s "
          f"({len(pts)} samples, mean {integral / (pts[-1][0] - pts[0][0]):.1f} W): ratio {ratio:.4f}, want within 5%")

# Sampling cost, from poll.py's record.
rows = []
for line in open(poll, errors="replace"):
    try:
        rows.append(json.loads(line))
    except ValueError:
        pass
dur, seen = [], set()
for r in rows:
    n, d = r.get("samples"), r.get("gpu_duration")
    if n is not None and d is not None and n not in seen:
        seen.add(n)
        dur.append(d)
# From the second sample on: bridge's start (NVML init, the first sample's
# setup) is not a sample's cost.
cpu = [r for r in rows if r.get("cpu_s") is not None and (r.get("samples") or 0) >= 2]
if dur and len(cpu) >= 2 and cpu[-1]["samples"] > cpu[0]["samples"]:
    per = (cpu[-1]["cpu_s"] - cpu[0]["cpu_s"]) / (cpu[-1]["samples"] - cpu[0]["samples"])
    dur.sort()
    print(f"INFO sampling cost with GPM on: gpu collector {1e3 * statistics.median(dur):.2f} ms median, "
          f"{1e3 * dur[int(0.9 * (len(dur) - 1))]:.2f} ms p90, {1e3 * dur[-1]:.2f} ms max per sample (n={len(dur)}); "
          f"bridge CPU {1e3 * per:.2f} ms per sample over {cpu[-1]['samples'] - cpu[0]['samples']} samples (all collectors)")
else:
    check("sampling cost", False, f"poll.py recorded {len(rows)} rows, {len(dur)} collector durations: /metrics not reached?")

if failed:
    print(f"gpu-check: {len(failed)} check(s) failed: {', '.join(failed)}")
    sys.exit(1)
print("gpu-check: activity, energy and cost checks passed")
