package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
)

// hungChild writes its pid to CHILD, waits for the file GO, then leaves an orphan behind (a sleep
// whose parent exits: bridge, the child subreaper, must reap it) and writes
// its pid to ORPHAN; it exits 42 on SIGTERM.
const hungChild = `echo $$ >CHILD
trap 'exit 42' TERM
while [ ! -e GO ]; do sleep 0.05; done
(sleep 0.1 & echo $! >ORPHAN.tmp; mv ORPHAN.tmp ORPHAN)
while :; do sleep 0.05; done`

// A kernel read that never returns, here the open of a FIFO that nobody
// writes put where bridge reads a cgroup file (under --cgroup-root), leaves
// bridge live at its own GOMAXPROCS: the child starts, samples go on (the
// hung collector is skipped after the collect timeout), orphans are reaped,
// a signal is forwarded, the run ends with its end record, and the child's
// exit status is bridge's. "at start": memory.max, read for the start tags
// before the child starts and every sample. "mid-run": memory.stat, made a
// FIFO once sampling runs, so that the memory probe between samples hangs
// too.
func TestHungReadLeavesBridgeLive(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		midRun     bool
	}{
		{"at start", "memory.max", false},
		{"mid-run", "memory.stat", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := podV2(t)
			file := filepath.Join(root, "sys/fs/cgroup", tc.file)
			if !tc.midRun {
				fifo(t, file)
			}
			cmd, _, errb := bridgeCmd(t, "--trackers=none", "--scopes=container,node",
				"--interval=300ms", "--fast-interval=100ms", "--collect-timeout=200ms", "--flush-timeout=10s",
				"--proc-root", filepath.Join(root, "proc"), "--cgroup-root", filepath.Join(root, "sys/fs/cgroup"),
				"--", "sh", "-c", hungChild)
			// bridge's own choice of GOMAXPROCS, whatever the test runs with.
			env := cmd.Env[:0]
			for _, kv := range cmd.Env {
				if !strings.HasPrefix(kv, "GOMAXPROCS=") {
					env = append(env, kv)
				}
			}
			cmd.Env = env
			cmd.WaitDelay = 5 * time.Second // a child that outlives bridge keeps its output pipes open
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var waitErr error
			exited := make(chan struct{})
			go func() { waitErr = cmd.Wait(); close(exited) }()
			t.Cleanup(func() { // on failure: neither bridge nor its child outlives the test
				if b, err := os.ReadFile(filepath.Join(cmd.Dir, "CHILD")); err == nil {
					if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
						syscall.Kill(-pid, syscall.SIGKILL)
					}
				}
				cmd.Process.Kill()
				<-exited
			})
			samples := func() []metrics.Sample {
				ss, _, _, err := spooltest.ReadFile(spoolPath(t, cmd))
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					t.Fatal(err)
				}
				return ss
			}
			if tc.midRun {
				waitfor.Cond(t, time.Minute, "a sample with the working set's share of the limit (the probe on)", func() bool {
					ss := samples()
					return len(ss) > 0 && has(ss[len(ss)-1], metrics.ContainerMemoryWorkingSetPercent.Name)
				})
				fifo(t, file)
			}
			n := len(samples())
			waitfor.Cond(t, time.Minute, "three more samples with node points while the read hangs", func() bool {
				ss := samples()
				return len(ss) >= n+3 && has(ss[len(ss)-1], metrics.NodeMemoryTotal.Name)
			})

			dir := cmd.Dir
			if err := os.WriteFile(filepath.Join(dir, "GO"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			var orphan int
			waitfor.Cond(t, time.Minute, "the child leaving an orphan", func() bool {
				b, err := os.ReadFile(filepath.Join(dir, "ORPHAN"))
				orphan, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				return err == nil && orphan > 0
			})
			waitfor.Cond(t, time.Minute, "bridge reaping the orphan", func() bool {
				b, err := os.ReadFile("/proc/" + strconv.Itoa(orphan) + "/stat")
				return err != nil || !strings.Contains(string(b), "(sleep)") // reaped (or its pid reused)
			})

			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			waitfor.Cond(t, time.Minute, "bridge exiting after the forwarded SIGTERM", waitfor.Closed(exited))
			if code := exitCode(t, waitErr); code != 42 {
				t.Fatalf("bridge exited %d, want the child's 42 (its SIGTERM trap); stderr:\n%s", code, errb)
			}
			_, _, attempts, rerr := spooltest.ReadFile(spoolPath(t, cmd))
			if rerr != nil {
				t.Fatal(rerr)
			}
			if len(attempts) != 1 || attempts[0].End == nil || attempts[0].End.ExitCode == nil || *attempts[0].End.ExitCode != 42 {
				t.Errorf("spool attempts %+v: want one, ended with exit code 42", attempts)
			}
		})
	}
}

// fifo replaces path with a FIFO that nobody writes: every open of it for
// reading hangs in the kernel until the test ends.
func fifo(t *testing.T, path string) {
	t.Helper()
	tmp := path + ".fifo"
	if err := syscall.Mkfifo(tmp, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func has(s metrics.Sample, name string) bool {
	_, ok := s.Value(name)
	return ok
}
