package process

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseNSpid(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		want         []int
		wantErr      bool
	}{
		{"own namespace", "Name:\tpython\nNSpid:\t4242\nVmRSS:\t1 kB\n", []int{4242}, false},
		{"nested namespace", "NStgid:\t4243\t7\nNSpid:\t4243\t7\nNSpgid:\t4243\t7\n", []int{4243, 7}, false},
		{"kernel before 4.1: no line", "Name:\tpython\nPid:\t4244\n", []int{4244}, false},
		{"last line without a newline", "Pid:\t9\nNSpid:\t9\t1", []int{9, 1}, false},
		{"not a number", "NSpid:\t4245\tx\n", nil, true},
		{"zero", "NSpid:\t0\n", nil, true},
		{"out of range", "NSpid:\t4294967296\n", nil, true},
		{"empty", "NSpid:\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := 4244
			got, err := parseNSpid([]byte(tc.status), pid)
			if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
				t.Errorf("parseNSpid = %v, %v; want %v (error: %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// The status files of testdata/proc, as a Tree reads them for its
// processes: a corrupt one is an error naming it, and its process keeps
// its own PID.
func TestNSpidsFixture(t *testing.T) {
	f := newNSFiles("testdata/proc")
	procs := []procStat{{PID: 4242}, {PID: 4243}, {PID: 4244}, {PID: 4245}, {PID: 4999}}
	got, err := f.read(context.Background(), procs)
	if err == nil || !strings.Contains(err.Error(), "testdata/proc/4245/status") {
		t.Errorf("err = %v, want one naming testdata/proc/4245/status", err)
	}
	// 4999 has exited: no status, its PID alone and no error of its own.
	want := [][]int{{4242}, {4243, 7}, {4244}, {4245}, {4999}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NSpids = %v, want %v", got, want)
	}
}

// A process's status is read once in its life: its PIDs do not change.
// A pid reused by another process (another start time) is read again.
func TestNSpidsReadOnceAProcess(t *testing.T) {
	root := t.TempDir()
	write := func(nspid string) {
		t.Helper()
		p := filepath.Join(root, "100", "status")
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte("Name:\tpython\nNSpid:\t"+nspid+"\n"), 0o644))
	}
	f := newNSFiles(root)
	read := func(start uint64) []int {
		t.Helper()
		got, err := f.read(context.Background(), []procStat{{PID: 100, Starttime: start}})
		if err != nil {
			t.Fatal(err)
		}
		return got[0]
	}
	write("100\t7")
	if got := read(5); !slices.Equal(got, []int{100, 7}) {
		t.Fatalf("first read = %v, want [100 7]", got)
	}
	write("100\t8") // were it read again, it would say so
	if got := read(5); !slices.Equal(got, []int{100, 7}) {
		t.Errorf("second read of the same process = %v, want [100 7] (read once)", got)
	}
	if got := read(6); !slices.Equal(got, []int{100, 8}) {
		t.Errorf("a new process under pid 100 = %v, want [100 8]", got)
	}
}

// On the real procfs, where files are kept open, a status file is not:
// it is not read again.
func TestNSpidsRealKeepsNothing(t *testing.T) {
	f := newNSFiles("/proc")
	self := os.Getpid()
	got, err := f.read(context.Background(), []procStat{{PID: self, Starttime: 1}})
	if err != nil || len(got) != 1 || len(got[0]) == 0 || got[0][0] != self {
		t.Fatalf("NSpids of this process = %v, %v; want its own PID first", got, err)
	}
	if open := openUnder(t, "/proc/", "/status"); len(open) != 0 {
		t.Errorf("status files left open: %v", open)
	}
}

// The Tree's NSpids are those of its processes, root first.
func TestTreeNSpids(t *testing.T) {
	root := t.TempDir()
	writeProcs(t, root, family...)
	writeFile(t, root, "101/status", "Name:\tpt_data_worker\nNSpid:\t101\t2\n")
	tr, err := NewTree(TreeOptions{ProcRoot: root, RootPID: func() int { return 100 }})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	got, err := tr.NSpids(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// writeProcs' status files have no NSpid line: the own PID alone.
	if want := [][]int{{100}, {101, 2}, {102}, {103}}; !reflect.DeepEqual(got, want) {
		t.Errorf("NSpids = %v, want %v", got, want)
	}
}
