package infiniband

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/closetest"
	"github.com/bridge-dev/bridge/harness/collecttest"
)

// files is a fixture: path under <sys>/class/infiniband -> content.
type files map[string]string

func write(t testing.TB, root string, f files) {
	t.Helper()
	for rel, body := range f {
		p := filepath.Join(root, "class/infiniband", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// device adds to f an HCA as Documentation/ABI/stable/sysfs-class-infiniband
// lays it out: its identity files and, per port, state, phys_state, rate,
// link_layer and the PMA counters (every counter 0 unless counters says).
func device(f files, name, rate, linkLayer string, ports int, counters map[string]string) files {
	f[name+"/node_type"] = "1: CA\n"
	f[name+"/node_guid"] = "0c42:a103:00a1:b2c4\n"
	f[name+"/fw_ver"] = "20.31.1014\n"
	f[name+"/hca_type"] = "MT4123\n"
	f[name+"/board_id"] = "MT_0000000223\n"
	for p := 1; p <= ports; p++ {
		d := name + "/ports/" + strconv.Itoa(p) + "/"
		f[d+"state"] = "4: ACTIVE\n"
		f[d+"phys_state"] = "5: LinkUp\n"
		f[d+"rate"] = rate + "\n"
		f[d+"link_layer"] = linkLayer + "\n"
		f[d+"lid"] = "0x5\n"
		for _, c := range []string{"excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
			"local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets", "port_rcv_constraint_errors",
			"port_rcv_data", "port_rcv_errors", "port_rcv_packets", "port_rcv_remote_physical_errors",
			"port_rcv_switch_relay_errors", "port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards",
			"port_xmit_packets", "port_xmit_wait", "symbol_error", "unicast_rcv_packets", "unicast_xmit_packets", "VL15_dropped"} {
			f[d+"counters/"+c] = "0\n"
		}
		f[d+"hw_counters/lifespan"] = "10\n"
		f[d+"hw_counters/out_of_buffer"] = "0\n"
		for k, v := range counters {
			f[d+k] = v
		}
	}
	return f
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func collect(t *testing.T, c *Collector) (map[string]float64, error) {
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

const port1 = "node_infiniband_mlx5_0_port_1_"

// The edge cases, one fixture each: the start, then counters moved on by
// next, read two seconds later.
func TestFixtures(t *testing.T) {
	hdr := func(c map[string]string) files {
		return device(files{}, "mlx5_0", "200 Gb/sec (4X HDR)", "InfiniBand", 1, c)
	}
	zeros := map[string]float64{port1 + "symbol_errors_count": 0, port1 + "link_downed_count": 0, port1 + "receive_errors_count": 0,
		port1 + "transmit_discards_count": 0, port1 + "transmit_wait_count": 0}
	with := func(m map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range zeros {
			out[k] = v
		}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		start   files
		next    files // under mlx5_0/ports/1/
		want    map[string]float64
		collErr string
		log     string // the log says this
	}{
		{name: "64-bit counters", start: hdr(nil),
			next: files{"counters/port_rcv_data": "250000000\n", "counters/port_xmit_data": "5000000000\n", // words
				"counters/symbol_error": "3\n", "counters/link_downed": "1\n", "counters/port_rcv_errors": "2\n",
				"counters/port_xmit_discards": "4\n", "counters/port_xmit_wait": "70000\n"},
			want: map[string]float64{port1 + "receive_megabytes_per_second": 500, port1 + "transmit_megabytes_per_second": 10000,
				port1 + "symbol_errors_count": 3, port1 + "link_downed_count": 1, port1 + "receive_errors_count": 2,
				port1 + "transmit_discards_count": 4, port1 + "transmit_wait_count": 70000}},
		{name: "extended counters preferred", start: hdr(map[string]string{"counters_ext/port_rcv_data_64": "0\n", "counters_ext/port_xmit_data_64": "0\n"}),
			next: files{"counters/port_rcv_data": "4294967295\n", "counters/port_xmit_data": "4294967295\n",
				"counters_ext/port_rcv_data_64": "25000000\n", "counters_ext/port_xmit_data_64": "50000000\n"},
			want: with(map[string]float64{port1 + "receive_megabytes_per_second": 50, port1 + "transmit_megabytes_per_second": 100})},
		{name: "32-bit counter stopped at all ones", start: hdr(map[string]string{"counters/port_xmit_data": "4294967000\n"}),
			next: files{"counters/port_xmit_data": "4294967295\n", "counters/port_rcv_data": "500000\n"},
			want: with(map[string]float64{port1 + "receive_megabytes_per_second": 1}), log: "at its maximum (4294967295)"},
		// A reset (perfquery -R) is an interval not counted: no rate, and the
		// error count since bridge started stays as it was.
		{name: "reset", start: hdr(map[string]string{"counters/port_rcv_data": "900000000\n", "counters/symbol_error": "50\n"}),
			next: files{"counters/port_rcv_data": "1000000\n", "counters/symbol_error": "2\n"},
			want: with(map[string]float64{port1 + "transmit_megabytes_per_second": 0, port1 + "symbol_errors_count": 0}),
			log:  "went back from 900000000 to 1000000"},
		// Back by 1 is a glitch, not a 16 GB/s spike.
		{name: "back by 1", start: hdr(map[string]string{"counters/port_rcv_data": "4000000000\n"}),
			next: files{"counters/port_rcv_data": "3999999999\n"},
			want: with(map[string]float64{port1 + "transmit_megabytes_per_second": 0}), log: "a reset or a glitch"},
		// 200 Gb/s moves 25 GB/s: 100 GB in 2 s is no reading.
		{name: "faster than the link", start: hdr(nil),
			next: files{"counters/port_rcv_data": "25000000000\n", "counters/port_xmit_data": "12500000000\n"},
			want: with(map[string]float64{port1 + "transmit_megabytes_per_second": 25000}), log: "above the device's limit"},
		{name: "error counter saturated", start: hdr(map[string]string{"counters/symbol_error": "65530\n"}),
			next: files{"counters/symbol_error": "65535\n"},
			want: with(map[string]float64{port1 + "receive_megabytes_per_second": 0, port1 + "transmit_megabytes_per_second": 0, port1 + "symbol_errors_count": 5}),
			log:  "at its maximum (65535)"},
		{name: "no PMA", start: hdr(map[string]string{"counters/port_xmit_wait": "N/A (no PMA)\n"}),
			next: files{"counters/port_rcv_data": "500000\n"},
			want: map[string]float64{port1 + "receive_megabytes_per_second": 1, port1 + "transmit_megabytes_per_second": 0,
				port1 + "symbol_errors_count": 0, port1 + "link_downed_count": 0, port1 + "receive_errors_count": 0, port1 + "transmit_discards_count": 0}},
		{name: "malformed", start: hdr(nil), next: files{"counters/link_downed": "lots\n", "counters/port_rcv_data": "500000\n"},
			want: map[string]float64{port1 + "receive_megabytes_per_second": 1, port1 + "transmit_megabytes_per_second": 0,
				port1 + "symbol_errors_count": 0, port1 + "receive_errors_count": 0, port1 + "transmit_discards_count": 0, port1 + "transmit_wait_count": 0},
			collErr: "mlx5_0/ports/1/counters/link_downed"},
		{name: "empty counter file", start: hdr(nil), next: files{"counters/port_xmit_wait": ""},
			want: map[string]float64{port1 + "receive_megabytes_per_second": 0, port1 + "transmit_megabytes_per_second": 0,
				port1 + "symbol_errors_count": 0, port1 + "link_downed_count": 0, port1 + "receive_errors_count": 0, port1 + "transmit_discards_count": 0},
			collErr: "counters/port_xmit_wait"},
		{name: "no counters", start: func() files {
			f := hdr(nil)
			for k := range f {
				if strings.Contains(k, "/counters/") {
					delete(f, k)
				}
			}
			return f
		}(), want: map[string]float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, tc.start)
			var logs bytes.Buffer
			clk := &clock{t: time.Unix(1000, 0)}
			c, err := New(Options{SysRoot: root, Now: clk.now, Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got, err := collect(t, c); err != nil || len(got) != 0 {
				t.Fatalf("first reading: %v, %v; want nothing yet", got, err)
			}
			next := files{}
			for k, v := range tc.next {
				next["mlx5_0/ports/1/"+k] = v
			}
			write(t, root, next)
			clk.t = clk.t.Add(2 * time.Second)
			got, err := collect(t, c)
			if tc.collErr == "" && err != nil || tc.collErr != "" && (err == nil || !strings.Contains(err.Error(), tc.collErr)) {
				t.Errorf("Collect: %v; want an error naming %q", err, tc.collErr)
			}
			// The link's rate (200 Gb/s) goes with the port's rates.
			link, hasLink := got["node_infiniband_mlx5_0_port_1_link_rate_megabytes_per_second"]
			delete(got, "node_infiniband_mlx5_0_port_1_link_rate_megabytes_per_second")
			_, rx := tc.want["node_infiniband_mlx5_0_port_1_receive_megabytes_per_second"]
			_, tx := tc.want["node_infiniband_mlx5_0_port_1_transmit_megabytes_per_second"]
			if hasLink != (rx || tx) || (hasLink && link != 25000) {
				t.Errorf("link rate %v (%v), want 25000 MB/s with the port's rates (%v)", link, hasLink, rx || tx)
			}
			if len(got) != len(tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
			for k, v := range tc.want {
				if g, ok := got[k]; !ok || math.Abs(g-v) > 1e-9*math.Max(1, v) {
					t.Errorf("%s = %v (%v), want %v", k, g, ok, v)
				}
			}
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("log lacks %q:\n%s", tc.log, logs.String())
			}
		})
	}
}

// Several devices and ports, InfiniBand and RoCE: one series per device
// and port, the ports' state, rate and link layer as start tags; a device
// procfs cannot read (no fw_ver) still has its counters read, its state
// unknown.
func TestDevicesPortsAndTags(t *testing.T) {
	f := device(files{}, "mlx5_0", "400 Gb/sec (4X NDR)", "InfiniBand", 2, nil)
	device(f, "mlx5_1", "100 Gb/sec (2X HDR)", "Ethernet", 1, nil)
	device(f, "ibp12s0", "200 Gb/sec (4X HDR)", "InfiniBand", 1, nil)
	delete(f, "ibp12s0/fw_ver")
	f["mlx5_1/ports/1/gid_attrs/types/0"] = "RoCE v2\n"
	f["mlx5_1/ports/1/gid_attrs/ndevs/0"] = "eth2\n"
	f["mlx5_0/ports/2/state"] = "1: DOWN\n"
	f["mlx5_0/ports/2/phys_state"] = "3: Disabled\n"
	root := t.TempDir()
	write(t, root, f)
	clk := &clock{t: time.Unix(1000, 0)}
	c, err := New(Options{SysRoot: root, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tags := c.Tags()
	for k, v := range map[string]string{
		"bridge.infiniband.mlx5_0.1.state": "ACTIVE", "bridge.infiniband.mlx5_0.1.rate": "400 Gb/s",
		"bridge.infiniband.mlx5_0.1.link_layer": "InfiniBand", "bridge.infiniband.mlx5_0.1.phys_state": "LinkUp",
		"bridge.infiniband.mlx5_0.2.state": "DOWN", "bridge.infiniband.mlx5_0.2.phys_state": "Disabled",
		"bridge.infiniband.mlx5_1.1.link_layer": "Ethernet", "bridge.infiniband.mlx5_1.1.rate": "100 Gb/s",
		"bridge.infiniband.ibp12s0.1.state": "unknown",
	} {
		if tags[k] != v {
			t.Errorf("tag %s = %q, want %q (all: %v)", k, tags[k], v, tags)
		}
	}
	collect(t, c)
	for _, dp := range []string{"mlx5_0/ports/1", "mlx5_0/ports/2", "mlx5_1/ports/1", "ibp12s0/ports/1"} {
		write(t, root, files{dp + "/counters/port_xmit_data": "250000\n"})
	}
	clk.t = clk.t.Add(time.Second)
	got, err := collect(t, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"node_infiniband_mlx5_0_port_1_", "node_infiniband_mlx5_0_port_2_", "node_infiniband_mlx5_1_port_1_", "node_infiniband_ibp12s0_port_1_"} {
		if got[k+"transmit_megabytes_per_second"] != 1 {
			t.Errorf("%stransmit_megabytes_per_second = %v, want 1 (250000 words in 1 s)", k, got[k+"transmit_megabytes_per_second"])
		}
	}
	// Each port's link rate beside its rates, where its rate is known
	// (not ibp12s0's): 400 Gb/s, and 100 Gb/s, in MB/s.
	for k, v := range map[string]float64{"node_infiniband_mlx5_0_port_1_": 50000, "node_infiniband_mlx5_0_port_2_": 50000, "node_infiniband_mlx5_1_port_1_": 12500} {
		if got[k+"link_rate_megabytes_per_second"] != v {
			t.Errorf("%slink_rate_megabytes_per_second = %v, want %v", k, got[k+"link_rate_megabytes_per_second"], v)
		}
	}
	if len(got) != 4*7+3 {
		t.Errorf("%d points, want 7 for each of 4 ports and 3 link rates: %v", len(got), got)
	}
	d := c.Detect(context.Background())
	if ports, _ := d["ports"].([]map[string]any); len(ports) != 4 || !strings.Contains(ports[0]["facts"].(string), "fw_ver") {
		t.Errorf("detect %v: want 4 ports, ibp12s0's facts unknown, naming fw_ver", d)
	}
}

func TestAbsent(t *testing.T) {
	root := t.TempDir()
	if _, err := New(Options{SysRoot: root}); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "class/infiniband") {
		t.Errorf("no class: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "class/infiniband"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{SysRoot: root}); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no port") {
		t.Errorf("empty class: %v", err)
	}
}

// A device removed after start (hot unplug, driver unloaded) is no data,
// not an error.
func TestDeviceGone(t *testing.T) {
	root := t.TempDir()
	write(t, root, device(files{}, "mlx5_0", "200 Gb/sec (4X HDR)", "InfiniBand", 1, nil))
	c, err := New(Options{SysRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	collect(t, c)
	if err := os.RemoveAll(filepath.Join(root, "class/infiniband/mlx5_0")); err != nil {
		t.Fatal(err)
	}
	if got, err := collect(t, c); err != nil || len(got) != 0 {
		t.Errorf("got %v, %v; want nothing and no error", got, err)
	}
}

// Close beside a Collect stuck for real reading a counter (a FIFO nobody
// writes): Close does not wait, nothing races, nothing stays open.
func TestCloseWhileReadHangs(t *testing.T) {
	root := t.TempDir()
	write(t, root, device(files{}, "mlx5_0", "200 Gb/sec (4X HDR)", "InfiniBand", 1, nil))
	c, err := New(Options{SysRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "class/infiniband/mlx5_0/ports/1/counters/port_rcv_data")
	closetest.CloseWhileReadHangs(t, c, root, closetest.Fifo(t, path, "7\n"))
}
