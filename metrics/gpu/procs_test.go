package gpu

import (
	"reflect"
	"strings"
	"testing"
)

func TestTreePIDs(t *testing.T) {
	set, err := treePIDs("testdata/proc", []int{4242, 4243, 4244, 4999, 0})
	if err != nil {
		t.Fatalf("treePIDs: %v", err)
	}
	want := pidSet{4242: pidLocal, 4243: pidLocal, 7: pidNested, 4244: pidLocal, 4999: pidLocal}
	if !reflect.DeepEqual(set, want) {
		t.Errorf("got %v, want %v", set, want)
	}
}

func TestTreePIDsCorruptStatus(t *testing.T) {
	set, err := treePIDs("testdata/proc", []int{4242, 4245})
	if err == nil || !strings.Contains(err.Error(), "testdata/proc/4245/status") {
		t.Fatalf("err = %v, want one naming testdata/proc/4245/status", err)
	}
	if set[4242] != pidLocal || set[4245] != pidLocal {
		t.Errorf("set %v lost the PIDs it could read", set)
	}
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
