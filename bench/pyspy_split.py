"""Sum a py-spy profile of an MLflow server (raw format: collapsed stacks and
counts, as bench/load.sh's PYSPY writes) by where the time goes: per row
(metrics rows built and inserted, latest_metrics read and updated) and per
request (the event loop's HTTP and ASGI middleware, the WSGI bridge and
Flask, JSON and protobuf, the run looked up, sessions and the commit).

usage: pyspy_split.py PROFILE [REQUESTS ROWS]

With REQUESTS and ROWS (what the profile's window held), also ms a request
and a row at py-spy's 100 samples a second. py-spy counts a thread that is
running or runnable, so a loaded machine inflates every part alike.
"""
import collections
import sys

# (part, per-row?, test on the stack's frames [(function, file)]); first match wins.
PARTS = [
    ("latest_metrics: select, lock, update (per key)", True,
     lambda f: has(f, "_update_latest_metrics_if_necessary") or has(f, "_emit_update_statements")),
    ("metrics rows: build, insert (per point)", True,
     lambda f: under(f, "_log_metrics_once", ("InstanceState._initialize_instance", "Session.add_all",
                                               "_validate_metric", "Metric.__hash__", "__init__"))
     or has(f, "_emit_insert_statements") or has(f, "Metric.from_proto")
     or has(f, "_validate_batch_log_data") or has(f, "_assert_metrics_fields_present")),
    ("runs/get handler", False, lambda f: handler(f, "_get_run")),
    ("run looked up (twice a log-batch)", False,
     lambda f: has(f, "SqlAlchemyStore._get_run") or has(f, "_check_run_is_active")),
    ("sessions, flush bookkeeping, commit", False,
     lambda f: has(f, "Session.commit") or has(f, "make_managed_session")),
    ("request JSON, protobuf, validation, response", False,
     lambda f: has(f, "_get_request_message") or has(f, "_get_request_json") or has(f, "message_to_json")
     or has(f, "_validate_batch_log_limits") or has(f, "Response.__init__")),
    ("rest of the handlers", False, lambda f: has(f, "catch_mlflow_exception.<locals>.wrapper")),
    ("WSGI bridge and Flask (worker thread)", False, lambda f: has(f, "WorkerThread.run")),
    ("event loop: HTTP, ASGI middleware, asyncio", False, lambda f: True),
]


def has(frames, name):
    return any(fn == name for fn, _ in frames)


def under(frames, parent, names):
    names = set(names)
    seen = False
    for fn, _ in frames:
        if fn.endswith(parent):
            seen = True
        elif seen and fn in names:
            return True
    return False


def handler(frames, name):
    return any(fn == name and "server/handlers.py" in path for fn, path in frames)


def parse(path):
    for line in open(path):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        frames = []
        for f in stack.split(";"):
            if f.startswith("process "):
                continue
            fn, _, loc = f.partition(" (")
            frames.append((fn, loc))
        yield frames, int(n)


def main():
    path = sys.argv[1]
    reqs, rows = (float(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) > 3 else (0, 0)
    total = 0
    parts = collections.Counter()
    for frames, n in parse(path):
        total += n
        for name, _, test in PARTS:
            if test(frames):
                parts[name] += n
                break
    per_row = {name for name, row, _ in PARTS if row}
    print("| part | share | per |" + (" ms/request | ms/row |" if reqs else ""))
    print("|---|---|---|" + ("---|---|" if reqs else ""))
    for name, _, _ in PARTS:
        n = parts[name]
        if not n:
            continue
        line = f"| {name} | {100 * n / total:.1f}% | {'row' if name in per_row else 'request'} |"
        if reqs:
            ms = n * 10  # 100 samples a second
            line += f" {ms / reqs:.2f} | {ms / rows:.3f} |" if name in per_row else f" {ms / reqs:.2f} | |"
        print(line)
    row = sum(parts[n] for n in per_row)
    print(f"\nper row {100 * row / total:.1f}%, per request {100 * (total - row) / total:.1f}% of {total} samples")


if __name__ == "__main__":
    main()
