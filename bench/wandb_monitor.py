"""A W&B run in offline mode that does nothing but let W&B's system monitor
sample every INTERVAL seconds (wandb-core and its monitor process do the work).

usage: WANDB_MODE=offline wandb_monitor.py INTERVAL_SECONDS
"""
import sys
import time

import wandb

run = wandb.init(project="bridge-bench", settings=wandb.Settings(x_stats_sampling_interval=float(sys.argv[1])))
try:
    while True:
        time.sleep(3600)
finally:
    run.finish()
