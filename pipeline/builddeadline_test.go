package pipeline

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
)

// toy is a collector that says when it is closed.
type toy struct {
	name   string
	closed atomic.Bool
}

func (c *toy) Name() string                                  { return c.name }
func (c *toy) Collect(context.Context, *metrics.Batch) error { return nil }
func (c *toy) Close() error                                  { c.closed.Store(true); return nil }

// sharedKey is a value two Builds share (as the cgroup layout).
type sharedKey struct{}

// A collector whose Build does not answer (a read that hangs in its
// constructor) is left out after the collect timeout with one WARN, and the
// others are built regardless: the one after it, which waits for a value
// the hung Build is making, is left out at its own deadline (one WARN)
// instead of waiting for ever, and the one after that is built. When the hung Build
// returns at last, what it built is closed. Run with -race: the Build left
// behind shares nothing unguarded with the ones after it.
func TestBuildDeadline(t *testing.T) {
	release := make(chan struct{})
	late := &toy{name: "hung"}
	made := make(chan struct{})
	regs := []metrics.Registration{
		{Name: "hung", Build: func(env metrics.Env) (metrics.Collector, error) {
			env.Shared.Once(env.Context, sharedKey{}, func() (any, error) {
				close(made)
				<-release // a read blocked in the kernel: not interrupted by the deadline
				return 1, nil
			})
			return late, nil
		}},
		{Name: "waits", Build: func(env metrics.Env) (metrics.Collector, error) {
			<-made
			if _, err := env.Shared.Once(env.Context, sharedKey{}, func() (any, error) { return 2, nil }); err != nil {
				return nil, &metrics.Off{Why: "off: " + err.Error(), Level: slog.LevelInfo}
			}
			return &toy{name: "waits"}, nil
		}},
		{Name: "fine", Build: func(metrics.Env) (metrics.Collector, error) { return &toy{name: "fine"}, nil }},
	}
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := config.Config{CollectTimeout: 100 * time.Millisecond}
	type built struct {
		src *Sources
		err error
	}
	done := make(chan built, 1)
	go func() {
		src, err := BuildSourcesOf(regs, cfg, log)
		done <- built{src, err}
	}()
	var b built
	waitfor.Cond(t, time.Minute, "the collectors built while one Build hangs", func() bool {
		select {
		case b = <-done:
			return true
		default:
			return false
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	var names []string
	for _, c := range b.src.Collectors {
		names = append(names, c.Name())
	}
	if strings.Join(names, ",") != "fine" {
		t.Errorf("collectors %v, want only fine: hung did not answer, waits waited for it", names)
	}
	for _, name := range []string{"hung", "waits"} {
		if why, _ := b.src.Notes[name].(string); !strings.Contains(why, "did not answer within the collect timeout") {
			t.Errorf("note for %s: %v", name, b.src.Notes[name])
		}
		if n := strings.Count(logs.String(), "level=WARN msg=\"collector's setup did not answer within the collect timeout"); n != 2 ||
			!strings.Contains(logs.String(), "collector="+name) {
			t.Errorf("%d WARN lines, want one naming each of hung and waits:\n%s", n, logs.String())
		}
	}
	if late.closed.Load() {
		t.Error("the hung Build's collector closed before its Build returned")
	}
	close(release)
	waitfor.Cond(t, time.Minute, "the collector the late Build returned closed", late.closed.Load)
}

// A panic in a Build leaves that collector out: the job goes on.
func TestBuildPanicLeavesCollectorOut(t *testing.T) {
	regs := []metrics.Registration{
		{Name: "boom", Build: func(metrics.Env) (metrics.Collector, error) { panic("bug") }},
		{Name: "fine", Build: func(metrics.Env) (metrics.Collector, error) { return &toy{name: "fine"}, nil }},
	}
	src, err := BuildSourcesOf(regs, config.Config{CollectTimeout: time.Minute}, quiet())
	if err != nil || len(src.Collectors) != 1 || src.Collectors[0].Name() != "fine" {
		t.Fatalf("collectors %v, %v; want fine alone", src, err)
	}
	if why, _ := src.Notes["boom"].(string); !strings.Contains(why, "internal error") {
		t.Errorf("note for boom: %v", src.Notes["boom"])
	}
}
