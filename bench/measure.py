"""Measure CPU time and RSS of process trees over one window, side by side.

usage: measure.py WINDOW_SECONDS INTERVAL_SECONDS LABEL=PID[:SUBTRACT_LABEL] ...

CPU is the scheduler's run time of every thread of every process in each
tree (/proc/<pid>/task/<tid>/schedstat, first field, ns), read at the start
and the end of the window; per sample is that over WINDOW/INTERVAL. RSS is
the sum of VmRSS over the tree at the end. Context switches (voluntary and
not, every thread) are counted over the same window and tree. A label with
:OTHER has OTHER's CPU subtracted (a tool's idle twin; its context
switches are not). Prints one
tab-separated line a tree: label, CPU ms a sample, RSS MiB, processes,
context switches a sample.
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


def thread_sum(pids, read):
    """Sums read(path of one thread's /proc dir) over every thread of pids."""
    total = 0
    for p in pids:
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                try:
                    total += read(f"/proc/{p}/task/{tid}")
                except OSError:
                    pass
        except OSError:
            pass
    return total


def schedstat_ns(task):
    with open(f"{task}/schedstat") as f:
        return int(f.read().split()[0])


def ctx_switches(task):
    with open(f"{task}/status") as f:
        return sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)


def cpu_ns(pids):
    return thread_sum(pids, schedstat_ns)


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
start_cs = {label: thread_sum(tree(pid), ctx_switches) for label, pid, _ in specs}
t0 = time.monotonic()
time.sleep(window)
elapsed = time.monotonic() - t0
end = {label: cpu_ns(tree(pid)) for label, pid, _ in specs}
end_cs = {label: thread_sum(tree(pid), ctx_switches) for label, pid, _ in specs}
samples = elapsed / interval
used = {label: (end[label] - start[label]) / 1e6 for label, _, _ in specs}
for label, pid, sub in specs:
    net = used[label] - (used[sub] if sub else 0)
    cs = (end_cs[label] - start_cs[label]) / samples
    print(f"{label}\t{net / samples:.3f}\t{rss_kib(tree(pid)) / 1024:.1f}\t{len(tree(pid))}\t{cs:.1f}")
