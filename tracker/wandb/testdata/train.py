"""A training script for the W&B sink's end-to-end test.

usage: train.py PROJECT EXIT_CODE
It creates the run with the id bridge gave it (WANDB_RUN_ID), prints "ready",
then logs one step per line read from stdin ({"loss": 1/(i+1)}) and prints
"logged i"; at the end of stdin it exits with EXIT_CODE without calling
wandb.finish, as many scripts do (wandb's exit hook finishes the run).
"""
import sys

import wandb

project, exit_code = sys.argv[1], int(sys.argv[2])
wandb.init(project=project)
print("ready", wandb.run.id, flush=True)
i = 0
for _ in sys.stdin:
    wandb.log({"loss": 1.0 / (i + 1)})
    print("logged", i, flush=True)
    i += 1
sys.exit(exit_code)
