"""Helpers for bench/load.sh (stdlib only); ticks() is also
bench/logbatch_cost.py's.

  load_helper.py ticks PGID...            utime+stime (+ reaped children of
                                           the group leaders) of all processes
                                           in those process groups, in ticks
  load_helper.py runs SPOOL...             run id of each spool's mlflow sink
  load_helper.py poll URL OUT RUN...       until killed: every 0.5 s one
                                           /ajax-api runs/search for RUNs; for
                                           each new newest timestamp, writes
                                           now - timestamp (ms) to OUT
  load_helper.py loss URL SPOOL...         samples in the spools vs distinct
                                           timestamps in MLflow's history
  load_helper.py pct FILE                  p50 p99 max of the numbers in FILE
  load_helper.py window T0MS T1MS          sample records on stdin (spool
                                           lines) whose time is in [T0, T1)
  load_helper.py rows DBURI                rows of MLflow's metrics table
  load_helper.py steps DBURI T0MS T1MS KEY (run, step) pairs of metric KEY
                                           whose time is in [T0, T1)
"""
import json, os, sys, time, urllib.error, urllib.request, urllib.parse


def ticks(pgids):
    pgids = set(int(p) for p in pgids)
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            st = open(f"/proc/{d}/stat").read()
        except OSError:
            continue
        f = st[st.rindex(")") + 2:].split()
        # f[0]=state f[1]=ppid f[2]=pgrp ... f[11]=utime f[12]=stime f[13]=cutime f[14]=cstime
        if int(f[2]) in pgids:
            total += int(f[11]) + int(f[12])
            if int(d) == int(f[2]):
                total += int(f[13]) + int(f[14])
    return total


def records(path):
    for line in open(path):
        try:
            yield json.loads(line)
        except ValueError:
            pass


def run_of(path):
    run = ""
    for r in records(path):
        if r.get("type") == "start" and (r.get("runs") or {}).get("mlflow"):
            run = r["runs"]["mlflow"]
        elif r.get("type") == "run" and r.get("sink") == "mlflow" and r.get("run"):
            run = r["run"]
    return run


def get(url, path, params, api="api"):
    # A saturated server (N = 50 on 2 cores) answers 400 when its connection
    # pool times out, or 5xx: retry with backoff, as bridge does, rather than
    # lose the count of a whole run.
    q = f"{url}/{api}/2.0/mlflow/{path}?{urllib.parse.urlencode(params)}"
    for attempt in range(8):
        try:
            with urllib.request.urlopen(q, timeout=60) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            if e.code not in (400, 429) and e.code < 500 or attempt == 7:
                raise
        except (urllib.error.URLError, TimeoutError):
            if attempt == 7:
                raise
        time.sleep(min(2 ** attempt, 30))


def poll(url, out, runs):
    seen = {}
    exp_ids = set()
    for run in runs:
        exp_ids.add(get(url, "runs/get", {"run_id": run}, api="ajax-api")["run"]["info"]["experiment_id"])
    ids = ",".join(f"'{r}'" for r in runs)
    body = json.dumps({"experiment_ids": sorted(exp_ids), "filter": f"attributes.run_id IN ({ids})",
                       "max_results": len(runs)}).encode()
    with open(out, "a") as o:
        while True:
            t0 = time.time()
            try:
                req = urllib.request.Request(f"{url}/ajax-api/2.0/mlflow/runs/search", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=30) as r:
                    res = json.load(r)
                now = time.time() * 1000
                for run in res.get("runs", []):
                    rid = run["info"]["run_id"]
                    ts = max((m.get("timestamp", 0) for m in run.get("data", {}).get("metrics", [])), default=0)
                    if ts and ts > seen.get(rid, 0):
                        if rid in seen:  # skip the first look (may be old)
                            o.write(f"{now - ts:.0f}\n")
                        seen[rid] = ts
                o.flush()
            except Exception as e:  # server busy: keep polling
                print(f"poll: {e}", file=sys.stderr)
            time.sleep(max(0, 0.5 - (time.time() - t0)))


def loss(url, spools):
    total = got = runs = missing_runs = 0
    for path in spools:
        run = run_of(path)
        samples = [r for r in records(path) if r.get("type") == "sample"]
        if not run:
            missing_runs += 1
            total += len(samples)
            continue
        runs += 1
        counts = {}
        for s in samples:
            for k in s.get("metrics") or {}:
                counts[k] = counts.get(k, 0) + 1
        if not counts:
            continue
        name = max(sorted(counts), key=lambda k: counts[k])
        want = {s["ts"] for s in samples if name in (s.get("metrics") or {})}
        have = set()
        token = None
        while True:
            p = {"run_id": run, "metric_key": "system/" + name, "max_results": 25000}
            if token:
                p["page_token"] = token
            res = get(url, "metrics/get-history", p)
            have |= {m["timestamp"] for m in res.get("metrics", [])}
            token = res.get("next_page_token")
            if not token:
                break
        total += len(want)
        got += len(want & have)
    print(total, got, total - got, runs, missing_runs)


def pct(path):
    v = sorted(float(x) for x in open(path) if x.strip())
    if not v:
        print("- - - 0")
        return
    q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
    print(f"{q(0.5):.0f} {q(0.99):.0f} {v[-1]:.0f} {len(v)}")


def window(lo, hi):
    n = 0
    for line in sys.stdin:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("type") == "sample" and lo <= r.get("ts", 0) < hi:
            n += 1
    print(n)


def query(uri, sql, **params):
    # SQLAlchemy comes with mlflow (psycopg2 for PostgreSQL on PYTHONPATH).
    import sqlalchemy

    eng = sqlalchemy.create_engine(uri)
    try:
        with eng.connect() as c:
            return c.execute(sqlalchemy.text(sql), params).scalar()
    finally:
        eng.dispose()


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "ticks":
        print(ticks(args))
    elif cmd == "runs":
        for a in args:
            try:
                print(run_of(a))
            except OSError:
                print()
    elif cmd == "poll":
        poll(args[0], args[1], args[2:])
    elif cmd == "loss":
        loss(args[0], args[1:])
    elif cmd == "pct":
        pct(args[0])
    elif cmd == "window":
        window(int(args[0]), int(args[1]))
    elif cmd == "rows":
        print(query(args[0], "select count(*) from metrics"))
    elif cmd == "steps":
        print(query(args[0], "select count(*) from (select distinct run_uuid, step from metrics"
                    " where key = :k and timestamp >= :lo and timestamp < :hi) s",
                    k=args[3], lo=int(args[1]), hi=int(args[2])))
