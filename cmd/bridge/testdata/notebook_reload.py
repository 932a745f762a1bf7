# A notebook kernel's session that reloads bridge_system_metrics, run by
# TestNotebookAttachReload against a real MLflow server: attach(), then
# importlib.reload() and attach() again (the monitor running is kept),
# then a fresh import of the module (its table is new: its attach()
# starts a `bridge attach` that the running one refuses), then
# mlflow.end_run(). Every sample reached the run: nothing warns.
# argv: the bridge binary under test, the tracking URI, the experiment.
# Prints one JSON line of what it saw.
import importlib
import json
import os
import sys
import time
import warnings

import mlflow
from mlflow.tracking import MlflowClient

import bridge_system_metrics

bridge, uri, experiment = sys.argv[1:4]
mlflow.set_tracking_uri(uri)
mlflow.set_experiment(experiment)
client = MlflowClient()
KEY = "system/container_memory_working_set_megabytes"
out = {}


def under_test(module):
    module.binary = lambda: bridge  # the binary under test, not a wheel's
    return module


def wait_points(run_id, n):
    deadline = time.time() + 90
    while len(client.get_metric_history(run_id, KEY)) < n and time.time() < deadline:
        time.sleep(0.1)
    return len(client.get_metric_history(run_id, KEY))


warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    run_id = mlflow.start_run().info.run_id
    first = under_test(bridge_system_metrics).attach(["--interval", "300ms"])
    wait_points(run_id, 2)  # it runs, and holds its locks

    reloaded = under_test(importlib.reload(bridge_system_metrics))
    out["same_after_reload"] = reloaded.attach(["--interval", "300ms"]) is first

    del sys.modules["bridge_system_metrics"]
    fresh = under_test(importlib.import_module("bridge_system_metrics"))
    refused = fresh.attach(["--interval", "300ms"])
    out["refused_exit"] = refused.process.wait(60)
    out["first_running"] = first.running
    wait_points(run_id, 4)
    mlflow.end_run()
    out["first_exit"] = first.process.returncode
    out["status"] = client.get_run(run_id).info.status
    out["steps"] = sorted(m.step for m in client.get_metric_history(run_id, KEY))
    out["spools_left"] = sorted(f for f in os.listdir(".") if f.startswith("bridge-spool-"))
out["warnings"] = [str(w.message) for w in caught]
print(json.dumps(out), flush=True)
