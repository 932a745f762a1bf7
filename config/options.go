package config

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/config/option"
	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/jobkey"
)

// setting is an option with where its loaded value goes.
type setting struct {
	option.Option
	set func(v any)
}

// bind is o, whose value goes to *to.
func bind[T any](to *T, o *option.Of[T]) setting {
	return setting{o, func(v any) { *to = v.(T) }}
}

// settings are every option, bridge's own (bound to c's fields) then the
// registrations' (into c.Options).
func settings(c *Config, ch Choices) []setting {
	out := own(c, ch)
	for _, o := range ch.Options {
		key := o.Spec().Key
		out = append(out, setting{o, func(v any) { c.Options[key] = v }})
	}
	return out
}

// own are bridge's own settings, each bound to its field of c, in the order
// of the README's flag table; ch gives what --scopes and --trackers take.
// Each flag is registered typed (RegisterFlags), so that pflag rejects a
// value of the wrong type naming the flag.
func own(c *Config, ch Choices) []setting {
	return []setting{
		bind(&c.Interval, &option.Of[time.Duration]{Key: "interval", Default: 10 * time.Second,
			Valid: option.Within(100*time.Millisecond, maxDuration, false),
			Usage: "time between samples (Go duration, e.g. 10s; 100ms to 24h); the second sample comes after a random part of it, so that bridges started together do not post at once",
			Doc:   "time between samples (Go duration), as MLflow; the first sample is taken at once, the second after a random part of the interval, so that bridges started together do not all post at the same instant"}),
		bind(&c.FastInterval, &option.Of[time.Duration]{Key: "fast-interval", Default: time.Second,
			Valid: option.Within(10*time.Millisecond, maxDuration, true),
			Usage: "time between samples while the working set is above --fast-threshold of the limit (0 turns it off)",
			Doc:   "sampling interval while the working set is above `--fast-threshold` of the limit"}),
		bind(&c.FastThreshold, &option.Of[float64]{Key: "fast-threshold", Default: 90.0, Valid: percentage,
			Usage: "percent of the memory limit above which bridge samples every --fast-interval, in (0, 100]",
			Doc:   "percent of the memory limit that switches to fast sampling"}),
		bind(&c.Scopes, &option.Of[[]string]{Key: "scopes", Default: slices.Clone(ch.Scopes), Valid: ch.scopes,
			Usage: "scopes to collect: " + strings.Join(ch.Scopes, ", "), Shown: "all",
			Doc: "`" + strings.Join(ch.Scopes, ",") + "`"}),
		bind(&c.NodeID, &option.Of[string]{Key: "node-id", Shown: "from the launcher", Valid: nodeID,
			Usage: "node id for multi-node runs: MLflow keys go under system/<node-id>/, W&B series get the label /l:<node-id>",
			Doc:   "multi-node runs: keys under `system/<node-id>/` (MLflow), label `/l:<node-id>` (W&B)"}),
		bind(&c.JobKey, &option.Of[string]{Key: "job-key", Shown: "from the launcher", Valid: jobKey,
			Usage: "multi-node jobs: the key that names the job's one run on every node (default: found from the launcher: Slurm, torchrun, Kubernetes; \"none\" turns that off); " + jobkey.KeyRule,
			Doc:   "multi-node jobs: the key that names the job's one run on every node (Slurm, torchrun, Kubernetes give one; `none` turns that off; [docs/multinode.md](docs/multinode.md))"}),
		bind(&c.Nodes, &option.Of[int]{Key: "nodes", Shown: "from the launcher",
			Valid: whole(0, MaxNodes, fmt.Sprintf("must be a whole number from 1 to %d (0: from the launcher)", MaxNodes)),
			Usage: "multi-node jobs: how many nodes the job has (default: from the launcher); the run is FINISHED once that many nodes ended cleanly",
			Doc:   "multi-node jobs: how many nodes must end cleanly before the job's run is FINISHED"}),
		bind(&c.JobSettle, &option.Of[time.Duration]{Key: "job-settle", Default: time.Second,
			Valid: option.Within(100*time.Millisecond, time.Minute, false),
			Usage: "multi-node jobs: how long a node that created a candidate run waits before it looks again and picks the job's run (100ms to 1m; see docs/multinode.md)",
			Doc:   "multi-node jobs: the settle time of the election that finds the job's run"}),
		bind(&c.LogLevel, &option.Of[string]{Key: "log-level", Default: "info", Valid: logLevel,
			Usage: "log level: debug, info, warn, error", Doc: "`debug`, `info`, `warn`, `error`"}),
		bind(&c.Trackers, &option.Of[[]string]{Key: "trackers", Default: []string{"auto"}, Valid: ch.checkTrackers,
			Usage: "trackers to send to: " + strings.Join(ch.trackers(), ", ") + " (comma-separated)", Shown: "`auto`",
			Doc: "`" + strings.Join(ch.trackers(), "`, `") + "`; " +
				"`auto` turns on MLflow when `MLFLOW_TRACKING_URI` is set (it must be an `mlflow server`'s http(s) URL) and W&B when `WANDB_API_KEY` or `WANDB_PROJECT` is set"}),
		bind(&c.RunName, &option.Of[string]{Key: "run-name", Shown: "the script's name", Valid: runName,
			Usage: "name of the run when bridge creates it (default: the script the command runs, e.g. train.py; else from the command line as recorded)",
			Doc:   "name of a run bridge creates; by default the script the command runs (`train.py`), else the module of `-m`, else the program and its first arguments"}),
		bind(&c.Spool, &option.Of[string]{Key: "spool", Shown: "`./bridge-spool-<node>-<run>.jsonl`", Valid: spoolPath,
			Usage: "JSON Lines spool file (default ./bridge-spool-<node>-<run>.jsonl)",
			Doc:   "the durable JSON Lines spool (one writer at a time; `<node>` is `--node-id` or the job's node id, else the host name, with `.task-<n>` for a job's further bridges on one node)"}),
		bind(&c.FlushTimeout, &option.Of[time.Duration]{Key: "flush-timeout", Default: 30 * time.Second,
			Valid: option.Within(0, maxDuration, true),
			Usage: "after the child exits, longest wait in all for trackers to take what is left and record the end (the rest stays in the spool; a tracker that never answered gets 2s); a second SIGINT/SIGTERM ends it at once",
			Doc:   "after the child exits, the longest bridge waits in all (trackers taking what is left, recording the end) before it exits; what is unsent stays in the spool. A tracker that never answered during the job gets 2 s of it. A second SIGINT/SIGTERM during this wait ends it at once"}),
		bind(&c.StartTimeout, &option.Of[time.Duration]{Key: "start-timeout", Default: DefaultStartTimeout,
			Valid: option.Within(100*time.Millisecond, maxStartTimeout, false),
			Usage: "longest wait for trackers before the child starts: the child starts within this whatever the trackers do (100ms to 10m)",
			Doc:   "the child starts within this, whatever the trackers do (100ms to 10m); a tracker that is unreachable by then is started again in the background (see docs/reliability.md); one whose start has not even returned is not used for this attempt, its samples stay in the spool for `bridge sync`"}),
		bind(&c.KillAfter, &option.Of[time.Duration]{Key: "kill-after", Shown: "`0` (off)",
			Valid: option.Within(0, maxDuration, true),
			Usage: "after bridge forwards SIGTERM (or SIGINT), send SIGKILL to the child's group if it is still running this long after (0 = never)",
			Doc:   "once bridge has forwarded SIGTERM or SIGINT, SIGKILL the child's group if it still runs this long after; the verdict says so"}),
		bind(&c.SpoolMaxSize, &option.Of[ByteSize]{Key: "spool-max-size", Default: defaultSpoolSize, Valid: spoolMaxSize,
			Usage: "largest size of the spool file, e.g. 512MiB, 1GiB (0 = no cap)",
			Doc:   "largest size of the spool file (`512MiB`, `1GiB`, `0` = no cap; binary units)"}),
		bind(&c.SpoolSync, &option.Of[time.Duration]{Key: "spool-sync", Default: time.Second,
			Valid: option.Within(0, maxSpoolSync, true),
			Usage: "longest delay before the spool's writes are fsynced, 0 to 1m (0 = fsync every sample); a machine crash (not a crash of bridge) can lose the samples of this delay not yet sent",
			Doc:   "longest delay before what no tracker has is fsynced (0 to 1m); what every tracker acknowledged is not fsynced. A crash or kill of bridge loses nothing either way; a machine crash (kernel panic, power loss) can lose up to this much of the samples not yet sent to a tracker. `0` fsyncs every write (see [docs/reliability.md](docs/reliability.md))"}),
		bind(&c.KeepSpool, &option.Of[bool]{Key: "keep-spool",
			Usage: "keep the spool file of a clean run even when every tracker has taken all of it",
			Doc:   "keep the spool of a clean run even when every tracker took all of it"}),
		bind(&c.CollectTimeout, &option.Of[time.Duration]{Key: "collect-timeout", Default: 5 * time.Second,
			Valid: option.Within(10*time.Millisecond, 10*time.Minute, false),
			Usage: "longest wait for one collector in one sample (10ms to 10m)",
			Doc:   "longest wait for one collector, and for the cgroup's limits before the child starts (a hung NVML call or kernel read cannot stall sampling or the start)"}),
		bind(&c.Window, &option.Of[time.Duration]{Key: "window", Default: time.Second,
			Valid: option.Within(0, time.Hour, true),
			Usage: "bridge sample: time between the two readings that CPU rates need",
			Doc:   "`bridge sample`: time between its two readings"}),
		bind(&c.AnalysisWindow, &option.Of[time.Duration]{Key: "analysis-window", Default: time.Minute,
			Valid: option.Within(time.Second, time.Hour, false),
			Usage: "the span of each bottleneck verdict, from the node's samples in it (1s to 1h)",
			Doc:   "the span of each bottleneck verdict (`bridge.bottleneck`, `node_bottleneck_<cause>_ratio`; [docs/metrics.md](docs/metrics.md#the-bottleneck)), from the node's samples in it"}),
		bind(&c.ProcRoot, &option.Of[string]{Key: "proc-root", Default: "/proc", Valid: directory,
			Usage: "where procfs is mounted (e.g. /host/proc for a sidecar reading another view)",
			Doc:   "where procfs is read from (a sidecar with the host's mounted elsewhere; the golden test's fixture trees)"}),
		bind(&c.CgroupRoot, &option.Of[string]{Key: "cgroup-root", Default: "/sys/fs/cgroup", Valid: directory,
			Usage: "where the cgroup filesystem is mounted",
			Doc:   "where the cgroup filesystem is read from"}),
		bind(&c.Rootfs, &option.Of[string]{Key: "rootfs", Default: "/", Valid: directory,
			Usage: "the filesystem the rootfs_ series describe", Doc: "the filesystem the `rootfs_` series describe"}),
		bind(&c.SysRoot, &option.Of[string]{Key: "sys-root", Default: "/sys", Valid: directory,
			Usage: "where sysfs is mounted (RAPL energy, InfiniBand ports, AMD GPUs and the network interfaces' stacking are read under its class/)",
			Doc:   "where sysfs is read from: RAPL, InfiniBand, AMD GPUs and which network interfaces `netns_` counts, under `<sys-root>/class`"}),
		bind(&c.RunTick, &option.Of[time.Duration]{Key: "run-tick", Default: time.Minute, Shown: "`1m`",
			Valid: option.Within(time.Second, time.Hour, false),
			Usage: "time between two reads of the run during the job (1s to 1h): the energy per step from the script's steps, and the run's note every 5th",
			Doc:   "time between the run's ticks (1s to 1h): one read of the run each, for the job's energy per step from the training script's steps, and the run's note kept current every 5th ([docs/metrics.md](docs/metrics.md))"}),
		bind(&c.PricePerGPUHour, &option.Of[float64]{Key: "price-per-gpu-hour", Shown: "none", Valid: price,
			Usage: "what a GPU costs an hour, in your currency (0 to 1e6; 0: none): the run's cost goes in a tag, the report and the end-of-run table",
			Doc:   "what a GPU costs an hour, in your currency (0 to 1e6): with a price the run's cost is a tag (`bridge.cost`), a line in the report and the end-of-run table; no price, no cost"}),
		bind(&c.PricePerNodeHour, &option.Of[float64]{Key: "price-per-node-hour", Shown: "none", Valid: price,
			Usage: "what a node costs an hour, in your currency (0 to 1e6; 0: none), added to the GPUs' price",
			Doc:   "what a node costs an hour, in your currency (0 to 1e6), beside the GPUs' price"}),
		bind(&c.MetricsAddr, &option.Of[string]{Key: "metrics-addr", Shown: "off", Valid: metricsAddr,
			Usage: "serve the samples on /metrics in the Prometheus text format: PORT (binds 127.0.0.1), HOST:PORT or :PORT (all interfaces); default off",
			Doc:   "serve the samples on `/metrics` (Prometheus text format, cAdvisor names); a bare port binds 127.0.0.1 ([docs/prometheus.md](docs/prometheus.md))"}),
	}
}

// The checks of bridge's own options (option.Of.Valid): each says why a
// value is refused, config names where it came from.

func percentage(p float64) (float64, error) {
	if math.IsNaN(p) || p <= 0 || p > 100 {
		return p, errors.New("must be a percentage in (0, 100]")
	}
	return p, nil
}

// maxPrice bounds a price an hour: past any machine's, so that a cost stays
// finite over any run.
const maxPrice = 1e6

func price(p float64) (float64, error) {
	if math.IsNaN(p) || p < 0 || p > maxPrice {
		return p, errors.New("must be a price from 0 (none) to 1e6 an hour")
	}
	return p, nil
}

// whole checks an integer is from lo to hi; why says so.
func whole(lo, hi int, why string) func(int) (int, error) {
	return func(n int) (int, error) {
		if n < lo || n > hi {
			return n, errors.New(why)
		}
		return n, nil
	}
}

func spoolMaxSize(b ByteSize) (ByteSize, error) {
	if b != 0 && b < MinSpoolMaxSize {
		return b, fmt.Errorf("must be 0 (no cap) or at least %s", ByteSize(MinSpoolMaxSize))
	}
	return b, nil
}

// scopes are the --scopes of the registrations (ch), at least one.
func (ch Choices) scopes(l []string) ([]string, error) {
	out, err := option.List(l, ch.Scopes)
	if err == nil && len(out) == 0 {
		err = errors.New("name at least one scope")
	}
	return out, err
}

// checkTrackers: the registrations' trackers (ch), or "auto" or "none"
// alone; none named is "auto".
func (ch Choices) checkTrackers(l []string) ([]string, error) {
	out, err := option.List(l, ch.trackers())
	switch {
	case err != nil:
		return nil, err
	case len(out) == 0:
		return []string{"auto"}, nil
	case len(out) > 1 && (slices.Contains(out, "none") || slices.Contains(out, "auto")):
		return nil, &option.Bad{Value: strings.Join(out, ","), Why: `"auto" and "none" cannot be combined with other trackers`}
	}
	return out, nil
}

func logLevel(l string) (string, error) {
	l = strings.ToLower(l)
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, l) {
		return l, errors.New("must be debug, info, warn or error")
	}
	return l, nil
}

func nodeID(id string) (string, error) {
	if id != "" && !jobkey.ValidNodeID(id) {
		return id, errors.New(jobkey.NodeIDRule)
	}
	return id, nil
}

func jobKey(k string) (string, error) {
	if k != "" && !strings.EqualFold(k, jobkey.None) && !jobkey.ValidKey(k) {
		return k, errors.New(jobkey.KeyRule + `, or "none"`)
	}
	return k, nil
}

func runName(n string) (string, error) {
	if len(n) > 250 || strings.ContainsFunc(n, option.IsControl) {
		return n, errors.New("must be at most 250 characters without control characters")
	}
	return n, nil
}

// spoolPath: a file's path, not a directory's. "" is the default path.
// Whether it names a directory is seen here by its form ("dir/", "."),
// and by a stat where it is opened (pipeline.CheckSpool), under the
// start's context: a signal ends that stat at once.
func spoolPath(p string) (string, error) {
	if strings.ContainsFunc(p, option.IsControl) || strings.ContainsRune(p, 0) {
		return p, errors.New("must be a file path without control characters")
	}
	if p != "" && (strings.HasSuffix(p, "/") || slices.Contains([]string{".", ".."}, filepath.Base(p))) {
		return p, errors.New("is a directory; name a file")
	}
	return p, nil
}

// rootWait bounds the stat of a root: a root on a mount that does not
// answer is no usage error; the collectors reading it are left out at
// their deadline.
const rootWait = 2 * time.Second

// directory: a root bridge reads under (--proc-root, ...).
func directory(p string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), rootWait)
	defer cancel()
	st, e := kfile.Stat(ctx, p)
	if p == "" || (e != nil && !errors.Is(e, kfile.ErrNoAnswer)) || (e == nil && !st.IsDir()) {
		return p, errors.New("not a directory")
	}
	return p, nil
}
