"""Logs a short run with the real wandb client, for the mock's faithfulness test.

usage: log_run.py PROJECT RUN_ID STEPS
Logs {"loss": 1/(i+1), "step": i} for i in 0..STEPS-1, then finishes; the
run has the tag "real-client" and notes "notes from the real client".
"""
import sys

import wandb

project, run_id, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
run = wandb.init(project=project, id=run_id, config={"lr": 0.01}, tags=["real-client"], notes="notes from the real client")
for i in range(steps):
    wandb.log({"loss": 1.0 / (i + 1), "step": i})
wandb.finish()
