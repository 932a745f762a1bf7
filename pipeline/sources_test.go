package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/config/option"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/cgroup"
	"github.com/bridge-dev/bridge/metrics/gpu"
	"github.com/bridge-dev/bridge/metrics/node"
	"github.com/bridge-dev/bridge/metrics/process"
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
		{Scopes(), []metrics.Scope{metrics.ScopeNode, node.ScopeRootfs, metrics.ScopeNetns}},
	} {
		cfg := config.Config{Scopes: tt.scopes, Options: option.Values{cgroup.NoContainer.Key: true}, ProcRoot: "/proc", CgroupRoot: "/sys/fs/cgroup", Rootfs: "/", CollectTimeout: deadline}
		src, err := BuildSources(cfg, quiet())
		if err != nil {
			t.Fatal(err)
		}
		var n *node.Collector
		for _, c := range src.Collectors {
			if f, ok := c.(scopeFilter); ok {
				c = f.Collector
			}
			if nc, ok := c.(*node.Collector); ok {
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

// Off cgroup v2 the cgroup has no pressure files: its pressure series are
// not expected (never "not sampled"), the node's and the others still are.
func TestSummaryExpectsNoCgroupPressureOffV2(t *testing.T) {
	series := append([]*metrics.Desc{metrics.ContainerMemoryWorkingSet}, metrics.ContainerPressure.Descs()...)
	series = append(series, node.Pressure.Descs()...)
	got := (&Sources{series: series}).Summary().Expected
	want := append([]*metrics.Desc{metrics.ContainerMemoryWorkingSet}, node.Pressure.Descs()...)
	if !slices.Equal(got, want) {
		names := func(ds []*metrics.Desc) (out []string) {
			for _, d := range ds {
				out = append(out, d.Name)
			}
			return out
		}
		t.Errorf("expected %v, want %v", names(got), names(want))
	}
}
