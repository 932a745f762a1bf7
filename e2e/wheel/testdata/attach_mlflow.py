# attach() beside an active MLflow run, as a notebook kernel would call it.
# argv: tracking URI, experiment name, and how it ends: "stop" (stop()
# explicitly), "exit" (left to the atexit hook) or "offline-wandb" (an
# offline W&B run beside it, then stop()). Prints "attached RUN_ID BRIDGE_PID
# BINARY TRACKERS", waits for a line on stdin, then stops or exits.
import sys

import mlflow

import bridge_system_metrics

uri, experiment, how = sys.argv[1:4]
mlflow.set_tracking_uri(uri)
mlflow.set_experiment(experiment)
run = mlflow.start_run()
if how == "offline-wandb":
    import wandb

    wandb.init(mode="offline", project="bridge-wheel")
monitor = bridge_system_metrics.attach(["--interval", "1s"])
print("attached", run.info.run_id, monitor.process.pid, monitor.command[0], ",".join(monitor.runs), flush=True)
sys.stdin.readline()
if how != "exit":
    print("stopped", monitor.stop(), flush=True)
