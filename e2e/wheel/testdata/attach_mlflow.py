# attach() beside an active MLflow run, as a notebook kernel would call it.
# argv: tracking URI, experiment name, "stop" (stop explicitly) or "exit"
# (leave it to the atexit hook). Prints "attached RUN_ID BRIDGE_PID BINARY",
# waits for a line on stdin, then stops or exits.
import sys

import mlflow

import bridge_system_metrics

uri, experiment, how = sys.argv[1:4]
mlflow.set_tracking_uri(uri)
mlflow.set_experiment(experiment)
run = mlflow.start_run()
monitor = bridge_system_metrics.attach(["--interval", "1s"])
print("attached", run.info.run_id, monitor.process.pid, monitor.command[0], flush=True)
sys.stdin.readline()
if how == "stop":
    print("stopped", monitor.stop(), flush=True)
