"""bridge for notebooks: scope-correct system metrics into the run you train in.

    import mlflow, bridge_system_metrics
    mlflow.start_run()                          # or wandb.init()
    monitor = bridge_system_metrics.attach()    # samples until this process ends
    ...                                         # train
    monitor.stop()                              # optional: stop earlier

attach() starts `bridge attach` (the binary this package was installed with)
beside the current process, writing into the active run: MLflow's
mlflow.active_run() and W&B's wandb.run, whichever this process has. It is the
counterpart of mlflow.enable_system_metrics_logging(), with the container's
cgroup, the node, the root filesystem and GPUs under names that say their scope
(docs/metrics.md). As MLflow's own monitor, it stops at mlflow.end_run(), and
attach() again for the same run returns the monitor already running. Only the
standard library is used; mlflow and wandb are looked at only if this process
has imported them.
"""

import atexit
import fcntl
import glob
import importlib.metadata
import os
import re
import signal
import subprocess
import sys
import warnings

__all__ = ["attach", "Attached", "NoActiveRunError", "binary"]

DISTRIBUTION = "bridge-system-metrics"


class NoActiveRunError(RuntimeError):
    """attach() found no run to write into."""


def binary():
    """The path of the bridge binary installed by this package's own wheel
    (not whichever bridge comes first on PATH)."""
    here = os.path.realpath(__file__)
    for dist in importlib.metadata.distributions():
        if (dist.metadata["Name"] or "").lower() != DISTRIBUTION:
            continue
        files = dist.files or []
        if not any(os.path.realpath(dist.locate_file(f)) == here for f in files):
            continue  # another installation of the same distribution
        for f in files:
            if f.name == "bridge" and len(f.parts) > 1 and f.parts[-2] == "bin":
                path = os.path.realpath(dist.locate_file(f))
                if os.access(path, os.X_OK):
                    return path
                raise FileNotFoundError("%s: bridge from the %s wheel is missing or not executable; reinstall it" % (path, DISTRIBUTION))
    raise FileNotFoundError("%s is not installed from its wheel (no installed bridge is listed with %s); "
                            "install it with pip, see the README" % (__name__, here))


def _mlflow_run(env):
    """MLflow's active run, as bridge attach's environment; None if none."""
    mlflow = sys.modules.get("mlflow")
    if mlflow is None:
        return None
    run = mlflow.active_run()
    if run is None:
        return None
    uri = mlflow.get_tracking_uri()
    if not uri.startswith(("http://", "https://")):
        raise ValueError("MLflow's tracking URI is %r: bridge writes to an `mlflow server` over REST; "
                         "start one and call mlflow.set_tracking_uri('http://HOST:PORT') before mlflow.start_run()" % uri)
    env["MLFLOW_TRACKING_URI"] = uri
    env["MLFLOW_RUN_ID"] = run.info.run_id
    return run.info.run_id


def _wandb_run(env):
    """W&B's run, as bridge attach's environment; None if none."""
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    if run is None:
        return None
    if run.offline or run.disabled:
        raise ValueError("wandb.run %s is %s: bridge writes to the W&B server, so it needs an online run"
                         % (run.id, "offline" if run.offline else "disabled"))
    # The script may have named these in wandb.init() rather than in the
    # environment; bridge reads them only from there.
    env["WANDB_RUN_ID"] = run.id
    env["WANDB_PROJECT"] = run.project
    if run.entity:
        env["WANDB_ENTITY"] = run.entity
    env["WANDB_BASE_URL"] = run.settings.base_url
    key = getattr(run.settings, "api_key", None)
    if key and not env.get("WANDB_API_KEY"):
        env["WANDB_API_KEY"] = key  # else bridge reads ~/.netrc, as wandb does
    env.pop("WANDB_MODE", None)
    return run.id


# The monitors this process started, by what they monitor: attach() again
# for the same runs, process and node returns the one running. A reload of
# this module (importlib.reload) keeps the table: the monitors it holds
# still run.
_attached = globals().get("_attached", {})


def _flag(args, name):
    """The value of bridge's flag --name in args (--name X or --name=X), or
    None."""
    args = [str(a) for a in args]
    for i, a in enumerate(args):
        if a == "--" + name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--" + name + "="):
            return a.split("=", 1)[1]
    return None


def _node(args, env):
    """The node id bridge keys the series under: --node-id in args, else
    BRIDGE_NODE_ID, else MLFLOW_SYSTEM_METRICS_NODE_ID."""
    return _flag(args, "node-id") or env.get("BRIDGE_NODE_ID") or env.get("MLFLOW_SYSTEM_METRICS_NODE_ID") or ""


def _mlflow_monitors():
    """MLflow's table of the system-metrics monitors of its runs, which
    mlflow.end_run() finishes (mlflow.tracking.fluent); None if mlflow is not
    imported or has no such table."""
    fluent = sys.modules.get("mlflow.tracking.fluent")
    table = getattr(fluent, "run_id_to_system_metrics_monitor", None)
    return table if isinstance(table, dict) else None


class _EndRunHook:
    """Stands in MLflow's table of system-metrics monitors for a run, so that
    mlflow.end_run() stops bridge as it stops MLflow's own monitor (it calls
    finish()). MLflow's own monitor of the run, if any, is finished after."""

    def __init__(self, attached, previous):
        self.attached = attached
        self.previous = previous

    def finish(self):
        try:
            self.attached.stop()
        finally:
            if self.previous is not None:
                self.previous.finish()


def _written_now(path):
    """Whether a live bridge writes the spool at path (it holds the file's
    lock, which the kernel drops when its holder ends), or the file is gone:
    either way its samples are not left behind. A filesystem that cannot
    lock says nothing: then the spool counts as left."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return True  # removed meanwhile: delivered
    except OSError:
        return False
    try:
        # A shared lock, let go at once: it fails only while a writer holds
        # the exclusive one.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _safe_name(s):
    """bridge's default spool names keep only these characters."""
    return re.sub(r"[^-_.0-9A-Za-z]", "_", s)


class Attached:
    """A running `bridge attach`. It ends by itself when the attached process
    exits and when mlflow.end_run() ends the run it writes to; stop() ends it
    earlier, and runs at interpreter exit (before mlflow's and wandb's own
    exit hooks end the run, so the last samples land in a running run).

    runs: tracker name -> run id written to. process: the subprocess.Popen.
    """

    def __init__(self, process, runs, command, key=None, cwd=None, spool=None):
        self.process = process
        self.runs = runs
        self.command = command
        self._key = key
        self._cwd = cwd or os.getcwd()
        self._spool = spool  # a path the user gave (always kept), else None
        self._hook = None
        atexit.register(self.stop)

    @property
    def running(self):
        return self.process.poll() is None

    def _hook_end_run(self, run_id):
        table = _mlflow_monitors()
        if table is None:
            return  # bridge itself stops once it sees the run ended
        self._hook = (run_id, _EndRunHook(self, table.get(run_id)))
        table[run_id] = self._hook[1]

    def _unhook(self):
        if self._key is not None and _attached.get(self._key) is self:
            del _attached[self._key]
        if self._hook is None:
            return
        run_id, hook = self._hook
        self._hook = None
        table = _mlflow_monitors()
        if table is not None and table.get(run_id) is hook:  # not popped by end_run
            if hook.previous is not None:
                table[run_id] = hook.previous
            else:
                del table[run_id]

    def stop(self, timeout=60.0):
        """Stops bridge and waits for it to send what it has (bridge bounds
        that itself with --flush-timeout, 30 s by default). If it has not
        exited after timeout seconds, it is killed; what it had not sent stays
        in its spool file for `bridge sync`, and a warning names the file.
        Returns bridge's exit status."""
        atexit.unregister(self.stop)
        self._unhook()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._warn_unsent()
        return self.process.returncode

    def _warn_unsent(self):
        """bridge removes a spool whose every sample reached the run; one left
        at its default path holds samples not sent: say where. A spool that a
        live bridge still writes (its lock is held: another monitor of the
        run, which this one deferred to) is not left: that bridge sends or
        names it when it ends."""
        if self._spool is not None:
            return
        left = []
        for run_id in sorted(set(self.runs.values())):
            left += glob.glob(os.path.join(glob.escape(self._cwd), "bridge-spool-*-%s.jsonl" % glob.escape(_safe_name(run_id))))
        for path in sorted(set(left)):
            if _written_now(path):
                continue
            warnings.warn("bridge_system_metrics: not every sample reached the run; they are in %s: "
                          "upload them with `bridge sync %s`" % (path, path), stacklevel=3)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        state = "running" if self.running else "exited %s" % self.process.returncode
        return "<bridge attach pid=%d runs=%r %s>" % (self.process.pid, self.runs, state)


def attach(args=(), pid=None):
    """Starts `bridge attach` for this process (or pid) and the active run:
    mlflow.active_run() and/or wandb.run. args are more bridge flags, e.g.
    ["--interval", "5s"]; BRIDGE_* variables apply as well. bridge's messages
    go to this process's stderr. Called again for the same runs, process and
    node while that monitor runs, it returns it: no point is logged twice.
    mlflow.end_run() stops it, as it stops MLflow's own monitor (bridge also
    stops by itself once it sees the run ended). Raises NoActiveRunError when
    there is no run,
    ValueError when the only run cannot be written by bridge (a non-HTTP
    MLflow tracking URI, an offline W&B run); with two runs, one of them
    unusable, it warns and attaches to the other."""
    env = dict(os.environ)
    runs, problems = {}, []
    for name, find in (("mlflow", _mlflow_run), ("wandb", _wandb_run)):
        try:
            run_id = find(env)
        except ValueError as e:
            problems.append(e)
            continue
        if run_id:
            runs[name] = run_id
    if not runs:
        if problems:
            raise problems[0]
        raise NoActiveRunError("no active run: call mlflow.start_run() or wandb.init() first "
                               "(bridge writes into mlflow.active_run() or wandb.run)")
    for p in problems:  # the other tracker's run is used
        warnings.warn("bridge_system_metrics.attach: %s; attaching to the %s run only" % (p, " and ".join(runs)), stacklevel=2)
    pid = pid or os.getpid()
    key = (tuple(sorted(runs.items())), pid, _node(args, env))
    running = _attached.get(key)
    if running is not None and running.running:
        return running  # attach() again, for the same runs: nothing twice
    command = [binary(), "attach", "--trackers", ",".join(runs), "--pid", str(pid)] + list(args)
    # Its own session: a Ctrl-C meant for the training script does not stop
    # it; it ends with the process it watches, the run, or through stop().
    process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    attached = Attached(process, runs, command, key=key, spool=_flag(args, "spool") or env.get("BRIDGE_SPOOL"))
    _attached[key] = attached
    if "mlflow" in runs:
        attached._hook_end_run(runs["mlflow"])
    return attached
