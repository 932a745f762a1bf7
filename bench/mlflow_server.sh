# bench/mlflow_server.sh, sourced: start_mlflow DIR PYTHON starts a real
# MLflow server (MLFLOW_WORKERS workers, default one) on a free port of
# 127.0.0.1 in its own process group, waits (bounded) for its /health, and
# sets mlflow_port, mlflow_pid (the group to kill), mlflow_db (its store's
# URI) and mlflow_pg_pgid. Its log, uvicorn's access log included, is
# DIR/mlflow.log. On failure it prints the server's log and returns 1.
#
# The store is sqlite in DIR, or with MLFLOW_BACKEND=postgres a private
# PostgreSQL cluster in DIR/pg (the Debian package, installed if missing,
# run as the postgres user; needs root and psycopg2 on PYTHONPATH), whose
# process group is mlflow_pg_pgid (empty with sqlite).
#
# stop_mlflow DIR ends all that start_mlflow DIR started, whether or not it
# got as far as the server: every script's cleanup calls it, so that a run
# with MLFLOW_BACKEND=postgres exported leaves no cluster behind.
start_mlflow() {
	local dir=$1 py=$2 store
	mlflow_port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	mlflow_pg_pgid=
	if [[ ${MLFLOW_BACKEND:-sqlite} == postgres ]]; then
		if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
			echo "== installing postgresql (Debian package)" >&2
			apt-get update -qq >&2
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
		fi
		local pgbin pgport
		pgbin=$(find /usr/lib/postgresql -maxdepth 2 -name bin | sort -V | tail -1)
		pgport=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
		chmod 755 "$dir"
		mkdir "$dir/pg" && chown postgres "$dir/pg"
		runuser -u postgres -- "$pgbin/initdb" -D "$dir/pg" -A trust -U postgres >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; return 1; }
		runuser -u postgres -- "$pgbin/pg_ctl" -D "$dir/pg" -l "$dir/pg/server.log" -w \
			-o "-p $pgport -k $dir/pg -c listen_addresses=127.0.0.1 -c max_connections=400" start >/dev/null || { tail -30 "$dir/pg/server.log" >&2; return 1; }
		runuser -u postgres -- "$pgbin/createdb" -h 127.0.0.1 -p "$pgport" mlflow
		mlflow_pg_pgid=$(ps -o pgid= -p "$(head -1 "$dir/pg/postmaster.pid")" | tr -d ' ')
		store="postgresql+psycopg2://postgres@127.0.0.1:$pgport/mlflow"
	else
		store="sqlite:///$dir/mlflow.db"
	fi
	mlflow_db=$store
	# In DIR: python -m puts its working directory first on sys.path, where
	# a folder of the repository could stand in for a module MLflow imports.
	[[ $py == */* && $py != /* ]] && py=$PWD/$py
	(cd "$dir" && MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false MLFLOW_DISABLE_TELEMETRY=true exec setsid "$py" -m mlflow server --host 127.0.0.1 --port "$mlflow_port" \
		--backend-store-uri "$store" --default-artifact-root "$dir/artifacts" --workers "${MLFLOW_WORKERS:-1}" >"$dir/mlflow.log" 2>&1) &
	mlflow_pid=$!
	disown "$mlflow_pid" # no "Killed" line from bash when it is ended
	echo "$mlflow_pid" >"$dir/mlflow.pgid" # for stop_mlflow, which may run after another start
	for _ in $(seq 240); do
		curl -fsS "http://127.0.0.1:$mlflow_port/health" >/dev/null 2>&1 && return 0
		kill -0 "$mlflow_pid" 2>/dev/null || break
		sleep 0.5
	done
	tail -30 "$dir/mlflow.log" >&2
	return 1
}

# stop_mlflow DIR: TERM to the server's process group, KILL after a grace
# of up to 5 s (a worker stuck in a request), then the PostgreSQL cluster,
# which the server must no longer be using.
stop_mlflow() {
	local pgid
	if [[ -f $1/mlflow.pgid ]]; then
		pgid=$(cat "$1/mlflow.pgid")
		kill -TERM -- "-$pgid" 2>/dev/null || true
		for _ in $(seq 50); do
			kill -0 -- "-$pgid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL -- "-$pgid" 2>/dev/null || true
	fi
	stop_mlflow_pg "$1"
}

# stop_mlflow_pg DIR stops the PostgreSQL cluster start_mlflow made in DIR,
# if any (bench/load.sh ends its servers with its other processes, at once).
stop_mlflow_pg() {
	[[ -f $1/pg/postmaster.pid ]] || return 0
	local pgbin
	pgbin=$(find /usr/lib/postgresql -maxdepth 2 -name bin | sort -V | tail -1)
	runuser -u postgres -- "$pgbin/pg_ctl" -D "$1/pg" -m fast -w stop >/dev/null 2>&1 || true
}
