package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/metrics"
)

// netIf is one network interface of a sysfs fixture.
type netIf struct {
	name string
	pci  string // its NIC's PCI address; "": a virtual interface
	kind string // "bond", "bridge", "vlan", "veth" or "" (a NIC)
	// over are the interfaces it is stacked on (a bond's members, a
	// bridge's ports, a VLAN's parent).
	over []string
}

// netDir is the device directory of interface i under sys/devices.
func (i netIf) netDir() string {
	if i.pci != "" {
		return "sys/devices/pci0000:00/" + i.pci + "/net/" + i.name
	}
	return "sys/devices/virtual/net/" + i.name
}

// sysNet writes <root>/sys/class/net as the kernel lays it out: each
// interface a link to its device directory (under its NIC's PCI device, or
// devices/virtual/net), with ifindex, type, uevent (DEVTYPE for a bond, a
// bridge, a VLAN), a device link on a NIC, bonding/ on a bond, bridge/ and
// brif/ on a bridge, and for each stacking the links
// net/core/dev.c's netdev_adjacent_sysfs_add makes: lower_<x> in the
// upper, upper_<y> in the lower, and master in a bond's or a bridge's
// port. noLowers leaves the lower_/upper_ links out (a bridge then shows
// its ports in brif/ only).
func sysNet(t *testing.T, root string, noLowers bool, ifs ...netIf) {
	t.Helper()
	byName := map[string]netIf{}
	for _, i := range ifs {
		byName[i.name] = i
	}
	rel := func(from, to string) string {
		r, err := filepath.Rel(filepath.Dir(filepath.Join(root, from)), filepath.Join(root, to))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	link := func(at, to string) {
		p := filepath.Join(root, at)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(rel(at, to), p); err != nil {
			t.Fatal(err)
		}
	}
	for n, i := range ifs {
		d := i.netDir()
		devtype := map[string]string{"bond": "DEVTYPE=bond\n", "bridge": "DEVTYPE=bridge\n", "vlan": "DEVTYPE=vlan\n"}[i.kind]
		writeFile(t, root, d+"/ifindex", strconv.Itoa(n+2)+"\n")
		writeFile(t, root, d+"/type", "1\n")
		writeFile(t, root, d+"/operstate", "up\n")
		writeFile(t, root, d+"/uevent", devtype+"INTERFACE="+i.name+"\nIFINDEX="+strconv.Itoa(n+2)+"\n")
		writeFile(t, root, d+"/statistics/rx_bytes", "0\n")
		link("sys/class/net/"+i.name, d)
		if i.pci != "" {
			writeFile(t, root, "sys/devices/pci0000:00/"+i.pci+"/vendor", "0x15b3\n")
			link(d+"/device", "sys/devices/pci0000:00/"+i.pci)
		}
		switch i.kind {
		case "bond":
			writeFile(t, root, d+"/bonding/mode", "802.3ad 4\n")
			writeFile(t, root, d+"/bonding/slaves", strings.Join(i.over, " ")+"\n")
		case "bridge":
			writeFile(t, root, d+"/bridge/bridge_id", "8000.0242ac110001\n")
			if err := os.MkdirAll(filepath.Join(root, d, "brif"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, lo := range i.over {
			l := byName[lo]
			ld := l.netDir()
			if !noLowers {
				link(d+"/lower_"+lo, ld)
				link(ld+"/upper_"+i.name, d)
			}
			switch i.kind {
			case "bond":
				link(ld+"/master", d)
				writeFile(t, root, ld+"/bonding_slave/state", "active\n")
			case "bridge":
				link(ld+"/master", d)
				writeFile(t, root, ld+"/brport/state", "3\n")
				link(d+"/brif/"+lo, ld+"/brport")
			}
		}
	}
}

// The interfaces counted, one fixture a layout: the bytes of a stacked
// interface (a bond's, a bridge's, a VLAN's) are its lowers' too, and are
// not added again; what bridge counted is in `bridge sample` and the tags.
func TestNetStacking(t *testing.T) {
	eth := func(name, pci string) netIf { return netIf{name: name, pci: pci} }
	for _, tc := range []struct {
		name     string
		noLowers bool
		ifs      []netIf // nil: no sysfs class/net at all
		extra    []string
		// each interface's growth (rx; tx is a tenth) between the two readings
		moved   map[string]uint64
		wantRx  uint64
		counted []string // Detect's net_counted; nil: a note instead
		leftOut []string
	}{
		{name: "a bond and its members", ifs: []netIf{eth("eth0", "0000:41:00.0"), eth("eth1", "0000:41:00.1"),
			{name: "bond0", kind: "bond", over: []string{"eth0", "eth1"}}},
			moved: map[string]uint64{"eth0": 100_000, "eth1": 200_000, "bond0": 300_000}, wantRx: 300_000,
			counted: []string{"eth0 (physical)", "eth1 (physical)"}, leftOut: []string{"bond0: a bond over eth0, eth1"}},
		{name: "a bridge and its veths", ifs: []netIf{eth("eth0", "0000:41:00.0"), {name: "veth1a2b", kind: "veth"},
			{name: "veth3c4d", kind: "veth"}, {name: "docker0", kind: "bridge", over: []string{"veth1a2b", "veth3c4d"}}},
			moved: map[string]uint64{"veth1a2b": 50_000, "veth3c4d": 20_000, "docker0": 70_000, "eth0": 1_000}, wantRx: 71_000,
			counted: []string{"eth0 (physical)", "veth1a2b", "veth3c4d"}, leftOut: []string{"docker0: a bridge over veth1a2b, veth3c4d"}},
		{name: "a bridge without lower_ links (brif/ and master only)", noLowers: true,
			ifs:   []netIf{eth("eth0", "0000:41:00.0"), {name: "veth1a2b", kind: "veth"}, {name: "docker0", kind: "bridge", over: []string{"veth1a2b"}}},
			moved: map[string]uint64{"veth1a2b": 50_000, "docker0": 50_000, "eth0": 0}, wantRx: 50_000,
			counted: []string{"eth0 (physical)", "veth1a2b"}, leftOut: []string{"docker0: a bridge over veth1a2b"}},
		{name: "a bridge over a VLAN over a bond", ifs: []netIf{eth("eth0", "0000:41:00.0"), eth("eth1", "0000:41:00.1"),
			{name: "bond0", kind: "bond", over: []string{"eth0", "eth1"}}, {name: "bond0.10", kind: "vlan", over: []string{"bond0"}},
			{name: "br0", kind: "bridge", over: []string{"bond0.10"}}},
			moved: map[string]uint64{"eth0": 10_000, "eth1": 30_000, "bond0": 40_000, "bond0.10": 40_000, "br0": 40_000}, wantRx: 40_000,
			counted: []string{"eth0 (physical)", "eth1 (physical)"},
			leftOut: []string{"bond0.10: stacked over bond0", "bond0: a bond over eth0, eth1", "br0: a bridge over bond0.10"}},
		{name: "a pod's namespace: one veth", ifs: []netIf{{name: "eth0", kind: "veth"}},
			moved: map[string]uint64{"eth0": 5_000}, wantRx: 5_000, counted: []string{"eth0"}},
		{name: "sysfs of another namespace", ifs: []netIf{eth("eth0", "0000:41:00.0"), eth("eth1", "0000:41:00.1"),
			{name: "bond0", kind: "bond", over: []string{"eth0", "eth1"}}}, extra: []string{"net1"},
			moved: map[string]uint64{"eth0": 100, "eth1": 200, "bond0": 300, "net1": 7}, wantRx: 607},
		{name: "no sysfs", moved: map[string]uint64{"eth0": 100, "bond0": 100}, wantRx: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeFile(t, root, "stat", statFile(cpuLine{user: 100, idle: 900}, 2))
			if tc.ifs != nil {
				sysNet(t, root, tc.noLowers, tc.ifs...)
			}
			names := slices.Sorted(func(yield func(string) bool) {
				for n := range tc.moved {
					if !yield(n) {
						return
					}
				}
			})
			dev := func(step uint64) string {
				ifs := []ifCounters{{"lo", 1000 * step, 1000 * step}}
				for _, n := range names {
					ifs = append(ifs, ifCounters{n, 1_000_000 + tc.moved[n]*step, 100_000 + tc.moved[n]*step/10})
				}
				return netDevFile(ifs...)
			}
			writeFile(t, root, "net/dev", dev(0))
			c := newFixture(t, root)
			collectNetOnce(t, c)
			writeFile(t, root, "net/dev", dev(1))
			m := collectNetOnce(t, c)
			if got := m["netns_network_receive_megabytes"].Value; !near(got, metrics.MB(float64(tc.wantRx)), 1e-12) {
				t.Errorf("received %v MB, want %v", got, metrics.MB(float64(tc.wantRx)))
			}
			if got := m["netns_network_transmit_megabytes"].Value; !near(got, metrics.MB(float64(tc.wantRx/10)), 1e-12) {
				t.Errorf("transmitted %v MB, want %v", got, metrics.MB(float64(tc.wantRx/10)))
			}
			d := c.Detect(context.Background())
			tags := c.Tags()
			if tc.counted == nil {
				if note, _ := d["net_counted"].(string); !strings.Contains(note, "every interface but lo is counted") {
					t.Errorf("detect net_counted %v: want a note that every interface is counted", d["net_counted"])
				}
				if len(tags) != 0 {
					t.Errorf("tags %v without a known topology", tags)
				}
				return
			}
			if got, _ := d["net_counted"].([]string); !slices.Equal(got, tc.counted) {
				t.Errorf("detect net_counted %q, want %q", d["net_counted"], tc.counted)
			}
			if got, _ := d["net_left_out"].([]string); !slices.Equal(got, tc.leftOut) {
				t.Errorf("detect net_left_out %q, want %q", d["net_left_out"], tc.leftOut)
			}
			if tags[TagNetnsCounted] != strings.Join(tc.counted, "; ") || tags[TagNetnsLeftOut] != strings.Join(tc.leftOut, "; ") {
				t.Errorf("tags %v; want counted %q, left out %q", tags, tc.counted, tc.leftOut)
			}
		})
	}
}

func collectNetOnce(t *testing.T, c *Collector) map[string]explained {
	t.Helper()
	var b metrics.Batch
	if err := c.collectNet(context.Background(), &b, c.now()); err != nil {
		t.Fatal(err)
	}
	return byName(t, &b)
}

// The stacking is read again when the interfaces change, and an interval
// counts the interfaces counted at its end: a container started between
// two samples adds a veth to the bridge, which was counted while it had no
// port (its traffic is then only its own) and is left out from then on; a
// bridge whose last port goes is counted again, its counter followed all
// along (the bytes it moved while left out are not added then).
func TestNetStackingChanges(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "stat", statFile(cpuLine{user: 100, idle: 900}, 2))
	sysNet(t, root, false, netIf{name: "eth0", pci: "0000:41:00.0"}, netIf{name: "docker0", kind: "bridge"})
	writeFile(t, root, "net/dev", netDevFile(ifCounters{"eth0", 1000, 1000}, ifCounters{"docker0", 500, 500}))
	c := newFixture(t, root)
	collectNetOnce(t, c)

	// A container: veth9 joins docker0.
	if err := os.RemoveAll(filepath.Join(root, "sys")); err != nil {
		t.Fatal(err)
	}
	sysNet(t, root, false, netIf{name: "eth0", pci: "0000:41:00.0"}, netIf{name: "veth9", kind: "veth"},
		netIf{name: "docker0", kind: "bridge", over: []string{"veth9"}})
	writeFile(t, root, "net/dev", netDevFile(ifCounters{"eth0", 2000, 1000}, ifCounters{"docker0", 800, 500}, ifCounters{"veth9", 300, 0}))
	m := collectNetOnce(t, c)
	// eth0 +1000, veth9 new (+300); docker0 left out now.
	if got := m["netns_network_receive_megabytes"].Value; !near(got, metrics.MB(1300), 1e-12) {
		t.Errorf("after the veth joined: received %v MB, want %v", got, metrics.MB(1300))
	}
	if got, _ := c.Detect(context.Background())["net_left_out"].([]string); !slices.Equal(got, []string{"docker0: a bridge over veth9"}) {
		t.Errorf("left out %q: want docker0 over veth9", got)
	}

	// The container goes: docker0 has no port, and is counted again: the
	// interval's 100 bytes, not its 900 since it was made.
	if err := os.RemoveAll(filepath.Join(root, "sys")); err != nil {
		t.Fatal(err)
	}
	sysNet(t, root, false, netIf{name: "eth0", pci: "0000:41:00.0"}, netIf{name: "docker0", kind: "bridge"})
	writeFile(t, root, "net/dev", netDevFile(ifCounters{"eth0", 2500, 1000}, ifCounters{"docker0", 900, 500}))
	m = collectNetOnce(t, c)
	if got := m["netns_network_receive_megabytes"].Value; !near(got, metrics.MB(1900), 1e-12) {
		t.Errorf("after the veth left: received %v MB, want %v (eth0's 500 and docker0's last 100)", got, metrics.MB(1900))
	}
	writeFile(t, root, "net/dev", netDevFile(ifCounters{"eth0", 2500, 1000}, ifCounters{"docker0", 950, 500}))
	m = collectNetOnce(t, c)
	if got := m["netns_network_receive_megabytes"].Value; !near(got, metrics.MB(1950), 1e-12) {
		t.Errorf("docker0 counted again: received %v MB, want %v", got, metrics.MB(1950))
	}
}

// The tags list at most maxTagNames interfaces, saying how many more.
func TestCapList(t *testing.T) {
	var names []string
	for i := range maxTagNames + 5 {
		names = append(names, "veth"+strconv.Itoa(i))
	}
	got := capList(names)
	if !strings.HasSuffix(got, "; and 5 more") || strings.Count(got, "veth") != maxTagNames {
		t.Errorf("capList of %d names: %q", len(names), got)
	}
	if got := capList(names[:2]); got != "veth0; veth1" {
		t.Errorf("capList of 2: %q", got)
	}
}
