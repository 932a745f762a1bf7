package node

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

func TestCPUUtilization(t *testing.T) {
	base := procfs.CPUStat{User: 100, Nice: 10, System: 50, Idle: 800, Iowait: 20, IRQ: 5, SoftIRQ: 5, Steal: 10}
	add := func(d procfs.CPUStat) procfs.CPUStat {
		return procfs.CPUStat{
			User: base.User + d.User, Nice: base.Nice + d.Nice, System: base.System + d.System,
			Idle: base.Idle + d.Idle, Iowait: base.Iowait + d.Iowait, IRQ: base.IRQ + d.IRQ,
			SoftIRQ: base.SoftIRQ + d.SoftIRQ, Steal: base.Steal + d.Steal,
			Guest: base.Guest + d.Guest, GuestNice: base.GuestNice + d.GuestNice,
		}
	}
	tests := []struct {
		name   string
		delta  procfs.CPUStat
		want   float64
		wantOK bool
	}{
		{"half busy", procfs.CPUStat{User: 30, System: 20, Idle: 50}, 50, true},
		{"iowait is not busy", procfs.CPUStat{User: 25, Iowait: 50, Idle: 25}, 25, true},
		{"irq softirq steal nice are busy", procfs.CPUStat{Nice: 10, IRQ: 10, SoftIRQ: 10, Steal: 10, Idle: 60}, 40, true},
		// guest time is already inside user: counting it again would exceed 100%.
		{"guest not counted twice", procfs.CPUStat{User: 100, Guest: 100}, 100, true},
		{"all idle", procfs.CPUStat{Idle: 200}, 0, true},
		{"no time passed", procfs.CPUStat{}, 0, false},
		{"counters went backwards", procfs.CPUStat{Idle: -50, Iowait: -10}, 0, false},
		// iowait may go backwards alone while others grow: clamp, never above 100.
		{"iowait backwards", procfs.CPUStat{User: 10, Iowait: -5}, 100, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := cpuUtilization(base, add(tt.delta))
			if ok != tt.wantOK || (ok && !near(got, tt.want, 1e-9)) {
				t.Errorf("cpuUtilization = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// fullFixture writes every node source under a fresh root.
func fullFixture(t *testing.T) string {
	root := t.TempDir()
	writeFile(t, root, "stat", statFile(cpuLine{user: 1000, system: 500, idle: 8000, iowait: 500}, 4))
	writeFile(t, root, "meminfo", meminfoFile(16_000_000, 12_000_000))
	writeFile(t, root, "loadavg", "2.86 1.23 0.48 6/112 11111\n")
	writeFile(t, root, "pressure/cpu", psiFile(62.68, 0, true))
	writeFile(t, root, "pressure/memory", psiFile(0.37, 0.35, true))
	writeFile(t, root, "pressure/io", psiFile(1.5, 0.25, true))
	writeFile(t, root, "net/dev", netDevFile(ifCounters{"lo", 3193, 3193}, ifCounters{"eth0", 5_000_000, 1_000_000}))
	return root
}

func TestCollectFirstAndSecond(t *testing.T) {
	root := fullFixture(t)
	c := newFixture(t, root)

	first := collect(t, c)
	for _, name := range []string{
		"node_cpu_utilization_percentage",
		"netns_network_receive_megabytes", "netns_network_transmit_megabytes",
		"netns_network_receive_megabytes_per_second", "netns_network_transmit_megabytes_per_second",
	} {
		if _, ok := first[name]; ok {
			t.Errorf("first Collect has %s; values from deltas must wait for a second reading", name)
		}
	}
	wantFirst := map[string]float64{
		"node_cpu_count":                             4,
		"node_memory_total_megabytes":                16_000_000 * 1024 / 1e6,
		"node_memory_available_megabytes":            12_000_000 * 1024 / 1e6,
		"node_memory_used_megabytes":                 4_000_000 * 1024 / 1e6,
		"node_memory_usage_megabytes":                4_000_000 * 1024 / 1e6,
		"node_memory_usage_percentage":               25,
		"node_load_1m":                               2.86,
		"node_load_5m":                               1.23,
		"node_load_15m":                              0.48,
		"node_pressure_cpu_some_avg10_percentage":    62.68,
		"node_pressure_cpu_full_avg10_percentage":    0,
		"node_pressure_memory_some_avg10_percentage": 0.37,
		"node_pressure_memory_full_avg10_percentage": 0.35,
		"node_pressure_io_some_avg10_percentage":     1.5,
		"node_pressure_io_full_avg10_percentage":     0.25,
	}
	for name, want := range wantFirst {
		p, ok := first[name]
		if !ok {
			t.Errorf("first Collect lacks %s", name)
			continue
		}
		if !near(p.Value, want, 1e-9) {
			t.Errorf("%s = %v, want %v", name, p.Value, want)
		}
	}
	if p := first["node_memory_total_megabytes"]; p.Source != filepath.Join(root, "meminfo") || p.Desc != metrics.NodeMemoryTotal {
		t.Errorf("node_memory_total_megabytes: source %q desc %+v", p.Source, p.Desc)
	}
	if p := first["node_pressure_io_full_avg10_percentage"]; p.Source != filepath.Join(root, "pressure/io") {
		t.Errorf("pressure source = %q", p.Source)
	}
	// The fixture's rootfs is the temp dir: its statfs figures exist.
	if _, ok := first["rootfs_disk_total_megabytes"]; !ok {
		t.Error("no rootfs_disk_total_megabytes")
	}

	// 10 s later: 300 busy ticks of 1000, and 2.5 MB received, 0.5 MB sent.
	writeFile(t, root, "stat", statFile(cpuLine{user: 1200, system: 600, idle: 8600, iowait: 600}, 4))
	writeFile(t, root, "net/dev", netDevFile(ifCounters{"lo", 9_999_999, 9_999_999}, ifCounters{"eth0", 7_500_000, 1_500_000}))
	second := collect(t, c)
	wantSecond := map[string]float64{
		"node_cpu_utilization_percentage":             30,
		"netns_network_receive_megabytes":             2.5,
		"netns_network_transmit_megabytes":            0.5,
		"netns_network_receive_megabytes_per_second":  0.25,
		"netns_network_transmit_megabytes_per_second": 0.05,
	}
	for name, want := range wantSecond {
		p, ok := second[name]
		if !ok {
			t.Errorf("second Collect lacks %s", name)
			continue
		}
		if !near(p.Value, want, 1e-9) {
			t.Errorf("%s = %v, want %v", name, p.Value, want)
		}
	}
	if p := second["netns_network_receive_megabytes"]; p.Desc.Scope != metrics.ScopeNetns || p.Source != filepath.Join(root, "net/dev") {
		t.Errorf("netns receive: scope %q source %q", p.Desc.Scope, p.Source)
	}
}

func TestNetTotals(t *testing.T) {
	type step struct {
		ifs            []ifCounters
		wantRx, wantTx float64 // totals in bytes after this step
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"only loopback", []step{
			{ifs: []ifCounters{{"lo", 100, 100}}},
			{ifs: []ifCounters{{"lo", 5000, 5000}}, wantRx: 0, wantTx: 0},
		}},
		{"several interfaces summed", []step{
			{ifs: []ifCounters{{"eth0", 100, 10}, {"eth1", 1000, 20}}},
			{ifs: []ifCounters{{"eth0", 300, 15}, {"eth1", 1500, 40}}, wantRx: 700, wantTx: 25},
		}},
		{"interface appears: all its traffic is new", []step{
			{ifs: []ifCounters{{"eth0", 100, 10}}},
			{ifs: []ifCounters{{"eth0", 100, 10}, {"net1", 400, 40}}, wantRx: 400, wantTx: 40},
		}},
		{"interface disappears: totals keep what was counted", []step{
			{ifs: []ifCounters{{"eth0", 100, 10}, {"net1", 400, 40}}},
			{ifs: []ifCounters{{"eth0", 150, 20}, {"net1", 500, 50}}, wantRx: 150, wantTx: 20},
			{ifs: []ifCounters{{"eth0", 160, 30}}, wantRx: 160, wantTx: 30},
		}},
		{"counter reset: that interval not counted, then on from the new reading", []step{
			{ifs: []ifCounters{{"eth0", 1000, 1000}}},
			{ifs: []ifCounters{{"eth0", 1200, 1100}}, wantRx: 200, wantTx: 100},
			{ifs: []ifCounters{{"eth0", 50, 5}}, wantRx: 200, wantTx: 100},
			{ifs: []ifCounters{{"eth0", 80, 25}}, wantRx: 230, wantTx: 120},
		}},
		{"back by 1: a glitch, no jump", []step{
			{ifs: []ifCounters{{"eth0", 1 << 40, 1000}}},
			{ifs: []ifCounters{{"eth0", 1<<40 - 1, 1000}}, wantRx: 0, wantTx: 0},
		}},
		{"faster than any interface", []step{
			{ifs: []ifCounters{{"eth0", 0, 0}}},
			{ifs: []ifCounters{{"eth0", 1 << 60, 10}}, wantRx: 0, wantTx: 10},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			c := newFixture(t, root)
			for i, s := range tt.steps {
				writeFile(t, root, "net/dev", netDevFile(s.ifs...))
				var b metrics.Batch
				if err := c.collectNet(context.Background(), &b, c.now()); err != nil {
					t.Fatal(err)
				}
				m := byName(t, &b)
				if i == 0 {
					if len(m) != 0 {
						t.Fatalf("first reading gave %v; it is the baseline", m)
					}
					continue
				}
				rx, tx := m["netns_network_receive_megabytes"], m["netns_network_transmit_megabytes"]
				if !near(rx.Value, metrics.MB(s.wantRx), 1e-12) || !near(tx.Value, metrics.MB(s.wantTx), 1e-12) {
					t.Errorf("step %d: rx %v tx %v MB, want %v %v", i, rx.Value, tx.Value, metrics.MB(s.wantRx), metrics.MB(s.wantTx))
				}
			}
		})
	}
}

func TestMissingSources(t *testing.T) {
	// Only /proc/stat exists: no PSI (kernel without it), no meminfo,
	// loadavg or net/dev. Nothing of that is an error.
	root := t.TempDir()
	writeFile(t, root, "stat", statFile(cpuLine{user: 10, idle: 90}, 2))
	c := newFixture(t, root)
	m := collect(t, c)
	for name := range m {
		if strings.HasPrefix(name, "node_pressure_") || strings.HasPrefix(name, "node_memory_") ||
			strings.HasPrefix(name, "node_load_") || strings.HasPrefix(name, "netns_") {
			t.Errorf("%s present without its source file", name)
		}
	}
	if m["node_cpu_count"].Value != 2 {
		t.Errorf("node_cpu_count = %v, want 2", m["node_cpu_count"].Value)
	}
}

func TestPressureCPUWithoutFull(t *testing.T) {
	// Kernels before 5.13 have only a "some" line in /proc/pressure/cpu.
	root := t.TempDir()
	writeFile(t, root, "pressure/cpu", psiFile(3.25, 0, false))
	c := newFixture(t, root)
	var b metrics.Batch
	if err := c.collectPressure(&b); err != nil {
		t.Fatal(err)
	}
	m := byName(t, &b)
	if len(m) != 1 || !near(m["node_pressure_cpu_some_avg10_percentage"].Value, 3.25, 1e-9) {
		t.Errorf("pressure points = %v, want only cpu some = 3.25", m)
	}
}

func TestMeminfoWithoutAvailable(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "meminfo", meminfoFile(8_000_000, -1))
	c := newFixture(t, root)
	var b metrics.Batch
	if err := c.collectMemory(&b); err != nil {
		t.Fatal(err)
	}
	m := byName(t, &b)
	if len(m) != 1 || !near(m["node_memory_total_megabytes"].Value, 8_000_000*1024/1e6, 1e-9) {
		t.Errorf("memory points = %v, want only the total (no MemAvailable, no used)", m)
	}
}

func TestBrokenSourceKeepsOthers(t *testing.T) {
	root := fullFixture(t)
	writeFile(t, root, "loadavg", "garbage\n")
	c := newFixture(t, root)
	b, err := collectBatch(c)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "loadavg")) {
		t.Errorf("error = %v; want one naming %s", err, filepath.Join(root, "loadavg"))
	}
	m := byName(t, b)
	if _, ok := m["node_memory_total_megabytes"]; !ok {
		t.Error("a broken loadavg lost the memory points")
	}
	if _, ok := m["node_load_1m"]; ok {
		t.Error("node_load_1m from a garbled file")
	}
}

func TestRootfsPoints(t *testing.T) {
	tests := []struct {
		name                  string
		u                     fsUsage
		used, avail, usagePct float64
		wantUsage             bool
	}{
		// 5% reserved for root: df's Use% is used/(used+avail), not used/total.
		{"reserved blocks", fsUsage{total: 1000e6, free: 300e6, avail: 250e6}, 700, 250, 700.0 / 950 * 100, true},
		{"empty", fsUsage{total: 1000e6, free: 1000e6, avail: 1000e6}, 0, 1000, 0, true},
		{"full for users", fsUsage{total: 1000e6, free: 50e6, avail: 0}, 950, 0, 100, true},
		{"zero-size filesystem", fsUsage{}, 0, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b metrics.Batch
			rootfsPoints(&b, tt.u, "statfs(/)")
			m := byName(t, &b)
			if !near(m["rootfs_disk_used_megabytes"].Value, tt.used, 1e-9) ||
				!near(m["rootfs_disk_available_megabytes"].Value, tt.avail, 1e-9) ||
				!near(m["rootfs_disk_total_megabytes"].Value, metrics.MB(tt.u.total), 1e-9) {
				t.Errorf("points = %v", m)
			}
			p, ok := m["rootfs_disk_usage_percentage"]
			if ok != tt.wantUsage || (ok && !near(p.Value, tt.usagePct, 1e-9)) {
				t.Errorf("usage = %v (present %v), want %v (present %v)", p.Value, ok, tt.usagePct, tt.wantUsage)
			}
		})
	}
}

func TestDetectFixture(t *testing.T) {
	root := fullFixture(t)
	os.Remove(filepath.Join(root, "pressure/io"))
	d := newFixture(t, root).Detect(context.Background())
	if d["cpu_count"] != 4 {
		t.Errorf("cpu_count = %v, want 4", d["cpu_count"])
	}
	if psi, _ := d["pressure"].([]string); strings.Join(psi, ",") != "cpu,memory" {
		t.Errorf("pressure = %v, want [cpu memory]", d["pressure"])
	}
}

// --- Real machine ---

// memTotalBytes parses MemTotal out of /proc/meminfo by hand, independently of procfs.
func memTotalBytes(t *testing.T) float64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Skipf("no /proc/meminfo: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[0] == "MemTotal:" && fields[2] == "kB" {
			kb, err := strconv.ParseFloat(fields[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal line in /proc/meminfo")
	return 0
}

func TestRealMemoryTotal(t *testing.T) {
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := collect(t, c)
	want := metrics.MB(memTotalBytes(t))
	if got := m["node_memory_total_megabytes"].Value; got != want {
		t.Errorf("node_memory_total_megabytes = %v, /proc/meminfo MemTotal = %v MB", got, want)
	}
	if got := m["node_cpu_count"].Value; int(got) != len(onlineCPUs(t)) {
		t.Errorf("node_cpu_count = %v, /sys online CPUs = %d", got, len(onlineCPUs(t)))
	}
}

// onlineCPUs reads /sys/devices/system/cpu/online ("0-1,4").
func onlineCPUs(t *testing.T) []int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Skipf("no CPU online list: %v", err)
	}
	var cpus []int
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, found := strings.Cut(r, "-")
		a, _ := strconv.Atoi(lo)
		z := a
		if found {
			z, _ = strconv.Atoi(hi)
		}
		for i := a; i <= z; i++ {
			cpus = append(cpus, i)
		}
	}
	return cpus
}

func TestRealRootfsMatchesDf(t *testing.T) {
	df, err := exec.LookPath("df")
	if err != nil {
		t.Skip("no df on this machine")
	}
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b metrics.Batch
	if err := c.collectRootfs(&b); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(df, "-B1", "--output=size,used,avail", "/").Output()
	if err != nil {
		t.Fatalf("df: %v", err)
	}
	m := byName(t, &b)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) != 3 {
		t.Fatalf("unexpected df output %q", out)
	}
	// Other processes write to the disk between the two calls: allow 64 MB.
	const tol = 64.0
	for i, name := range []string{"rootfs_disk_total_megabytes", "rootfs_disk_used_megabytes", "rootfs_disk_available_megabytes"} {
		b, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			t.Fatal(err)
		}
		if got := m[name].Value; !near(got, metrics.MB(b), tol) {
			t.Errorf("%s = %.1f, df says %.1f MB", name, got, metrics.MB(b))
		}
	}
}

func TestRealTwoCollects(t *testing.T) {
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, c)
	// Burn a little CPU so the interval has ticks in it.
	for i, x := 0, 0; i < 50_000_000; i++ {
		x += i
	}
	m := collect(t, c)
	u, ok := m["node_cpu_utilization_percentage"]
	if !ok {
		t.Fatal("no node_cpu_utilization_percentage on the second Collect")
	}
	if u.Value <= 0 || u.Value > 100 {
		t.Errorf("node_cpu_utilization_percentage = %v after a busy loop", u.Value)
	}
	if _, ok := m["netns_network_receive_megabytes"]; !ok {
		t.Error("no netns_network_receive_megabytes from the real /proc/net/dev")
	}
}
