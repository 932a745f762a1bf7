"""Drive MLflow's system-metrics monitor classes as SystemMetricsMonitor.monitor
does (collect every interval, aggregate every samples_before_logging), without
a server: no get_run and no log_batch, so the figure is its sampling alone.

usage: mlflow_monitor.py INTERVAL_SECONDS [--idle] [--count-file F]
--idle runs the same loop with no monitors: its cost is subtracted.
"""
import sys
import time

interval = float(sys.argv[1])
idle = "--idle" in sys.argv
count_file = sys.argv[sys.argv.index("--count-file") + 1] if "--count-file" in sys.argv else None

monitors = []
if not idle:
    from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor
    from mlflow.system_metrics.metrics.disk_monitor import DiskMonitor
    from mlflow.system_metrics.metrics.network_monitor import NetworkMonitor

    monitors = [CPUMonitor(), DiskMonitor(), NetworkMonitor()]
    try:  # as SystemMetricsMonitor._initialize_gpu_monitor: only with NVML
        from mlflow.system_metrics.metrics.gpu_monitor import GPUMonitor

        monitors.append(GPUMonitor())
    except Exception:
        pass

samples_before_logging = 1  # MLflow's default
wrote = False
while True:
    for _ in range(samples_before_logging):
        metrics = {}
        for m in monitors:
            m.collect_metrics()
            metrics.update(m._metrics)
        time.sleep(interval)
    agg = {}
    for m in monitors:
        agg.update(m.aggregate_metrics())
        m.clear_metrics()
    if count_file and not wrote:
        with open(count_file, "w") as f:
            f.write(str(len(agg)))
        wrote = True
