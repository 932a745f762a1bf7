package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/cgroup"
	"github.com/bridge-dev/bridge/metrics/gpu"
	"github.com/bridge-dev/bridge/metrics/node"
	"github.com/bridge-dev/bridge/metrics/process"
	"github.com/bridge-dev/bridge/metrics/scrape"
)

// Sources is the one place that lists bridge's collectors, and the side
// channels the rest of bridge needs from them: the memory probe, the start
// tags, the forensics' inputs and the child's pid.
type Sources struct {
	// Collectors are what the sampler runs, in order.
	Collectors []metrics.Collector
	// Notes say why a scope is missing, for `bridge sample`.
	Notes map[string]any

	log      *slog.Logger
	cgroup   *cgroup.Collector // nil when the container scope is off or unavailable
	gpu      *gpu.Collector    // nil when the gpu scope is off
	scrape   *scrape.Collector // nil without --scrape
	childPID atomic.Int64      // the process collector's root
	adopter  atomic.Int64      // bridge's pid while it supervises the child: orphans it adopts count too
}

// BuildSources creates the collectors the configuration asks for. A source
// that is unavailable here is left out with a note; an error is a usage
// error that names its flag: a malformed --gpus entry, or a --proc-root
// the GPU collector's process finder cannot read.
func BuildSources(cfg config.Config, log *slog.Logger) (*Sources, error) {
	s := &Sources{Notes: map[string]any{}, log: log}
	if cfg.HasScope("container") {
		switch {
		case cfg.NoContainer:
			s.Notes["cgroup"] = "container awareness turned off (--no-container / BRIDGE_NO_CONTAINER)"
		default:
			c, err := cgroup.New(CgroupOptions(cfg, log))
			if err != nil {
				level := slog.LevelWarn
				if errors.Is(err, cgroup.ErrUnavailable) {
					level = slog.LevelInfo
				}
				log.Log(context.Background(), level, "container metrics are off", "err", err)
				s.Notes["cgroup"] = "off: " + err.Error()
			} else {
				s.cgroup = c
				s.Collectors = append(s.Collectors, c)
			}
		}
	}
	// The node collector serves three scopes; it reads only the sources of
	// those asked for (no statfs without rootfs, no net/dev without netns).
	var nodeScopes []metrics.Scope
	for _, sc := range node.ServedScopes {
		if cfg.HasScope(string(sc)) {
			nodeScopes = append(nodeScopes, sc)
		}
	}
	if len(nodeScopes) > 0 {
		n, err := node.New(node.Options{ProcRoot: cfg.ProcRoot, RootfsPath: cfg.Rootfs, Scopes: nodeScopes,
			Log: log.With("collector", "node")})
		if err != nil {
			log.Warn("node metrics are off", "err", err)
			s.Notes["node"] = "off: " + err.Error()
		} else {
			s.Collectors = append(s.Collectors, n)
		}
	}
	if cfg.HasScope("process") {
		p, err := process.New(process.Options{
			ProcRoot:   cfg.ProcRoot,
			CgroupRoot: cfg.CgroupRoot,
			Log:        log.With("collector", "process"),
			RootPID:    func() int { return int(s.childPID.Load()) },
			Adopter:    func() int { return int(s.adopter.Load()) },
		})
		if err != nil {
			log.Warn("process metrics are off", "err", err)
			s.Notes["process"] = "off: " + err.Error()
		} else {
			s.Collectors = append(s.Collectors, p)
		}
	}
	if cfg.HasScope("gpu") {
		g, err := s.buildGPU(cfg, log)
		if err != nil {
			return nil, err
		}
		s.gpu = g
		s.Collectors = append(s.Collectors, g)
	}
	s.Collectors = filterScopes(s.Collectors, cfg)
	// After the scope filter: --scrape asks for its series explicitly.
	if len(cfg.Scrape) > 0 {
		pod, ns := podIdentity()
		var indexes func() map[string]int
		if s.gpu != nil {
			indexes = s.gpu.Indexes
		}
		s.scrape = scrape.New(scrape.Options{
			GPUIndexes: indexes,
			URLs:       cfg.Scrape, Include: cfg.ScrapeInclude, Exclude: cfg.ScrapeExclude,
			Passthrough: cfg.ScrapePassthrough, Timeout: cfg.ScrapeTimeout,
			Pod: pod, Namespace: ns, Log: log.With("collector", "scrape"),
		})
		s.Collectors = append(s.Collectors, s.scrape)
	}
	return s, nil
}

// buildGPU builds the GPU collector and the process finder it reads the
// child's tree with. Each error names the flag at fault: the proc root the
// finder reads (not a directory procfs can read), or a malformed --gpus.
func (s *Sources) buildGPU(cfg config.Config, log *slog.Logger) (*gpu.Collector, error) {
	if _, err := procfs.NewFS(cfg.ProcRoot); err != nil {
		return nil, fmt.Errorf("--proc-root / BRIDGE_PROC_ROOT %q: %w", cfg.ProcRoot, err)
	}
	g, err := newGPUSource(cfg, s.processTree(process.NewFinder(cfg.ProcRoot, cfg.CgroupRoot)), log)
	if err != nil {
		return nil, fmt.Errorf("--gpus / BRIDGE_GPUS: %w", err)
	}
	return g, nil
}

// ScrapeFailures are the failed --scrape reads per URL (nil without --scrape).
func (s *Sources) ScrapeFailures() map[string]int {
	if s.scrape == nil {
		return nil
	}
	return s.scrape.Failures()
}

// podIdentity is this pod's name and namespace, from the downward API
// variables POD_NAME and POD_NAMESPACE, else the hostname (a pod's name) and
// the service account's namespace file; "" when unknown (not in Kubernetes).
func podIdentity() (pod, ns string) {
	pod, ns = os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if ns == "" {
		if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	if pod == "" && ns != "" {
		pod = hostname()
	}
	return pod, ns
}

// SetChild names the process tree the process_ and GPU collectors follow:
// the child's pid (0: none) and the pid that adopts its orphans (bridge as
// subreaper; 0: none). Safe to call while sampling runs.
func (s *Sources) SetChild(pid, adopter int) {
	s.childPID.Store(int64(pid))
	s.adopter.Store(int64(adopter))
}

// processTree lists the child's tree for the GPU collector's per-process
// memory.
func (s *Sources) processTree(f *process.Finder) func() ([]int, error) {
	return func() ([]int, error) {
		pid := s.childPID.Load()
		if pid <= 0 {
			return nil, nil
		}
		return f.Tree(int(pid), int(s.adopter.Load()))
	}
}

// Memory is the between-samples memory probe: the cgroup's working set and
// limit only. Nil without a cgroup collector.
func (s *Sources) Memory() MemoryProbe {
	if s.cgroup == nil {
		return nil
	}
	return s.cgroup
}

// CgroupVersion is "v1", "v2" or "hybrid", "" without a cgroup collector
// (forensics). It reads no file: at the end of the run, a read that hangs
// must not hold up the child's exit status.
func (s *Sources) CgroupVersion() string {
	if s.cgroup == nil {
		return ""
	}
	return string(s.cgroup.Version())
}

// cgroupInfo is the cgroup collector's Info, read on a goroutine of its own
// and waited for at most timeout: a limit file whose read hangs (a v1
// memory.stat stalled in a flush) must not hold up the child's start. ok is
// false when it did not answer in time.
func (s *Sources) cgroupInfo(timeout time.Duration) (info cgroup.Info, ok bool) {
	if s.cgroup == nil {
		return info, true
	}
	ch := make(chan cgroup.Info, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("internal error reading the cgroup's limits; the job goes on", "panic", p)
			}
		}()
		ch <- s.cgroup.Info()
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case info = <-ch:
		return info, true
	case <-t.C:
		return cgroup.Info{}, false
	}
}

// XidEvents are the GPU errors seen so far, nil without GPUs (forensics).
func (s *Sources) XidEvents() []gpu.XidEvent {
	if s.gpu == nil {
		return nil
	}
	return s.gpu.XidEvents()
}

// CgroupOptions points the cgroup collector at the configured roots (it
// finds their layout itself). Under another proc root bridge's own pid is
// that root's "self".
func CgroupOptions(cfg config.Config, log *slog.Logger) cgroup.Options {
	o := cgroup.Options{ProcRoot: cfg.ProcRoot, CgroupRoot: cfg.CgroupRoot, Log: log.With("collector", "cgroup")}
	if filepath.Clean(cfg.ProcRoot) != "/proc" {
		if fs, err := procfs.NewFS(cfg.ProcRoot); err == nil {
			if self, err := fs.Self(); err == nil {
				o.PID = self.PID
			}
		}
	}
	return o
}

// Detected is what `bridge sample` reports about the machine: each
// collector's findings, and why a missing scope is missing.
func (s *Sources) Detected(ctx context.Context, smp *metrics.Sampler) map[string]any {
	d := smp.Detect(ctx)
	for k, v := range s.Notes {
		if _, ok := d[k]; !ok {
			d[k] = v
		}
	}
	return d
}

// StartTags describe the job at start, for the run and the spool.
func (s *Sources) StartTags(cfg config.Config, version string) map[string]string {
	t := map[string]string{
		"bridge.version":  version,
		"bridge.hostname": hostname(),
	}
	if cfg.NodeID != "" {
		t["bridge.node_id"] = cfg.NodeID
	}
	if cfg.NoContainer {
		t["bridge.container_awareness"] = "off"
	}
	if s.cgroup != nil {
		t["bridge.cgroup.version"] = s.CgroupVersion()
	}
	if info, ok := s.cgroupInfo(cfg.CollectTimeout); !ok {
		s.log.Warn("reading the cgroup's limit files did not answer in time (--collect-timeout); the run's limit tags are left out",
			"waited", cfg.CollectTimeout)
	} else if s.cgroup != nil {
		var paths []string
		for k, v := range info.Paths {
			paths = append(paths, k+"="+v)
		}
		sort.Strings(paths)
		t["bridge.cgroup.path"] = strings.Join(paths, " ")
		if info.MemoryLimitBytes > 0 {
			t["bridge.memory_limit_megabytes"] = strconv.FormatFloat(metrics.MB(float64(info.MemoryLimitBytes)), 'f', 1, 64)
		} else {
			t["bridge.memory_limit_megabytes"] = "no limit"
		}
		t["bridge.memory_limit_set_by"] = info.MemoryLimitSetBy
		if info.CPULimitCores > 0 {
			t["bridge.cpu_limit_cores"] = strconv.FormatFloat(info.CPULimitCores, 'f', 2, 64)
		} else {
			t["bridge.cpu_limit_cores"] = "no limit"
		}
		t["bridge.cpu_limit_set_by"] = info.CPULimitSetBy
		if info.CPUSplit != "" {
			t["bridge.cgroup.cpu_usage_limit_split"] = info.CPUSplit
		}
	}
	if s.gpu != nil {
		for k, v := range s.gpu.Tags() {
			t[k] = v
		}
	}
	return t
}

// scopeFilter drops points of scopes the user turned off (the node collector
// serves node, rootfs and netns).
type scopeFilter struct {
	metrics.Collector
	keep map[metrics.Scope]bool
}

func (f scopeFilter) Collect(ctx context.Context, b *metrics.Batch) error {
	from := len(b.Points)
	err := f.Collector.Collect(ctx, b)
	b.Keep(from, func(d *metrics.Desc) bool { return f.keep[d.Scope] })
	return err
}

func (f scopeFilter) Detect(ctx context.Context) map[string]any {
	if d, ok := f.Collector.(metrics.Detector); ok {
		return d.Detect(ctx)
	}
	return nil
}

func (f scopeFilter) Close() error {
	if c, ok := f.Collector.(metrics.Closer); ok {
		return c.Close()
	}
	return nil
}

func filterScopes(cs []metrics.Collector, cfg config.Config) []metrics.Collector {
	if len(cfg.Scopes) == len(config.AllScopes) {
		return cs
	}
	keep := map[metrics.Scope]bool{}
	for _, s := range cfg.Scopes {
		keep[metrics.Scope(s)] = true
	}
	out := make([]metrics.Collector, len(cs))
	for i, c := range cs {
		out[i] = scopeFilter{Collector: c, keep: keep}
	}
	return out
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}
