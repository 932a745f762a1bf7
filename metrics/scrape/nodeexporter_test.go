package scrape

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/promtest"
)

// memTotal is MemTotal from /proc/meminfo, in bytes.
func memTotal(t *testing.T) float64 {
	t.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

// The real node-exporter (Debian prometheus-node-exporter): its series pass
// through under prom_ when asked, filtered by name, with the values it serves.
func TestRealNodeExporter(t *testing.T) {
	u := promtest.NodeExporter(t)
	c := New(Options{
		URLs:        []string{u},
		Include:     regexp.MustCompile(`^node_(memory_MemTotal_bytes|load1)$`),
		Passthrough: true,
	})
	got := points(t, c)
	if got["prom_node_memory_MemTotal_bytes"] != memTotal(t) {
		t.Errorf("prom_node_memory_MemTotal_bytes = %v, want /proc/meminfo's %v", got["prom_node_memory_MemTotal_bytes"], memTotal(t))
	}
	if _, ok := got["prom_node_load1"]; !ok {
		t.Errorf("prom_node_load1 missing: %v", got)
	}
	if len(got) != 2 {
		t.Errorf("got %v, want only the two included series", got)
	}
	if f := c.Failures(); f[u] != 0 {
		t.Errorf("failures %v", f)
	}
}
