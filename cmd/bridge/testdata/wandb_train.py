"""A training script for bridge's W&B end-to-end test (cmd/bridge/wandb_e2e_test.go).

usage: wandb_train.py PROJECT EXIT_CODE [--no-wandb]

With wandb: wandb.init(project=PROJECT) creates the run with the id bridge
gave it in WANDB_RUN_ID, prints "ready <run id>", then logs one step per line
read from stdin ({"loss": 1/(i+1)}) and prints "logged i"; at the end of stdin
it finishes the run with EXIT_CODE and exits with it. The test drives the
steps, so that it knows what the run holds and when an outage falls.

With --no-wandb it prints "ran without wandb" and exits with EXIT_CODE, for
the case where bridge's key is bad and the job must run on regardless.
"""
import sys

project, exit_code = sys.argv[1], int(sys.argv[2])
if "--no-wandb" in sys.argv[3:]:
    print("ran without wandb", flush=True)
    sys.exit(exit_code)

import wandb  # noqa: E402  (not needed, and slow to import, without wandb)

wandb.init(project=project)
print("ready", wandb.run.id, flush=True)
i = 0
for _ in sys.stdin:
    wandb.log({"loss": 1.0 / (i + 1)})
    print("logged", i, flush=True)
    i += 1
wandb.finish(exit_code=exit_code)
sys.exit(exit_code)
