# attach() beside wandb.run. argv: the project, given to wandb.init only (the
# environment has none). Prints "attached RUN_ID", waits for a line on stdin,
# stops bridge, finishes the run.
import sys

import wandb

import bridge_system_metrics

run = wandb.init(project=sys.argv[1])
monitor = bridge_system_metrics.attach(["--interval", "1s"])
print("attached", run.id, flush=True)
sys.stdin.readline()
print("stopped", monitor.stop(), flush=True)
run.finish()
