"""Run MLflow's own SystemMetricsMonitor on a run of a real MLflow server, as
mlflow.start_run(log_system_metrics=True) does: its thread samples, calls
get_run every sample and log_batch through BatchMetricsLogger. The main
thread only sleeps, so the process's CPU beyond its idle twin is the
monitor's.

usage: mlflow_monitor_run.py TRACKING_URI INTERVAL_SECONDS [--idle] [--count-file F]
                             [--run-file F] [--experiment NAME]
--idle imports the same and makes the same client, without a monitor.
--count-file gets its series a sample, --run-file its run id, each once its
first metrics are in the run. --experiment: default bench-overhead.
"""
import sys
import time

import mlflow
from mlflow.tracking import MlflowClient

uri, interval = sys.argv[1], float(sys.argv[2])
idle = "--idle" in sys.argv


def opt(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


count_file, run_file = opt("--count-file"), opt("--run-file")

mlflow.set_tracking_uri(uri)
client = MlflowClient(uri)
exp = opt("--experiment", "bench-overhead")
e = client.get_experiment_by_name(exp)
try:
    exp_id = e.experiment_id if e else client.create_experiment(exp)
except mlflow.exceptions.MlflowException:  # another process created it first
    exp_id = client.get_experiment_by_name(exp).experiment_id
run = client.create_run(exp_id, run_name="mlflow-monitor" + ("-idle" if idle else ""))
if not idle:
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    mon = SystemMetricsMonitor(run.info.run_id, sampling_interval=interval, samples_before_logging=1, tracking_uri=uri)
    mon.start()
    if count_file or run_file:
        # Once the first batch is in the run.
        for _ in range(600):
            m = client.get_run(run.info.run_id).data.metrics
            if m:
                for path, text in ((count_file, str(len(m))), (run_file, run.info.run_id)):
                    if path:
                        with open(path, "w") as f:
                            f.write(text + "\n")
                break
            time.sleep(0.5)
while True:
    time.sleep(3600)
