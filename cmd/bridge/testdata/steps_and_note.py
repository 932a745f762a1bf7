"""A training script for bridge's tests, with the real mlflow client, in the
run bridge gives it (MLFLOW_RUN_ID): it writes the run's note as a person
would (NOTE, when set), logs a loss at steps 1 to STEPS (step=), touches
"logged", then runs until the file "stop" exists."""
import os
import pathlib
import time

import mlflow

steps = int(os.environ.get("STEPS", "100"))
with mlflow.start_run() as run:
    note = os.environ.get("NOTE")
    if note:
        mlflow.set_tag("mlflow.note.content", note)
    for step in range(1, steps + 1):
        mlflow.log_metric("loss", 1.0 / step, step=step)
    print(f"steps_and_note.py: run {run.info.run_id}: {steps} steps logged", flush=True)
    pathlib.Path("logged").touch()
    while not pathlib.Path("stop").exists():
        time.sleep(0.05)
