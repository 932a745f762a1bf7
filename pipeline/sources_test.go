package pipeline

import (
	"context"
	"os"
	"testing"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/metrics"
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
	if _, ok := smp.Sample(context.Background()).Value(metrics.ProcessCount); ok {
		t.Error("process_count without a child")
	}
	src.SetChild(os.Getpid(), 0)
	if n, ok := smp.Sample(context.Background()).Value(metrics.ProcessCount); !ok || n < 1 {
		t.Errorf("process_count = %v, %v after SetChild(this process)", n, ok)
	}
	for _, p := range smp.Sample(context.Background()).Points {
		if p.Scope != metrics.ScopeNode && p.Scope != metrics.ScopeProcess {
			t.Errorf("point %s of scope %s: only node and process were asked for", p.Name, p.Scope)
		}
	}
}
