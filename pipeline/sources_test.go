package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/config/option"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/cgroup"
	"github.com/bridge-dev/bridge/metrics/gpu"
	"github.com/bridge-dev/bridge/metrics/node"
	"github.com/bridge-dev/bridge/metrics/process"
	"github.com/bridge-dev/bridge/summary"
)

// Without the container scope there is no memory probe and no cgroup in
// the start tags; SetChild is what points the process collector at a tree.
func TestSourcesWithoutContainer(t *testing.T) {
	cfg := config.Config{Scopes: []string{"node", "process"}, ProcRoot: "/proc", CgroupRoot: "/sys/fs/cgroup", Rootfs: "/", CollectTimeout: deadline}
	src, err := BuildSources(cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if src.Memory() != nil || src.CgroupVersion() != "" || src.XidEvents() != nil {
		t.Errorf("memory probe %v, cgroup version %q, xids %v: want none without the container scope", src.Memory(), src.CgroupVersion(), src.XidEvents())
	}
	tags := src.StartTags(cfg, "v9")
	if tags["bridge.version"] != "v9" || tags["bridge.cgroup.version"] != "" {
		t.Errorf("start tags %v: want the version and no cgroup", tags)
	}

	smp := metrics.NewSampler(src.Collectors, cfg.CollectTimeout, quiet())
	defer smp.Close()
	if _, ok := smp.Sample(context.Background()).Value(process.Count.Name); ok {
		t.Error("process_count without a child")
	}
	src.SetChild(os.Getpid(), 0)
	if n, ok := smp.Sample(context.Background()).Value(process.Count.Name); !ok || n < 1 {
		t.Errorf("process_count = %v, %v after SetChild(this process)", n, ok)
	}
	for _, p := range smp.Sample(context.Background()).Points {
		if sc := p.Desc.Scope; sc != metrics.ScopeNode && sc != metrics.ScopeProcess {
			t.Errorf("point %s of scope %s: only node and process were asked for", p.Name(), sc)
		}
	}
}

// The node collector is told which of its scopes are on, so that it reads
// nothing for the others (no statfs without rootfs, no net/dev without netns).
func TestSourcesNodeScopes(t *testing.T) {
	for _, tt := range []struct {
		scopes []string
		want   []metrics.Scope
	}{
		{[]string{"container", "node"}, []metrics.Scope{metrics.ScopeNode}},
		{[]string{"rootfs", "process"}, []metrics.Scope{node.ScopeRootfs}},
		{ScopesOf(Collectors()), []metrics.Scope{metrics.ScopeNode, node.ScopeRootfs, metrics.ScopeNetns}},
	} {
		cfg := config.Config{Scopes: tt.scopes, Options: option.Values{cgroup.NoContainer.Key: true}, ProcRoot: "/proc", CgroupRoot: "/sys/fs/cgroup", Rootfs: "/", CollectTimeout: deadline}
		src, err := BuildSources(cfg, quiet())
		if err != nil {
			t.Fatal(err)
		}
		var n *node.Collector
		for _, c := range src.Collectors {
			if nc, ok := metrics.As[*node.Collector](c); ok {
				n = nc
			}
		}
		if n == nil {
			t.Fatalf("scopes %v: no node collector", tt.scopes)
		}
		if got := n.Scopes(); !slices.Equal(got, tt.want) {
			t.Errorf("scopes %v: the node collector reads %v, want %v", tt.scopes, got, tt.want)
		}
		for _, c := range src.Collectors {
			if cl, ok := c.(metrics.Closer); ok {
				cl.Close()
			}
		}
	}
}

// A BuildSources error names the flag at fault: a --proc-root that is no
// directory is not reported as a --gpus error, nor a malformed --gpus as a
// --proc-root one.
func TestSourcesErrorNamesItsFlag(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "proc")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		cfg       config.Config
		want, not string
	}{
		{"proc root", config.Config{ProcRoot: notDir}, "--proc-root", "--gpus"},
		{"gpus", config.Config{ProcRoot: "/proc", Options: option.Values{gpu.GPUs.Key: []string{"cuda:0"}}}, "--gpus", "--proc-root"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Scopes, tt.cfg.CgroupRoot, tt.cfg.Rootfs, tt.cfg.CollectTimeout = []string{"gpu"}, "/sys/fs/cgroup", "/", deadline
			_, err := BuildSources(tt.cfg, quiet())
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), tt.not) {
				t.Errorf("BuildSources error %v: want one naming %s, not %s", err, tt.want, tt.not)
			}
		})
	}
}

// offering is a collector that offers the rest of bridge all it can
// (metrics/offer.go), as the cgroup, GPU and scrape collectors do.
type offering struct {
	name      string
	unsent    []*metrics.Desc
	why       string
	release   chan struct{} // closed: StartTags and StartPeak answer; nil: at once
	held      *heldFile     // what StartPeak holds
	used      atomic.Bool   // UsePeak took it
	xids      []metrics.XidEvent
	failures  map[string]int
	startTags map[string]string
}

func (c *offering) Name() string                                  { return c.name }
func (c *offering) Collect(context.Context, *metrics.Batch) error { return nil }
func (c *offering) Tags() map[string]string {
	return map[string]string{"bridge." + c.name + ".found": "yes"}
}
func (c *offering) Unproduced() ([]*metrics.Desc, string) { return c.unsent, c.why }
func (c *offering) XidEvents() []metrics.XidEvent         { return c.xids }
func (c *offering) Failures() map[string]int              { return c.failures }
func (c *offering) PeakFile() string                      { return "memory.peak" }
func (c *offering) MemoryPoints(context.Context) ([]metrics.Point, error) {
	return nil, nil
}

func (c *offering) StartTags(context.Context) map[string]string {
	if c.release != nil {
		<-c.release
	}
	return c.startTags
}

func (c *offering) StartPeak(context.Context) metrics.PeakStart {
	if c.release != nil {
		<-c.release
	}
	return metrics.PeakStart{File: "memory.peak", Bytes: 5e6, Known: true, Reset: true, Held: c.held}
}

func (c *offering) UsePeak(ps metrics.PeakStart) { c.used.Store(ps.Held == c.held) }

// heldFile is what a PeakStart holds; it says when it is closed.
type heldFile struct{ closed atomic.Bool }

func (f *heldFile) Close() error { f.closed.Store(true); return nil }

// sourcesOf builds the collectors c, one registration each, of the
// container scope, with --scopes as given.
func sourcesOf(t *testing.T, scopes []string, cs ...metrics.Collector) *Sources {
	t.Helper()
	var regs []metrics.Registration
	for _, c := range cs {
		regs = append(regs, metrics.Registration{Name: c.Name(), Scopes: []metrics.Scope{metrics.ScopeContainer, metrics.ScopeNode},
			Series: []*metrics.Desc{metrics.ContainerMemoryWorkingSet, metrics.ContainerMemoryPeak, metrics.NodeMemoryTotal},
			Build:  func(metrics.Env) (metrics.Collector, error) { return c, nil }})
	}
	regs = append(regs, metrics.Registration{Name: "off", Build: func(metrics.Env) (metrics.Collector, error) {
		return nil, &metrics.Off{Why: "turned off", Tags: map[string]string{"bridge.off": "off"}}
	}})
	src, err := BuildSourcesOf(regs, config.Config{Scopes: scopes, CollectTimeout: deadline}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// What the rest of bridge asks of the collectors comes through what they
// offer, whatever their type, and through the scope filter that wraps
// them: the start tags (what they found when built, what they read at the
// start, and an off collector's), the memory high-water mark before the
// job (handed back to its collector, and to the end-of-run table with its
// file), the series a collector never adds here (not expected; why, a row
// named after its scopes), the memory probe, GPU errors and scrape
// failures.
func TestSourcesAskWhatCollectorsOffer(t *testing.T) {
	c := &offering{name: "offering", unsent: []*metrics.Desc{metrics.ContainerMemoryPeak}, why: "its cgroup is the host's",
		held: &heldFile{}, xids: []metrics.XidEvent{{GPU: 1, Xid: 79}}, failures: map[string]int{"http://x/metrics": 2},
		startTags: map[string]string{"bridge.memory_limit_megabytes": "512.0"}}
	src := sourcesOf(t, []string{"container"}, c)
	if _, ok := src.Collectors[0].(scopeFilter); !ok {
		t.Fatalf("collector %T: want it wrapped in the scope filter (--scopes container of container and node)", src.Collectors[0])
	}
	tags := src.StartTags(config.Config{CollectTimeout: deadline}, "v9")
	for k, v := range map[string]string{"bridge.version": "v9", "bridge.offering.found": "yes", "bridge.memory_limit_megabytes": "512.0", "bridge.off": "off"} {
		if tags[k] != v {
			t.Errorf("start tag %s = %q, want %q (all: %v)", k, tags[k], v, tags)
		}
	}
	if !c.used.Load() || c.held.closed.Load() {
		t.Errorf("the mark before the job: used %v, closed %v; want it handed to its collector, open", c.used.Load(), c.held.closed.Load())
	}
	o := src.Summary()
	if o.PeakFile != "memory.peak" || o.PeakStart == nil || o.PeakStart.MB != 5 || !o.PeakStart.Reset {
		t.Errorf("summary's peak: file %q, start %+v", o.PeakFile, o.PeakStart)
	}
	if len(o.Expected) != 1 || o.Expected[0] != metrics.ContainerMemoryWorkingSet {
		t.Errorf("expected %v: want the working set alone (the peak is never added here, node_ is off)", o.Expected)
	}
	if len(o.Notes) != 1 || o.Notes[0] != (summary.Row{What: "container scope", Value: "its cgroup is the host's"}) {
		t.Errorf("notes %q", o.Notes)
	}
	if src.Memory() != MemoryProbe(c) {
		t.Errorf("memory probe %v", src.Memory())
	}
	if x := src.XidEvents(); len(x) != 1 || x[0].Xid != 79 {
		t.Errorf("xids %v", x)
	}
	if f := src.ScrapeFailures(); f["http://x/metrics"] != 2 {
		t.Errorf("scrape failures %v", f)
	}
}

// A start read that does not answer (a limit file whose read hangs) holds
// up the child's start no longer than the collect timeout: its tags are
// left out, the mark before the job is not known, and what the read holds
// when it answers at last is closed, never used.
func TestStartTagsReadThatHangs(t *testing.T) {
	c := &offering{name: "hung", release: make(chan struct{}), held: &heldFile{},
		startTags: map[string]string{"bridge.memory_limit_megabytes": "512.0"}}
	src := sourcesOf(t, []string{"container", "node"}, c)
	tags := src.StartTags(config.Config{CollectTimeout: 10 * time.Millisecond}, "v9")
	if _, ok := tags["bridge.memory_limit_megabytes"]; ok || tags["bridge.hung.found"] != "yes" {
		t.Errorf("start tags %v: want what the collector found when built, not what its hung read returns", tags)
	}
	if o := src.Summary(); o.PeakStart != nil {
		t.Errorf("the mark before the job %+v, from a read that did not answer", o.PeakStart)
	}
	close(c.release)
	waitfor.Cond(t, deadline, "the late mark's descriptor closed", c.held.closed.Load)
	if c.used.Load() {
		t.Error("a mark read after the timeout was handed to its collector")
	}
}

// A collector's findings are in `bridge sample`'s detected through the
// scope filter, and a collector that finds nothing to say has no entry
// (never null).
func TestDetectedThroughTheScopeFilter(t *testing.T) {
	plain := &offering{name: "plain"}
	src := sourcesOf(t, []string{"container"}, plain, &detecting{offering{name: "detecting"}})
	smp := metrics.NewSampler(src.Collectors, deadline, quiet())
	defer smp.Close()
	d := src.Detected(context.Background(), smp)
	if v, ok := d["detecting"].(map[string]any); !ok || v["found"] != "it" {
		t.Errorf("detected %v: want the wrapped detector's findings", d)
	}
	if v, ok := d["plain"]; ok {
		t.Errorf("detected plain = %v: a collector that detects nothing has no entry", v)
	}
	if d["off"] != "turned off" {
		t.Errorf("detected off = %v", d["off"])
	}
}

type detecting struct{ offering }

func (c *detecting) Detect(context.Context) map[string]any { return map[string]any{"found": "it"} }

// --no-container: the cgroup collector is off, `bridge sample` says why,
// and the run's tags say container awareness is off, with no cgroup.
func TestNoContainerTagsTheRun(t *testing.T) {
	cfg := config.Config{Scopes: []string{"container", "node"}, Options: option.Values{cgroup.NoContainer.Key: true},
		ProcRoot: "/proc", CgroupRoot: "/sys/fs/cgroup", Rootfs: "/", CollectTimeout: deadline}
	src, err := BuildSources(cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer metrics.NewSampler(src.Collectors, deadline, quiet()).Close()
	tags := src.StartTags(cfg, "v9")
	if tags["bridge.container_awareness"] != "off" || tags[metrics.TagCgroupVersion] != "" || src.CgroupVersion() != "" {
		t.Errorf("start tags %v: want container awareness off, no cgroup", tags)
	}
	if why, _ := src.Notes[cgroup.Name].(string); !strings.Contains(why, "--no-container") {
		t.Errorf("note for cgroup %q", why)
	}
}
