"""A counting HTTP proxy for bench/job_cost.sh: forwards every request to an
MLflow server unchanged and writes one JSON line a request (when, method,
path, bytes each way, status, and what bench/job_cost.py classifies it by:
the run it names, its metric and tag keys, a state line's length, and
the body itself up to 64 KiB).

    countproxy.py --listen PORT --upstream http://127.0.0.1:5000 --out requests.jsonl

It is a plain forwarder (no faults): mocks/faultproxy is a Go test library
with no command, and this bench needs the requests' bodies, which MLflow's
access log does not hold.
"""
import argparse
import http.client
import http.server
import json
import threading
import time
import urllib.parse


def describe(path, query, body):
    """What the request names: its run, and for writes the keys it sends."""
    d = {}
    q = urllib.parse.parse_qs(query)
    if "run_id" in q:
        d["run_id"] = q["run_id"][0]
    if not body:
        return d
    try:
        b = json.loads(body)
    except ValueError:
        return d
    if not isinstance(b, dict):
        return d
    if "run_id" in b:
        d["run_id"] = b["run_id"]
    if "filter" in b:
        d["filter"] = b["filter"]
    metrics = b.get("metrics") or []
    tags = b.get("tags") or []
    if path.endswith("runs/set-tag"):
        tags = [{"key": b.get("key", ""), "value": b.get("value", "")}]
    if metrics:
        d["metrics"] = len(metrics)
        d["job_series"] = sum(1 for m in metrics if str(m.get("key", "")).startswith("system/job_"))
    if tags:
        d["tag_keys"] = [t.get("key", "") for t in tags]
        lines = [t.get("value", "") for t in tags if str(t.get("key", "")).startswith("bridge.state.")]
        if lines:
            d["line_chars"] = max(len(v) for v in lines)
            d["line"] = lines[0]
    params = b.get("params") or []
    if path.endswith("runs/log-parameter"):
        params = [{"key": b.get("key", "")}]
    if params:
        d["param_keys"] = [p.get("key", "") for p in params]
    if path.endswith("runs/create"):
        d["create_tags"] = {t.get("key", ""): t.get("value", "") for t in tags}
        d.pop("tag_keys", None)
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    up = urllib.parse.urlparse(a.upstream)
    out = open(a.out, "a", buffering=1)
    lock = threading.Lock()
    local = threading.local()

    def conn():
        c = getattr(local, "conn", None)
        if c is None:
            c = local.conn = http.client.HTTPConnection(up.hostname, up.port, timeout=300)
        return c

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def forward(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", "keep-alive")}
            t = time.time()
            for attempt in range(2):
                c = conn()
                try:
                    c.request(self.command, self.path, body or None, headers)
                    r = c.getresponse()
                    raw = r.read()
                    break
                except (http.client.HTTPException, OSError):
                    c.close()
                    local.conn = None
                    if attempt == 1:
                        self.send_error(502)
                        return
            u = urllib.parse.urlsplit(self.path)
            rec = {"t": t, "method": self.command, "path": u.path, "query": u.query, "status": r.status,
                   "req_bytes": len(body), "resp_bytes": len(raw)}
            rec.update(describe(u.path, u.query, body))
            if body and len(body) <= 65536:
                rec["body"] = body.decode("utf-8", "replace")
            if u.path.endswith("runs/create") and r.status == 200:
                try:
                    rec["created"] = json.loads(raw)["run"]["info"]["run_id"]
                except (ValueError, KeyError):
                    pass
            try:
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            except OSError:
                rec["client_gone"] = True  # the client gave up before the answer (its timeout)
                self.close_connection = True
            with lock:
                out.write(json.dumps(rec) + "\n")

        do_GET = do_POST = do_PATCH = do_DELETE = forward

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", a.listen), Handler)
    srv.daemon_threads = True
    srv.serve_forever()


if __name__ == "__main__":
    main()
