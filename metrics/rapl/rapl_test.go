package rapl

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/closetest"
	"github.com/bridge-dev/bridge/harness/collecttest"
)

// The range of an Intel package counter as the kernel shows it.
const maxRange = 262143328850

// tree writes files (path under <root>/class/powercap -> content) and
// returns the sysfs root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	writeBench(t, root, files)
	return root
}

func writeBench(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for rel, body := range files {
		p := filepath.Join(root, "class/powercap", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// zoneFiles is the files of one powercap zone as the kernel lays them out
// (Documentation/ABI/testing/sysfs-class-powercap): name, energy_uj,
// max_energy_range_uj, enabled and, on a package, its two constraints.
func zoneFiles(dir, name string, energy uint64, files map[string]string) map[string]string {
	if files == nil {
		files = map[string]string{}
	}
	files[dir+"/name"] = name + "\n"
	files[dir+"/energy_uj"] = itoa(energy) + "\n"
	files[dir+"/max_energy_range_uj"] = itoa(maxRange) + "\n"
	files[dir+"/enabled"] = "1\n"
	files[dir+"/constraint_0_name"] = "long_term\n"
	files[dir+"/constraint_0_power_limit_uw"] = "125000000\n"
	return files
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// twoSockets is a two-socket Intel server: package zones with core,
// uncore and dram subzones, the control-type directory (no name), a psys
// zone and the MMIO mirror of package 0, none of which may be added in.
func twoSockets() map[string]string {
	f := map[string]string{"intel-rapl/enabled": "1\n"}
	zoneFiles("intel-rapl:0", "package-0", 1_000_000, f)
	zoneFiles("intel-rapl:0:0", "core", 500_000, f)
	zoneFiles("intel-rapl:0:1", "uncore", 100_000, f)
	zoneFiles("intel-rapl:1", "package-1", 2_000_000, f)
	zoneFiles("intel-rapl:1:0", "dram", 300_000, f)
	zoneFiles("intel-rapl:2", "psys", 9_000_000, f)
	zoneFiles("intel-rapl-mmio:0", "package-0", 1_000_000, f)
	return f
}

// clock is a settable clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newAt(t *testing.T, root string, clk *clock) *Collector {
	t.Helper()
	c, err := New(Options{SysRoot: root, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func set(t *testing.T, root, dir string, energy uint64) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, "class/powercap", dir, "energy_uj"), []byte(itoa(energy)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func values(t *testing.T, c *Collector) (map[string]float64, error) {
	t.Helper()
	pts, err := collecttest.Collect(context.Background(), c)
	out := map[string]float64{}
	for _, p := range pts {
		if _, dup := out[p.Name()]; dup {
			t.Errorf("%s added twice", p.Name())
		}
		out[p.Name()] = p.Value
	}
	return out, err
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// Only the package zones count, each once; power and energy come from the
// second reading on, per package and for the node.
func TestPackagesOnly(t *testing.T) {
	root := tree(t, twoSockets())
	clk := &clock{t: time.Unix(1000, 0)}
	c := newAt(t, root, clk)
	if got, err := values(t, c); err != nil || len(got) != 0 {
		t.Fatalf("first reading: %v, %v; want nothing (a rate needs two)", got, err)
	}
	clk.t = clk.t.Add(2 * time.Second)
	set(t, root, "intel-rapl:0", 1_000_000+100_000_000) // 100 J in 2 s
	set(t, root, "intel-rapl:1", 2_000_000+60_000_000)  // 60 J
	set(t, root, "intel-rapl:0:0", 99_000_000)          // a subzone: not added
	set(t, root, "intel-rapl-mmio:0", 500_000_000)      // the mirror: not added
	set(t, root, "intel-rapl:2", 900_000_000)           // psys: not added
	got, err := values(t, c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"node_cpu_package_0_power_watts": 50, "node_cpu_package_0_energy_joules": 100,
		"node_cpu_package_1_power_watts": 30, "node_cpu_package_1_energy_joules": 60,
		"node_cpu_power_watts": 80, "node_cpu_energy_joules": 160,
	}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if !near(got[k], v) {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// The edge cases, one fixture each: what New says, and what two readings
// give.
func TestFixtures(t *testing.T) {
	onePackage := func(energy string, extra map[string]string) map[string]string {
		f := zoneFiles("intel-rapl:0", "package-0", 0, extra)
		f["intel-rapl:0/energy_uj"] = energy
		return f
	}
	for _, tc := range []struct {
		name    string
		files   map[string]string
		noClass bool
		newErr  string // New fails with errUnavailable and this in its message
		// after the first reading, energy_uj of intel-rapl:0 becomes next
		next    string
		want    map[string]float64
		collErr string // the second Collect's error names this
	}{
		{name: "absent", noClass: true, newErr: "class/powercap"},
		{name: "empty class", files: map[string]string{"intel-rapl/enabled": "0\n"}, newErr: "no package zone"},
		{name: "psys and mirror only", files: func() map[string]string {
			f := zoneFiles("intel-rapl:0", "psys", 1, nil)
			return zoneFiles("intel-rapl-mmio:0", "package-0", 1, f)
		}(), newErr: "no package zone"},
		{name: "max range unreadable", files: func() map[string]string {
			f := onePackage("5\n", nil)
			delete(f, "intel-rapl:0/max_energy_range_uj")
			return f
		}(), newErr: "max_energy_range_uj"},
		{name: "energy_uj absent", files: func() map[string]string {
			f := onePackage("5\n", nil)
			delete(f, "intel-rapl:0/energy_uj")
			return f
		}(), newErr: "no package zone"},
		{name: "steady", files: onePackage("1000000\n", nil), next: "3000000\n",
			want: map[string]float64{"node_cpu_package_0_power_watts": 1, "node_cpu_package_0_energy_joules": 2, "node_cpu_power_watts": 1, "node_cpu_energy_joules": 2}},
		{name: "wrap", files: onePackage(itoa(maxRange-1_000_000)+"\n", nil), next: "3000000\n",
			want: map[string]float64{"node_cpu_package_0_power_watts": 2, "node_cpu_package_0_energy_joules": 4, "node_cpu_power_watts": 2, "node_cpu_energy_joules": 4}},
		// A step back far from the maximum is a glitch, not a wrap: that
		// interval gives neither power nor energy (a wrap would give 262 kJ).
		{name: "back by 1 µJ mid-range", files: onePackage("5000000\n", nil), next: "4999999\n", want: map[string]float64{}},
		{name: "wrap faster than a package can draw", files: onePackage(itoa(maxRange-1_500_000_000)+"\n", nil), next: "1000000000\n", want: map[string]float64{}},
		{name: "back beyond range", files: func() map[string]string {
			f := onePackage("5000000\n", nil)
			f["intel-rapl:0/max_energy_range_uj"] = "0\n"
			return f
		}(), next: "1000000\n", want: map[string]float64{}},
		{name: "malformed", files: onePackage("1000\n", nil), next: "12ab\n", want: map[string]float64{}, collErr: "intel-rapl:0/energy_uj"},
		{name: "empty file", files: onePackage("1000\n", nil), next: "", want: map[string]float64{}, collErr: "intel-rapl:0/energy_uj"},
		{name: "no trailing newline", files: onePackage("1000000", nil), next: "5000000",
			want: map[string]float64{"node_cpu_package_0_power_watts": 2, "node_cpu_package_0_energy_joules": 4, "node_cpu_power_watts": 2, "node_cpu_energy_joules": 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if !tc.noClass {
				root = tree(t, tc.files)
			}
			clk := &clock{t: time.Unix(1000, 0)}
			c, err := New(Options{SysRoot: root, Now: clk.now})
			if tc.newErr != "" {
				if !errors.Is(err, errUnavailable) || !strings.Contains(err.Error(), tc.newErr) {
					t.Fatalf("New: %v; want errUnavailable naming %q", err, tc.newErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := values(t, c); err != nil {
				t.Fatal(err)
			}
			clk.t = clk.t.Add(2 * time.Second)
			if err := os.WriteFile(filepath.Join(root, "class/powercap/intel-rapl:0/energy_uj"), []byte(tc.next), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := values(t, c)
			if tc.collErr == "" && err != nil || tc.collErr != "" && (err == nil || !strings.Contains(err.Error(), tc.collErr)) {
				t.Fatalf("Collect: %v; want an error naming %q", err, tc.collErr)
			}
			if len(got) != len(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if !near(got[k], v) {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}

// One package that cannot be read leaves the node's totals out (they would
// count a package short), not the other package's series; the next good
// reading counts the energy of both intervals.
func TestOnePackageFails(t *testing.T) {
	root := tree(t, twoSockets())
	clk := &clock{t: time.Unix(1000, 0)}
	c := newAt(t, root, clk)
	values(t, c)
	clk.t = clk.t.Add(time.Second)
	set(t, root, "intel-rapl:0", 11_000_000)
	if err := os.WriteFile(filepath.Join(root, "class/powercap/intel-rapl:1/energy_uj"), []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := values(t, c)
	if err == nil || !strings.Contains(err.Error(), "intel-rapl:1/energy_uj") || !strings.Contains(err.Error(), "CPU package 1") {
		t.Errorf("error %v: want it to name package 1's file", err)
	}
	if _, ok := got["node_cpu_energy_joules"]; ok || got["node_cpu_package_0_energy_joules"] != 10 {
		t.Errorf("got %v: want package 0's 10 J and no node total", got)
	}
	clk.t = clk.t.Add(time.Second)
	set(t, root, "intel-rapl:1", 2_000_000+8_000_000) // 8 J over the two seconds since its last reading
	got, err = values(t, c)
	if err != nil || got["node_cpu_package_1_power_watts"] != 4 || got["node_cpu_package_1_energy_joules"] != 8 || got["node_cpu_energy_joules"] != 18 {
		t.Errorf("got %v, %v: want package 1 at 4 W, 8 J, node 18 J", got, err)
	}
}

// A zone that goes away after start (its driver unloaded) is no data, not
// an error.
func TestZoneGone(t *testing.T) {
	root := tree(t, twoSockets())
	clk := &clock{t: time.Unix(1000, 0)}
	c := newAt(t, root, clk)
	values(t, c)
	if err := os.RemoveAll(filepath.Join(root, "class/powercap/intel-rapl:1")); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(time.Second)
	got, err := values(t, c)
	if err != nil || len(got) != 2 {
		t.Errorf("got %v, %v; want package 0's two series and no error", got, err)
	}
}

// energy_uj readable by root only (Linux >= 5.10): a process without the
// right, here the test binary run again as nobody, gets no collector and a
// reason that says so.
func TestRootOnly(t *testing.T) {
	if os.Getenv("RAPL_TEST_ROOT") != "" {
		_, err := New(Options{SysRoot: os.Getenv("RAPL_TEST_ROOT")})
		os.Stdout.WriteString("NEW: " + func() string {
			if err == nil {
				return "ok"
			}
			return err.Error()
		}())
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the check as another user: run the tests as root")
	}
	root := tree(t, twoSockets())
	for _, dir := range []string{"intel-rapl:0", "intel-rapl:1"} {
		if err := os.Chmod(filepath.Join(root, "class/powercap", dir, "energy_uj"), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	// nobody must reach the tree and a copy of the test binary.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "rapl.test")
	if err := os.WriteFile(bin, body, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, start := range []string{root, filepath.Dir(bin)} {
		for d := start; d != "/" && d != "."; d = filepath.Dir(d) {
			if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o005 != 0o005 {
				if err := os.Chmod(d, st.Mode().Perm()|0o005); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	cmd := exec.Command(bin, "-test.run=^TestRootOnly$")
	cmd.Env = append(os.Environ(), "RAPL_TEST_ROOT="+root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("running as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "NEW: "+errUnavailable.Error()) || !strings.Contains(string(out), "root only") ||
		!strings.Contains(string(out), "permission denied") {
		t.Errorf("as nobody: %s\nwant errUnavailable saying energy_uj is root only", out)
	}
	t.Logf("as nobody: %s", out)
}

// Close beside a Collect stuck for real reading energy_uj (a FIFO nobody
// writes): Close does not wait, nothing races, nothing stays open.
func TestCloseWhileReadHangs(t *testing.T) {
	f := zoneFiles("intel-rapl:0", "package-0", 5, nil)
	root := tree(t, f)
	c, err := New(Options{SysRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "class/powercap/intel-rapl:0/energy_uj")
	closetest.CloseWhileReadHangs(t, c, root, closetest.Fifo(t, path, "7\n"))
}
