"""A small stand-in for a training script, run by browser_test.go under bridge.

It logs its own loss and accuracy through the mlflow client (attaching to the
run bridge created, whose id bridge passes in MLFLOW_RUN_ID) while doing work
that bridge's system metrics can see: each step it grows a bytearray by
STEP_MB and touches every page of it, so the container's working set climbs
toward STEPS * STEP_MB, and it keeps one core busy for a growing part of the
second. With TRAIN_NOTE set it first writes the run's note, as a person
would.
"""

import math
import os
import time

import mlflow

STEPS = int(os.environ.get("TRAIN_STEPS", "8"))
STEP_MB = int(os.environ.get("TRAIN_STEP_MB", "75"))
PAGE = 4096

run = mlflow.start_run()
if os.environ.get("TRAIN_NOTE"):
    mlflow.set_tag("mlflow.note.content", os.environ["TRAIN_NOTE"])
print(f"train.py: run {run.info.run_id}, {STEPS} steps of {STEP_MB} MB", flush=True)

buf = bytearray()
for step in range(STEPS):
    t0 = time.monotonic()
    old = len(buf)
    buf.extend(bytes(STEP_MB << 20))
    # bytes() may come from calloc'd zero pages: write one byte per page so
    # that every page is really resident.
    for i in range(old, len(buf), PAGE):
        buf[i] = 1

    busy = 0.3 + 0.6 * step / max(STEPS - 1, 1)  # 30% .. 90% of the second
    x = 0.0
    while time.monotonic() - t0 < busy:
        x += math.sqrt(step + 1.0)

    loss = 2.0 * math.exp(-0.4 * step) + 0.05
    accuracy = 1.0 - 0.9 * math.exp(-0.5 * step)
    mlflow.log_metrics({"loss": loss, "accuracy": accuracy}, step=step + 1)
    print(f"train.py: step {step} loss {loss:.3f} accuracy {accuracy:.3f} held {len(buf) >> 20} MB", flush=True)

    rest = 1.0 - (time.monotonic() - t0)
    if rest > 0:
        time.sleep(rest)

mlflow.end_run()
