package pipeline

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/metrics"
)

// docsTable matches the header of a table of docs/metrics.md that lists
// series: its first column names them, its second gives their unit.
var docsTable = regexp.MustCompile(`^\| Metric \| Unit \|`)

// documented reads those tables: each series name (in backticks, with
// {a,b,c} alternatives expanded) and its unit, the second cell's first
// word. A per-instance template is listed as its descriptor's name, with
// its <label> parts; families made at run time (a name holding <x>) are
// left out.
func documented(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	inTable := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case docsTable.MatchString(line):
			inTable = true
			continue
		case !strings.HasPrefix(line, "|"):
			inTable = false
		}
		cells := strings.Split(line, "|")
		if !inTable || len(cells) < 3 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		unit := strings.Fields(cells[2])
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cells[1], -1) {
			for _, name := range expand(m[1]) {
				if !strings.Contains(name, "<x>") && len(unit) > 0 {
					out[name] = unit[0]
				}
			}
		}
	}
	if len(out) < 50 {
		t.Fatalf("%d series found in docs/metrics.md: the reading is broken", len(out))
	}
	return out
}

// expand expands {a,b} alternatives: x_{a,b}_y is x_a_y and x_b_y.
func expand(s string) []string {
	open := strings.Index(s, "{")
	end := strings.Index(s, "}")
	if open < 0 || end < open {
		return []string{s}
	}
	var out []string
	for _, alt := range strings.Split(s[open+1:end], ",") {
		out = append(out, expand(s[:open]+alt+s[end+1:])...)
	}
	return out
}

// docName is how docs/metrics.md names series d: per-GPU ones for GPU N,
// per-instance ones as their template (node_infiniband_<device>_port_<port>_...).
func docName(d *metrics.Desc) string {
	if d.PerGPU {
		return "gpu_N_" + d.Name
	}
	return d.Name
}

// docs/metrics.md lists every registered series with its unit, and no
// series that is not registered: it cannot drift from the descriptors.
func TestDocsListEverySeries(t *testing.T) {
	docs := documented(t)
	registered := map[string]*metrics.Desc{}
	for _, c := range Collectors {
		for _, d := range c.Series {
			registered[docName(d)] = d
			unit, ok := docs[docName(d)]
			switch {
			case !ok:
				t.Errorf("docs/metrics.md does not list %s (%s)", docName(d), c.Name)
			case unit != string(d.Unit):
				t.Errorf("docs/metrics.md gives %s in %s, its descriptor in %s", docName(d), unit, d.Unit)
			}
		}
	}
	for name := range docs {
		// A MIG slice's series is its GPU's template bound to the slice.
		if _, ok := registered[regexp.MustCompile(`^gpu_N_mig_M_`).ReplaceAllString(name, "gpu_N_")]; !ok {
			t.Errorf("docs/metrics.md lists %s, which no collector registers", name)
		}
	}
}
