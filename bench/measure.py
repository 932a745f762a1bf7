"""Measure CPU time and RSS of process trees over one window, side by side.

usage: measure.py WINDOW_SECONDS INTERVAL_SECONDS LABEL=PID[:SUBTRACT_LABEL] ...

CPU is the scheduler's run time of every thread of every process in each
tree (/proc/<pid>/task/<tid>/schedstat, first field, ns), read at the start
and the end of the window; per sample is that over WINDOW/INTERVAL. RSS is
the sum of VmRSS over the tree at the end. A label with :OTHER has OTHER's
CPU subtracted (a tool's idle twin). Prints one tab-separated line a tree.
"""
import os
import sys
import time


def tree(pid):
    out, i = [pid], 0
    while i < len(out):
        p = out[i]
        i += 1
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                try:
                    with open(f"/proc/{p}/task/{tid}/children") as f:
                        out += [int(c) for c in f.read().split()]
                except OSError:
                    pass
        except OSError:
            pass
    return out


def cpu_ns(pids):
    total = 0
    for p in pids:
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                try:
                    with open(f"/proc/{p}/task/{tid}/schedstat") as f:
                        total += int(f.read().split()[0])
                except OSError:
                    pass
        except OSError:
            pass
    return total


def rss_kib(pids):
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


window, interval = float(sys.argv[1]), float(sys.argv[2])
specs = []
for a in sys.argv[3:]:
    label, rest = a.split("=", 1)
    pid, _, sub = rest.partition(":")
    specs.append((label, int(pid), sub))
start = {label: cpu_ns(tree(pid)) for label, pid, _ in specs}
t0 = time.monotonic()
time.sleep(window)
elapsed = time.monotonic() - t0
end = {label: cpu_ns(tree(pid)) for label, pid, _ in specs}
samples = elapsed / interval
used = {label: (end[label] - start[label]) / 1e6 for label, _, _ in specs}
for label, pid, sub in specs:
    net = used[label] - (used[sub] if sub else 0)
    print(f"{label}\t{net / samples:.3f}\t{rss_kib(tree(pid)) / 1024:.1f}\t{len(tree(pid))}")
