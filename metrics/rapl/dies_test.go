package rapl

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// multiDie is a two-socket server whose packages have two dies each (Intel
// Cascade Lake-AP, Granite Rapids): intel_rapl_common.c then registers a
// top-level zone per die, named package-P-die-D, numbered by logical die
// (intel-rapl:0 and :1 on socket 0, :2 and :3 on socket 1), each with its
// own counter and its dram subzone; the MMIO mirror of die 0 beside.
func multiDie() map[string]string {
	f := map[string]string{"intel-rapl/enabled": "1\n"}
	zoneFiles("intel-rapl:0", "package-0-die-0", 1_000_000, f)
	zoneFiles("intel-rapl:0:0", "dram", 100_000, f)
	zoneFiles("intel-rapl:1", "package-0-die-1", 2_000_000, f)
	zoneFiles("intel-rapl:1:0", "dram", 100_000, f)
	zoneFiles("intel-rapl:2", "package-1-die-0", 3_000_000, f)
	zoneFiles("intel-rapl:3", "package-1-die-1", maxRange-1_000_000, f) // 1 J short of its wrap
	zoneFiles("intel-rapl-mmio:0", "package-0-die-0", 1_000_000, f)
	return f
}

// A package of several dies: its dies are summed (RAPL used to find "no
// package zone" there and switch itself off); subzones and the mirror are
// not added.
func TestMultiDie(t *testing.T) {
	root := tree(t, multiDie())
	clk := &clock{t: time.Unix(1000, 0)}
	c := newAt(t, root, clk)
	if got, err := values(t, c); err != nil || len(got) != 0 {
		t.Fatalf("first reading: %v, %v; want nothing (a rate needs two)", got, err)
	}
	clk.t = clk.t.Add(2 * time.Second)
	set(t, root, "intel-rapl:0", 1_000_000+40_000_000) // 40 J
	set(t, root, "intel-rapl:1", 2_000_000+60_000_000) // 60 J
	set(t, root, "intel-rapl:2", 3_000_000+10_000_000) // 10 J
	set(t, root, "intel-rapl:3", 2_000_000)            // 3 J across its wrap
	set(t, root, "intel-rapl:0:0", 900_000_000)        // a subzone: not added
	set(t, root, "intel-rapl-mmio:0", 900_000_000)     // the mirror: not added
	got, err := values(t, c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"node_cpu_package_0_power_watts": 50, "node_cpu_package_0_energy_joules": 100,
		"node_cpu_package_1_power_watts": 6.5, "node_cpu_package_1_energy_joules": 13,
		"node_cpu_power_watts": 56.5, "node_cpu_energy_joules": 113,
	}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if !near(got[k], v) {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	d := c.Detect(context.Background())["packages"].([]map[string]any)
	if len(d) != 2 || len(d[0]["dies"].([]map[string]any)) != 2 || d[1]["dies"].([]map[string]any)[1]["die"] != 1 {
		t.Errorf("detect %v: want two packages of two dies", d)
	}
}

// A die that cannot be read leaves its package's figures and the node's
// out (they would count a die short), not the other package's.
func TestMultiDieOneDieFails(t *testing.T) {
	root := tree(t, multiDie())
	clk := &clock{t: time.Unix(1000, 0)}
	c := newAt(t, root, clk)
	values(t, c)
	clk.t = clk.t.Add(time.Second)
	set(t, root, "intel-rapl:0", 11_000_000)
	set(t, root, "intel-rapl:2", 13_000_000)
	if err := os.WriteFile(filepath.Join(root, "class/powercap/intel-rapl:1/energy_uj"), []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := values(t, c)
	if err == nil || !strings.Contains(err.Error(), "CPU package 0 die 1") || !strings.Contains(err.Error(), "intel-rapl:1/energy_uj") {
		t.Errorf("error %v: want it to name package 0's die 1 and its file", err)
	}
	if _, ok := got["node_cpu_package_0_energy_joules"]; ok {
		t.Errorf("package 0 sent with a die unread: %v", got)
	}
	if _, ok := got["node_cpu_energy_joules"]; ok {
		t.Errorf("the node's total sent with a die unread: %v", got)
	}
	if got["node_cpu_package_1_energy_joules"] != 10 {
		t.Errorf("package 1: %v, want 10 J", got)
	}
}

// Zone names: what counts as a package zone, one case a name.
func TestPackageNames(t *testing.T) {
	for name, want := range map[string]bool{
		"package-0": true, "package-12": true, "package-0-die-0": true, "package-1-die-3": true,
		"package": false, "package-": false, "package-0-die-": false, "package-0-core-1": false,
		"core": false, "dram": false, "psys": false, "package-x": false,
	} {
		if got := packageName.MatchString(name); got != want {
			t.Errorf("%q is a package zone: %v, want %v", name, got, want)
		}
	}
}
