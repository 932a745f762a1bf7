"""Join bridge's spooled GPU series with nvidia-smi CSV readings by GPU and time.

usage: join.py SPOOL.jsonl NVIDIA-SMI.csv
The CSV is nvidia-smi --query-gpu=timestamp,index,uuid,utilization.gpu,
memory.used,memory.total,power.draw,temperature.gpu,clocks.sm
--format=csv,noheader,nounits. Lines that do not parse are skipped.
"""
import csv, datetime, json, sys
from collections import defaultdict

samples = []
for line in open(sys.argv[1], errors="replace"):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if isinstance(r, dict) and r.get("type") == "sample" and isinstance(r.get("metrics"), dict) and r.get("ts"):
        samples.append((float(r["ts"]) / 1000, r["metrics"]))
print(f"{len(samples)} bridge samples")

smi = defaultdict(list)  # gpu index -> [(time, row)]
def num(s):
    try:
        return float(s)
    except ValueError:
        return None
for row in csv.reader(open(sys.argv[2])):
    row = [c.strip() for c in row]
    if len(row) < 9:
        continue
    try:
        t = datetime.datetime.strptime(row[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
    except ValueError:
        continue
    smi[int(row[1])].append((t, {"util": num(row[3]), "mem": None if num(row[4]) is None else num(row[4]) * 1.048576,
                                 "total": None if num(row[5]) is None else num(row[5]) * 1.048576,
                                 "power": num(row[6]), "temp": num(row[7]), "sm": num(row[8])}))
print(f"{sum(len(v) for v in smi.values())} nvidia-smi readings")

fields = [("util", "utilization_percentage"), ("mem", "memory_used_megabytes"), ("total", "memory_total_megabytes"),
          ("power", "power_usage_watts"), ("temp", "temperature_celsius"), ("sm", "sm_clock_mhz")]
diffs = defaultdict(list)
hdr = f'{"time":>8} {"gpu":>3} ' + " ".join(f'{k + " b/smi":>17}' for k, _ in fields) + f' {"proc_mem":>9}'
print(hdr)
t0 = samples[0][0] if samples else 0
for ts, m in samples:
    for gpu, rows in sorted(smi.items()):
        if not any(k.startswith(f"gpu_{gpu}_") for k in m):
            continue
        t, near = min(rows, key=lambda r: abs(r[0] - ts))
        if abs(t - ts) > 1.0:
            continue
        cells = []
        for k, name in fields:
            b, s = m.get(f"gpu_{gpu}_{name}"), near[k]
            if isinstance(b, (int, float)) and s is not None:
                diffs[k].append(abs(b - s))
            cells.append(f'{"-" if b is None else format(b, ".0f"):>8}/{"-" if s is None else format(s, ".0f"):<8}')
        pm = m.get("process_gpu_memory_megabytes")
        print(f"{ts - t0:8.1f} {gpu:>3} " + " ".join(cells) + f' {"-" if pm is None else format(pm, ".0f"):>9}')
print("mean |bridge - nvidia-smi| over joined readings:")
for k, _ in fields:
    d = diffs[k]
    print(f"  {k:6s} n={len(d):3d} mean={sum(d) / len(d) if d else float('nan'):.2f} max={max(d) if d else float('nan'):.2f}")
last = samples[-1][1] if samples else {}
for k in sorted(last):
    if k.startswith("process_gpu") or "xid" in k or "throttle_reasons" in k:
        print(f"  last {k} = {last[k]}")
