package pipeline

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/amdgpu"
	"github.com/bridge-dev/bridge/metrics/cgroup"
	"github.com/bridge-dev/bridge/metrics/gpu"
	"github.com/bridge-dev/bridge/metrics/infiniband"
	"github.com/bridge-dev/bridge/metrics/node"
	"github.com/bridge-dev/bridge/metrics/process"
	"github.com/bridge-dev/bridge/metrics/rapl"
	"github.com/bridge-dev/bridge/metrics/scrape"
)

// Collector is one collector's registration: all bridge must know of it
// before it runs. Adding a collector is its package plus one entry in
// Collectors; --scopes, `bridge sample`, /metrics and the check of
// docs/metrics.md follow from the entry.
type Collector struct {
	// Name is its metrics.Collector's Name: `bridge sample` reports what it
	// detected, or why it is off, under it.
	Name string
	// Scopes are the --scopes it serves: it is built when one of them is
	// on, and only the points of scopes that are on are kept. None: a
	// flag of its own asks for it (Build decides), and nothing is dropped.
	Scopes []metrics.Scope
	// Series are every series it may add (a per-GPU one as its template).
	Series []*metrics.Desc
	// Build makes the collector. It returns an *Off when the collector is
	// off on this machine, nil and no error when it is not asked for, and
	// any other error for the user to fix (a usage error naming its flag).
	Build func(b CollectorBuild) (metrics.Collector, error)
}

// CollectorBuild is what a Collector's Build gets.
type CollectorBuild struct {
	Config  config.Config
	Scopes  []metrics.Scope // those of its Scopes that are on
	Sources *Sources        // the side channels: the child's pid, the collectors built before it
	Log     *slog.Logger
}

// Off is a Build's answer for a collector that is off on this machine: not
// the user's error. The job runs without it; `bridge sample` shows Why, and
// the log says it at Level.
type Off struct {
	Why   string
	Level slog.Level
}

func (o *Off) Error() string { return o.Why }

// Collectors is the one list of bridge's collectors, in the order the
// sampler runs them: within a sample an earlier one's value of a series
// wins, and a later one's Build may use an earlier one (--scrape keys
// dcgm-exporter's GPUs by the NVML collector's indexes).
var Collectors = []Collector{
	{Name: "cgroup", Scopes: []metrics.Scope{metrics.ScopeContainer}, Series: metrics.ContainerSeries, Build: buildCgroup},
	{Name: "node", Scopes: node.ServedScopes, Series: metrics.NodeSeries, Build: buildNode},
	{Name: rapl.Name, Scopes: []metrics.Scope{metrics.ScopeNode}, Series: metrics.RAPLSeries, Build: buildRAPL},
	{Name: infiniband.Name, Scopes: []metrics.Scope{metrics.ScopeNode}, Series: metrics.InfiniBandSeries, Build: buildInfiniBand},
	{Name: "process", Scopes: []metrics.Scope{metrics.ScopeProcess}, Series: metrics.ProcessSeries, Build: buildProcess},
	{Name: gpu.Name, Scopes: []metrics.Scope{metrics.ScopeGPU}, Series: metrics.GPUSeries, Build: buildGPU},
	{Name: amdgpu.Name, Scopes: []metrics.Scope{metrics.ScopeGPU}, Series: metrics.AMDGPUSeries, Build: buildAMDGPU},
	{Name: "scrape", Series: metrics.ScrapeSeries, Build: buildScrape},
}

// Scopes are the names --scopes takes: the registered collectors', in
// order.
func Scopes() []string {
	var out []string
	for _, c := range Collectors {
		for _, sc := range c.Scopes {
			if !slices.Contains(out, string(sc)) {
				out = append(out, string(sc))
			}
		}
	}
	return out
}

// Choices are what --scopes and --trackers take, from the registrations
// (config.Load checks them without knowing the collectors or trackers).
func Choices() config.Choices { return config.Choices{Scopes: Scopes(), Trackers: TrackerNames()} }

func buildCgroup(b CollectorBuild) (metrics.Collector, error) {
	if b.Config.NoContainer {
		return nil, &Off{Why: "container awareness turned off (--no-container / BRIDGE_NO_CONTAINER)", Level: slog.LevelDebug}
	}
	c, err := cgroup.New(CgroupOptions(b.Config, b.Log))
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, cgroup.ErrUnavailable) {
			level = slog.LevelInfo
		}
		return nil, &Off{Why: "off: " + err.Error(), Level: level}
	}
	b.Sources.cgroup = c
	return c, nil
}

// buildNode: the node collector serves three scopes and reads only the
// sources of those asked for (no statfs without rootfs, no net/dev without
// netns).
func buildNode(b CollectorBuild) (metrics.Collector, error) {
	n, err := node.New(node.Options{ProcRoot: b.Config.ProcRoot, RootfsPath: b.Config.Rootfs, Scopes: b.Scopes,
		Log: b.Log.With("collector", "node")})
	if err != nil {
		return nil, &Off{Why: "off: " + err.Error(), Level: slog.LevelWarn}
	}
	return n, nil
}

// buildRAPL: off, and costing nothing per sample, where the node has no
// RAPL package zone bridge can read.
func buildRAPL(b CollectorBuild) (metrics.Collector, error) {
	c, err := rapl.New(rapl.Options{SysRoot: b.Config.SysRoot, Log: b.Log.With("collector", rapl.Name)})
	if err != nil {
		return nil, &Off{Why: "off: " + err.Error(), Level: absentLevel(err)}
	}
	return c, nil
}

// buildInfiniBand: off, and costing nothing per sample, on a node without
// InfiniBand or RoCE ports.
func buildInfiniBand(b CollectorBuild) (metrics.Collector, error) {
	c, err := infiniband.New(infiniband.Options{SysRoot: b.Config.SysRoot, Log: b.Log.With("collector", infiniband.Name)})
	if err != nil {
		return nil, &Off{Why: "off: " + err.Error(), Level: absentLevel(err)}
	}
	return c, nil
}

// absentLevel is the log level of a sysfs collector that is off: debug
// where the hardware is simply not there (most machines), info where it is
// but bridge may not read it.
func absentLevel(err error) slog.Level {
	if errors.Is(err, fs.ErrPermission) {
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

func buildProcess(b CollectorBuild) (metrics.Collector, error) {
	s := b.Sources
	p, err := process.New(process.Options{
		ProcRoot:   b.Config.ProcRoot,
		CgroupRoot: b.Config.CgroupRoot,
		Log:        b.Log.With("collector", "process"),
		RootPID:    func() int { return int(s.childPID.Load()) },
		Adopter:    func() int { return int(s.adopter.Load()) },
	})
	if err != nil {
		return nil, &Off{Why: "off: " + err.Error(), Level: slog.LevelWarn}
	}
	return p, nil
}

// buildGPU builds the GPU collector (off by itself without NVML, and a
// stub in CGO_ENABLED=0 builds) and the process finder it reads the
// child's tree with. Each error names the flag at fault: the proc root the
// finder reads (not a directory procfs can read), or a malformed --gpus.
func buildGPU(b CollectorBuild) (metrics.Collector, error) {
	cfg := b.Config
	if _, err := procfs.NewFS(cfg.ProcRoot); err != nil {
		return nil, fmt.Errorf("--proc-root / BRIDGE_PROC_ROOT %q: %w", cfg.ProcRoot, err)
	}
	g, err := gpu.New(gpu.Options{
		Select:             cfg.GPUs,
		MatchCUDAVisible:   cfg.GPUMatchCUDA,
		CUDAVisibleDevices: os.Getenv("CUDA_VISIBLE_DEVICES"), // what the child inherits
		ProcessTree:        b.Sources.processTree(process.NewFinder(cfg.ProcRoot, cfg.CgroupRoot)),
		ProcRoot:           cfg.ProcRoot,
		CallTimeout:        min(2*time.Second, cfg.CollectTimeout/2),
		Log:                b.Log.With("collector", "gpu"),
	})
	if err != nil {
		return nil, fmt.Errorf("--gpus / BRIDGE_GPUS: %w", err)
	}
	b.Sources.gpu = g
	return g, nil
}

// buildAMDGPU builds the AMD GPU collector, numbering its GPUs after
// every GPU NVML sees (one gpu_N sequence for the node). Off, and costing
// nothing per sample, without an AMD GPU for the job.
func buildAMDGPU(b CollectorBuild) (metrics.Collector, error) {
	cfg := b.Config
	offset := 0
	if g := b.Sources.gpu; g != nil {
		offset = g.Count()
	}
	c, err := amdgpu.New(amdgpu.Options{
		SysRoot:     cfg.SysRoot,
		Offset:      offset,
		LookupEnv:   os.LookupEnv, // what the child inherits
		ProcessTree: b.Sources.processTree(process.NewFinder(cfg.ProcRoot, cfg.CgroupRoot)),
		Log:         b.Log.With("collector", amdgpu.Name),
	})
	if err != nil {
		level := slog.LevelWarn
		switch {
		case errors.Is(err, amdgpu.ErrNoGPU):
			level = slog.LevelDebug
		case errors.Is(err, amdgpu.ErrNoneForJob):
			level = slog.LevelInfo
		}
		return nil, &Off{Why: "off: " + err.Error(), Level: level}
	}
	return c, nil
}

// buildScrape: --scrape asks for its series explicitly, whatever --scopes
// says.
func buildScrape(b CollectorBuild) (metrics.Collector, error) {
	cfg := b.Config
	if len(cfg.Scrape) == 0 {
		return nil, nil
	}
	pod, ns := podIdentity()
	var indexes func() map[string]int
	if g := b.Sources.gpu; g != nil {
		indexes = g.Indexes
	}
	s := scrape.New(scrape.Options{
		GPUIndexes: indexes,
		URLs:       cfg.Scrape, Include: cfg.ScrapeInclude, Exclude: cfg.ScrapeExclude,
		Passthrough: cfg.ScrapePassthrough, Timeout: cfg.ScrapeTimeout,
		Pod: pod, Namespace: ns, Log: b.Log.With("collector", "scrape"),
	})
	b.Sources.scrape = s
	return s, nil
}
