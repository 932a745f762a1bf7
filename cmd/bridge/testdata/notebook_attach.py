# A notebook kernel's session with bridge_system_metrics.attach(), run by
# TestNotebookAttach against a real MLflow server: attach() twice and a
# `bridge attach` beside it for the same run and process, then
# mlflow.end_run(); the run resumed and attached again, then ended again.
# argv: the bridge binary under test, the tracking URI, the experiment.
# Prints one JSON line of what it saw.
import json
import os
import subprocess
import sys
import time
import warnings

import mlflow
from mlflow.tracking import MlflowClient

import bridge_system_metrics

bridge, uri, experiment = sys.argv[1:4]
bridge_system_metrics.binary = lambda: bridge  # the binary under test, not a wheel's
mlflow.set_tracking_uri(uri)
mlflow.set_experiment(experiment)
client = MlflowClient()
KEY = "system/container_memory_working_set_megabytes"
out = {}


def history(run_id):
    return client.get_metric_history(run_id, KEY)


def wait_points(run_id, n):
    deadline = time.time() + 90
    while len(history(run_id)) < n and time.time() < deadline:
        time.sleep(0.1)
    return len(history(run_id))


warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    run_id = mlflow.start_run().info.run_id
    first = bridge_system_metrics.attach(["--interval", "300ms"])
    again = bridge_system_metrics.attach(["--interval", "300ms"])
    out["same_monitor"] = first is again
    wait_points(run_id, 2)  # the monitor runs (it holds its lock) before the CLI tries
    cli = subprocess.run([bridge, "attach", "--interval", "300ms", "--pid", str(os.getpid())],
                         env=dict(os.environ, MLFLOW_TRACKING_URI=uri, MLFLOW_RUN_ID=run_id),
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=90)
    out["cli_code"], out["cli_stderr"] = cli.returncode, cli.stderr
    out["points_before_end"] = wait_points(run_id, 4)
    mlflow.end_run()
    # As MLflow's own monitor: end_run() has stopped it, and it returned.
    out["running_after_end_run"] = first.running
    out["exit"] = first.process.returncode
    r = client.get_run(run_id)
    out["first"] = {"status": r.info.status, "end_time": r.info.end_time, "tags": dict(r.data.tags),
                    "points": [[m.step, m.timestamp] for m in history(run_id)]}

    # The run resumed: attach() starts a new monitor, whose steps continue.
    mlflow.start_run(run_id=run_id)
    second = bridge_system_metrics.attach(["--interval", "300ms"])
    out["new_monitor"] = second is not first
    wait_points(run_id, len(out["first"]["points"]) + 3)
    mlflow.end_run()
    out["second_running_after_end_run"] = second.running
    out["second_points"] = [[m.step, m.timestamp] for m in history(run_id)]
    out["spools_left"] = sorted(f for f in os.listdir(".") if f.startswith("bridge-spool-"))
out["warnings"] = [str(w.message) for w in caught]
print(json.dumps(out), flush=True)
