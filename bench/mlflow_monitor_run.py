"""Run MLflow's own SystemMetricsMonitor on a run of a real MLflow server, as
mlflow.start_run(log_system_metrics=True) does: its thread samples, calls
get_run every sample and log_batch through BatchMetricsLogger. The main
thread only sleeps, so the process's CPU beyond its idle twin is the
monitor's.

usage: mlflow_monitor_run.py TRACKING_URI INTERVAL_SECONDS [--idle] [--count-file F]
--idle imports the same and makes the same client, without a monitor.
"""
import sys
import time

import mlflow
from mlflow.tracking import MlflowClient

uri, interval = sys.argv[1], float(sys.argv[2])
idle = "--idle" in sys.argv
count_file = sys.argv[sys.argv.index("--count-file") + 1] if "--count-file" in sys.argv else None

mlflow.set_tracking_uri(uri)
client = MlflowClient(uri)
exp = "bench-overhead"
e = client.get_experiment_by_name(exp)
exp_id = e.experiment_id if e else client.create_experiment(exp)
run = client.create_run(exp_id, run_name="mlflow-monitor" + ("-idle" if idle else ""))
if not idle:
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    mon = SystemMetricsMonitor(run.info.run_id, sampling_interval=interval, samples_before_logging=1, tracking_uri=uri)
    mon.start()
    if count_file:
        # Its series a sample, once the first batch is in the run.
        for _ in range(600):
            m = client.get_run(run.info.run_id).data.metrics
            if m:
                with open(count_file, "w") as f:
                    f.write(str(len(m)))
                break
            time.sleep(0.5)
while True:
    time.sleep(3600)
