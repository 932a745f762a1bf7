package gpu

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestHolders(t *testing.T) {
	// 4243 is 7 in a nested PID namespace; 4250 is not the tree's.
	tree := [][]int{{4242}, {4243, 7}, {4244}}
	got := holders(tree, []gpuProc{{PID: 4242, Used: 1}, {PID: 7, Used: noValue}, {PID: 4250, Used: 5}})
	if !slices.Equal(got, []int{4242, 4243}) {
		t.Errorf("holders = %v, want 4242 and 4243 (by its nested PID 7), not 4250", got)
	}
	if got := holders(tree, nil); got == nil || len(got) != 0 {
		t.Errorf("holders of no GPU process = %#v, want an empty list (none holds GPU memory now)", got)
	}
}

func TestTreePIDs(t *testing.T) {
	// 4243 is 7 in a nested PID namespace; 0 is no process.
	set := treePIDs([][]int{{4242}, {4243, 7}, {4244}, {4999}, {0}})
	want := pidSet{4242: pidLocal, 4243: pidLocal, 7: pidNested, 4244: pidLocal, 4999: pidLocal}
	if !reflect.DeepEqual(set, want) {
		t.Errorf("got %v, want %v", set, want)
	}
	// A PID of the tree is local even where another process's nested PID
	// has the same number.
	if set := treePIDs([][]int{{4243, 7}, {7}}); set[7] != pidLocal {
		t.Errorf("7 = %v, want local", set[7])
	}
}

// fakeTree is a ProcessTree of fixed NSpids that counts its walks.
type fakeTree struct {
	nspids  [][]int
	mu      sync.Mutex
	holders []int // the last NoteGPUHolders
	err     error
	walks   atomic.Int32
	closed  atomic.Int32
}

func (f *fakeTree) NSpids(context.Context) ([][]int, error) {
	f.walks.Add(1)
	return f.nspids, f.err
}

// Holders is the last NoteGPUHolders' list.
func (f *fakeTree) Holders() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holders
}

func (f *fakeTree) NoteGPUHolders(_ string, pids []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holders = slices.Clone(pids)
}

func (f *fakeTree) Close() error {
	f.closed.Add(1)
	return nil
}

func TestMatchProcs(t *testing.T) {
	set := pidSet{4242: pidLocal, 4243: pidLocal, 7: pidNested}
	tests := []struct {
		name  string
		procs []gpuProc
		want  procMatch
		note  string
	}{
		{"none yet", nil, procMatch{}, "no GPU processes yet"},
		{"namespace-local PIDs",
			[]gpuProc{{4242, 1_000_000_000}, {4243, 500_000_000}},
			procMatch{Processes: 2, Matched: 2, UsedBytes: 1_500_000_000}, "matched 2 of 2"},
		{"inner-namespace PID via NSpid",
			[]gpuProc{{7, 2_000_000_000}},
			procMatch{Processes: 1, Matched: 1, Nested: 1, UsedBytes: 2_000_000_000}, "1 by an inner-namespace PID"},
		{"host PIDs that cannot be mapped",
			[]gpuProc{{98765, 2_000_000_000}, {98766, 1}},
			procMatch{Processes: 2}, "unmatched: NVML lists 2"},
		{"another job's process beside ours",
			[]gpuProc{{4242, 3_000_000}, {555, 9_000_000}},
			procMatch{Processes: 2, Matched: 1, UsedBytes: 3_000_000}, "matched 1 of 2"},
		{"no memory figure",
			[]gpuProc{{4242, noValue}, {4243, 4_000_000}},
			procMatch{Processes: 2, Matched: 2, NoValue: 1, UsedBytes: 4_000_000}, "matched 2 of 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := matchProcs(set, tt.procs)
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if !strings.Contains(got.note(), tt.note) {
				t.Errorf("note %q, want it to contain %q", got.note(), tt.note)
			}
		})
	}
}
