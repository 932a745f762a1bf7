package metrics

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/internal/kfile"
)

// detector is a collector whose Detect answers, or blocks until release
// is closed (a read that hangs), and says whether its ctx was Bounded.
type detector struct {
	name    string
	release chan struct{} // nil: answers at once
	bounded chan bool
}

func (d *detector) Name() string                          { return d.name }
func (d *detector) Collect(context.Context, *Batch) error { return nil }
func (d *detector) Detect(ctx context.Context) map[string]any {
	d.bounded <- kfile.IsBounded(ctx)
	if d.release != nil {
		<-d.release
	}
	return map[string]any{"found": d.name}
}

// Detect asks each Detector within the collect timeout: one that hangs is
// left behind and its entry says so; the others answer; each Detect's
// reads run on its own goroutine (its ctx is Bounded).
func TestDetectDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	stuck := &detector{name: "stuck", release: release, bounded: make(chan bool, 1)}
	fine := &detector{name: "fine", bounded: make(chan bool, 1)}
	s := NewSampler([]Collector{stuck, fine}, 50*time.Millisecond, slog.New(slog.DiscardHandler))
	defer s.Close()
	done := make(chan map[string]any, 1)
	go func() { done <- s.Detect(context.Background()) }()
	var got map[string]any
	waitfor.Cond(t, time.Minute, "Detect answering while one Detector hangs", func() bool {
		select {
		case got = <-done:
			return true
		default:
			return false
		}
	})
	if e, _ := got["stuck"].(map[string]any); e == nil || !strings.Contains(e["error"].(string), "no answer within the collect timeout") {
		t.Errorf("stuck: %v, want an error saying it did not answer", got["stuck"])
	}
	if f, _ := got["fine"].(map[string]any); f == nil || f["found"] != "fine" {
		t.Errorf("fine: %v", got["fine"])
	}
	if !<-stuck.bounded || !<-fine.bounded {
		t.Error("a Detect's ctx is not Bounded: its reads would each take a goroutine")
	}
}

// A value of Shared asked for while another makes it is waited for until
// the asker's ctx ends, never longer, and made once.
func TestSharedOnceBeside(t *testing.T) {
	var sh Shared
	release, making := make(chan struct{}), make(chan struct{})
	var calls sync.WaitGroup
	calls.Add(1)
	go func() {
		defer calls.Done()
		sh.Once(context.Background(), "k", func() (any, error) { close(making); <-release; return 1, nil })
	}()
	<-making
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := sh.Once(ctx, "k", func() (any, error) { return 2, nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("asking while another makes it: %v, want the ctx's end", err)
	}
	close(release)
	calls.Wait()
	if v, err := sh.Once(context.Background(), "k", func() (any, error) { return 3, nil }); v != 1 || err != nil {
		t.Errorf("after it was made: %v, %v; want the first value, made once", v, err)
	}
}
