"""Logs a short run with the real wandb client, for the mock's faithfulness test.

usage: log_run.py PROJECT RUN_ID STEPS
Logs {"loss": 1/(i+1), "step": i} for i in 0..STEPS-1, then finishes; the
run has the tag "real-client" and notes "notes from the real client".
With BRIDGE_TEST_EVENTS_GATE set, the run samples system metrics every
second and stays open until that file exists (the test creates it once the
server holds a system-metrics line), at most 120 s.
"""
import os
import sys
import time

import wandb

project, run_id, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
gate = os.environ.get("BRIDGE_TEST_EVENTS_GATE")
settings = wandb.Settings(x_stats_sampling_interval=1.0) if gate else None
run = wandb.init(project=project, id=run_id, config={"lr": 0.01}, tags=["real-client"],
                 notes="notes from the real client", settings=settings)
for i in range(steps):
    wandb.log({"loss": 1.0 / (i + 1), "step": i})
deadline = time.monotonic() + 120
while gate and not os.path.exists(gate) and time.monotonic() < deadline:
    time.sleep(0.05)
wandb.finish()
