package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/testbin"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// writeTree writes files (path relative to root -> content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, body := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// podV2 is a Kubernetes container on a cgroup v2 node, as bridge sees it as
// PID 1: a cgroup namespace (0::/), the container's cgroup mounted at
// /sys/fs/cgroup, a 512 MiB and 1.5 CPU limit, two OOM kills already counted,
// PSI present; the node has 4 CPUs and 16 GiB.
func podV2(t *testing.T) string {
	root := t.TempDir()
	cg := filepath.Join(root, "sys/fs/cgroup")
	writeTree(t, root, map[string]string{
		"proc/4242/cgroup": "0::/\n",
		"proc/4242/mountinfo": "22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n" +
			"30 22 0:26 / " + cg + " ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw\n",
		"proc/stat": "cpu  1000 0 500 8000 100 0 0 0 0 0\ncpu0 250 0 125 2000 25 0 0 0 0 0\ncpu1 250 0 125 2000 25 0 0 0 0 0\n" +
			"cpu2 250 0 125 2000 25 0 0 0 0 0\ncpu3 250 0 125 2000 25 0 0 0 0 0\nintr 0\nctxt 0\nbtime 1700000000\nprocesses 10\nprocs_running 1\nprocs_blocked 0\n",
		"proc/meminfo":         "MemTotal:       16384000 kB\nMemFree:         8000000 kB\nMemAvailable:   12288000 kB\nBuffers:          100000 kB\nCached:          3000000 kB\n",
		"proc/loadavg":         "1.50 1.25 1.00 2/300 4242\n",
		"proc/pressure/cpu":    "some avg10=5.00 avg60=4.00 avg300=3.00 total=100000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"proc/pressure/memory": "some avg10=0.50 avg60=0.25 avg300=0.10 total=5000\nfull avg10=0.25 avg60=0.10 avg300=0.05 total=2500\n",
		"proc/pressure/io":     "some avg10=1.00 avg60=0.50 avg300=0.25 total=9000\nfull avg10=0.50 avg60=0.25 avg300=0.10 total=4000\n",
		"proc/net/dev": "Inter-|   Receive                                                |  Transmit\n" +
			" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n" +
			"    lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n" +
			"  eth0: 5000000    4000    0    0    0     0          0         0  2000000    3000    0    0    0     0       0          0\n",
		"sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n",
		"sys/fs/cgroup/cgroup.events":      "populated 1\nfrozen 0\n",
		"sys/fs/cgroup/memory.current":     fmt.Sprintln(400 * mib),
		"sys/fs/cgroup/memory.max":         fmt.Sprintln(512 * mib),
		"sys/fs/cgroup/memory.peak":        fmt.Sprintln(480 * mib),
		"sys/fs/cgroup/memory.stat": fmt.Sprintf("anon %d\nfile %d\nkernel 1048576\nshmem 0\nfile_mapped 4096\n"+
			"inactive_anon 0\nactive_anon %d\ninactive_file %d\nactive_file %d\nunevictable 0\n",
			300*mib, 96*mib, 300*mib, 64*mib, 32*mib),
		"sys/fs/cgroup/memory.events":         "low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\noom_group_kill 0\n",
		"sys/fs/cgroup/memory.pressure":       "some avg10=12.50 avg60=8.00 avg300=2.00 total=123456\nfull avg10=6.25 avg60=4.00 avg300=1.00 total=65432\n",
		"sys/fs/cgroup/cpu.max":               "150000 100000\n",
		"sys/fs/cgroup/cpu.stat":              "usage_usec 9000000\nuser_usec 8000000\nsystem_usec 1000000\nnr_periods 500\nnr_throttled 50\nthrottled_usec 750000\n",
		"sys/fs/cgroup/cpu.pressure":          "some avg10=3.00 avg60=2.00 avg300=1.00 total=5000\nfull avg10=1.00 avg60=0.50 avg300=0.25 total=2000\n",
		"sys/fs/cgroup/io.pressure":           "some avg10=0.50 avg60=0.25 avg300=0.00 total=100\nfull avg10=0.25 avg60=0.10 avg300=0.00 total=50\n",
		"sys/fs/cgroup/cpuset.cpus.effective": "0-3\n",
		"sys/fs/cgroup/pids.current":          "12\n",
		"sys/fs/cgroup/pids.max":              "4096\n",
	})
	if err := os.Symlink("4242", filepath.Join(root, "proc/self")); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestGoldenSampleV2 runs the real binary on a cgroup v2 pod's files
// (--proc-root, --cgroup-root) and diffs `bridge sample --json` with the
// golden file: every container_ and node_ name, value, unit, scope and
// source, what bridge detected, and how each collector's run went (its
// duration left out). `go test ./cmd/bridge -run Golden -update`
// rewrites it after an intended change.
func TestGoldenSampleV2(t *testing.T) {
	root := podV2(t)
	cmd := exec.Command(testbin.Bridge(t), "sample", "--json", "--trackers=none", "--window=0s",
		"--proc-root", filepath.Join(root, "proc"), "--cgroup-root", filepath.Join(root, "sys/fs/cgroup"),
		"--rootfs", root, "--sys-root", filepath.Join(root, "sys"), "--scopes", "container,node,netns")
	cmd.Env = testbin.CleanEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("bridge sample: %v\n%s", err, &errb)
	}
	// How long each collector took is the machine's, not bridge's output.
	got := regexp.MustCompile(`"duration_seconds": [0-9.e-]+`).ReplaceAllString(out.String(), `"duration_seconds": "<duration>"`)
	checkGolden(t, "sample-v2.json", "bridge sample --json", strings.ReplaceAll(got, root, "<root>"))
}

// `bridge sample` says how each collector's run went, in its table and in
// --json: a cgroup whose memory.max cannot be parsed fails its run (its
// other points still count), and the error names the file.
func TestSampleShowsCollectorHealth(t *testing.T) {
	root := podV2(t)
	if err := os.WriteFile(filepath.Join(root, "sys/fs/cgroup/memory.max"), []byte("lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		cmd := exec.Command(testbin.Bridge(t), append([]string{"sample", "--trackers=none", "--window=0s",
			"--proc-root", filepath.Join(root, "proc"), "--cgroup-root", filepath.Join(root, "sys/fs/cgroup"),
			"--rootfs", root, "--sys-root", filepath.Join(root, "sys"), "--scopes", "container,node"}, args...)...)
		cmd.Env = testbin.CleanEnv()
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("bridge sample %v: %v\n%s", args, err, &errb)
		}
		return out.String()
	}
	var got struct {
		Collectors []struct {
			Name     string  `json:"name"`
			Success  bool    `json:"success"`
			Duration float64 `json:"duration_seconds"`
			Error    string  `json:"error"`
		} `json:"collectors"`
	}
	if err := json.Unmarshal([]byte(run("--json")), &got); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(root, "sys/fs/cgroup/memory.max")
	// By name: a collector added to bridge's does not change what this
	// test sees of these two.
	byName := map[string]int{}
	for i, c := range got.Collectors {
		byName[c.Name] = i
	}
	cg, okCg := byName["cgroup"]
	nd, okNd := byName["node"]
	if c := got.Collectors; !okCg || !okNd || cg > nd || c[cg].Success || !strings.Contains(c[cg].Error, want) ||
		!c[nd].Success || c[nd].Error != "" || c[nd].Duration <= 0 {
		t.Errorf("collectors %+v: want cgroup failed naming %s, node ok after it", c, want)
	}
	table := run()
	if !strings.Contains(table, "  cgroup: failed after ") || !strings.Contains(table, want) ||
		!regexp.MustCompile(`  node: ok in [0-9.]+[µm]?s\n`).MatchString(table) {
		t.Errorf("table:\n%s\nwant cgroup failed (naming %s) and node ok", table, want)
	}
}

// checkGolden compares got, what produced it, with testdata/golden/name, or
// rewrites that file under -update.
func checkGolden(t *testing.T, name, what, got string) {
	t.Helper()
	golden := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (rerun with -update if intended):\n%s", what, golden, lineDiff(string(want), got))
	}
}

// lineDiff lists the lines that differ, by a longest common subsequence
// of lines, so that a line added or removed shows as one line, not as every
// line after it: "-" the golden file's (want) line, "+" the new one, each
// with its line number in its own file, under the request ("### ") it is
// part of.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	// lcs[i][j] is the length of the longest common subsequence of w[i:]
	// and g[j:].
	lcs := make([][]int, len(w)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(g)+1)
	}
	for i := len(w) - 1; i >= 0; i-- {
		for j := len(g) - 1; j >= 0; j-- {
			if w[i] == g[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var b strings.Builder
	// Each change is shown under the last "### " (request) line before it.
	var block, shown string
	emit := func(sign byte, n int, line string) {
		if block != shown {
			fmt.Fprintf(&b, "        %s\n", block)
			shown = block
		}
		fmt.Fprintf(&b, "%c%5d  %s\n", sign, n, line)
	}
	i, j := 0, 0
	for i < len(w) || j < len(g) {
		switch {
		case i < len(w) && j < len(g) && w[i] == g[j]:
			if strings.HasPrefix(w[i], "### ") {
				block = w[i]
			}
			i, j = i+1, j+1
		case i < len(w) && (j == len(g) || lcs[i+1][j] >= lcs[i][j+1]):
			emit('-', i+1, w[i])
			i++
		default:
			emit('+', j+1, g[j])
			if strings.HasPrefix(g[j], "### ") {
				block = g[j]
			}
			j++
		}
	}
	return b.String()
}
