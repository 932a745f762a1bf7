"""Record bridge's sampling cost while it runs.

usage: poll.py ADDR PID OUT.jsonl
Every 0.25 s until process PID is gone: GET http://ADDR/metrics and write
one JSON line with the time, bridge_samples_taken_total, the gpu
collector's bridge_collector_duration_seconds, and PID's CPU time (utime +
stime from /proc/PID/stat, seconds).
"""
import json, os, re, sys, time, urllib.request

addr, pid, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tick = os.sysconf("SC_CLK_TCK")
series = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')

def cpu():
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / tick
    except (OSError, IndexError, ValueError):
        return None

with open(out, "w") as w:
    while os.path.exists(f"/proc/{pid}"):
        row = {"t": time.time(), "cpu_s": cpu()}
        try:
            for line in urllib.request.urlopen(f"http://{addr}/metrics", timeout=2).read().decode().splitlines():
                m = series.match(line)
                if not m:
                    continue
                name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
                if name == "bridge_samples_taken_total":
                    row["samples"] = int(value)
                elif name == "bridge_collector_duration_seconds" and 'collector="gpu"' in labels:
                    row["gpu_duration"] = value
        except OSError:
            pass
        w.write(json.dumps(row) + "\n")
        w.flush()
        time.sleep(0.25)
