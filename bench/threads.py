"""A thread-heavy process tree, as a PyTorch job with DataLoader workers:
this process and N children (argument, default 0), each with 40 idle threads.

usage: BRIDGE_BENCH_TREE="exec python3 ../../bench/threads.py 8" go test -run '^$' -bench Collect ./metrics/process/
"""
import subprocess
import sys
import threading
import time


def idle():
    time.sleep(3600)


for _ in range(40):
    threading.Thread(target=idle, daemon=True).start()
children = [subprocess.Popen([sys.executable, __file__]) for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 0)]
time.sleep(3600)
