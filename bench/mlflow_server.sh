# bench/mlflow_server.sh, sourced: start_mlflow DIR PYTHON starts a real
# MLflow server (sqlite in DIR, MLFLOW_WORKERS workers, default one) on a free port of 127.0.0.1 in
# its own process group, waits (bounded) for its /health, and sets
# mlflow_port and mlflow_pid (the group to kill). On failure it prints the
# server's log and returns 1.
start_mlflow() {
	local dir=$1 py=$2
	mlflow_port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false MLFLOW_DISABLE_TELEMETRY=true setsid "$py" -m mlflow server --host 127.0.0.1 --port "$mlflow_port" \
		--backend-store-uri "sqlite:///$dir/mlflow.db" --default-artifact-root "$dir/artifacts" --workers "${MLFLOW_WORKERS:-1}" >"$dir/mlflow.log" 2>&1 &
	mlflow_pid=$!
	disown "$mlflow_pid" # no "Killed" line from bash when it is ended
	for _ in $(seq 240); do
		curl -fsS "http://127.0.0.1:$mlflow_port/health" >/dev/null 2>&1 && return 0
		kill -0 "$mlflow_pid" 2>/dev/null || break
		sleep 0.5
	done
	tail -30 "$dir/mlflow.log" >&2
	return 1
}
