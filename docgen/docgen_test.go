package docgen

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/config/option"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/pipeline"
)

// The checked-in pages are what docgen writes from the registrations: a
// series, unit, table row or option changed in the code and not
// regenerated fails here.
func TestGenerated(t *testing.T) {
	files, err := Files("..", pipeline.Collectors(), pipeline.Choices())
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join("..", path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what docgen writes from the registrations (run go generate ./docgen): %s", path, firstDiff(got, want))
		}
	}
	if len(files) != 2 {
		t.Errorf("wrote %d pages, want docs/metrics.md and README.md", len(files))
	}
}

// The README's flag table is written from the options' declarations, and
// TestGenerated compares it: a declaration changed and not regenerated
// makes the two disagree. Here one option more (a collector's) gives a row
// the checked-in README lacks, and every declared option has its row.
func TestFlagTableFollowsDeclarations(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", Readme))
	if err != nil {
		t.Fatal(err)
	}
	ch := pipeline.Choices()
	for _, sp := range config.Specs(ch) {
		if !bytes.Contains(readme, []byte("| `--"+sp.Key+"` | `"+config.EnvName(sp.Key)+"` |")) {
			t.Errorf("README.md has no row for --%s", sp.Key)
		}
	}
	ch.Options = append(ch.Options, &option.Of[bool]{Key: "toy-switch", Usage: "a toy collector's switch"})
	files, err := Files("..", pipeline.Collectors(), ch)
	if err != nil {
		t.Fatal(err)
	}
	row := []byte("| `--toy-switch` | `BRIDGE_TOY_SWITCH` | `false` | a toy collector's switch |\n")
	if !bytes.Contains(files[Readme], row) || !bytes.Equal(bytes.Replace(files[Readme], row, nil, 1), readme) {
		t.Errorf("an option declared and not in README.md: the written README does not differ by exactly its row %q", row)
	}
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n  have " + gl + "\n  want " + wl
		}
	}
	return ""
}

var (
	widgets = &metrics.Desc{Name: "toy_widgets_count", Unit: metrics.UnitCount, Scope: "toy", Help: "Widgets the toy counted."}
	gadgets = &metrics.Desc{Name: "toy_gadgets_count", Unit: metrics.UnitCount, Scope: "toy", Help: "Gadgets the toy counted."}
	temp    = &metrics.Desc{Name: "temp_celsius", Unit: metrics.UnitCelsius, Scope: metrics.ScopeGPU, PerGPU: true, Help: "A temperature."}
	limit   = &metrics.Desc{Name: "toy_limit_count", Unit: metrics.UnitCount, Scope: "toy", Steady: true, Help: "The toy's limit."}
)

const page = "# Metrics\n\nProse.\n\n<!-- table toy/a (generated) -->\nstale\n<!-- end table -->\n\nMore prose.\n<!-- table other -->\n<!-- end table -->\n"

// A registration's table goes between its markers, the prose around them
// stays; a series no table lists gets a table of its own under "other
// collectors", from its help. A steady series' unit says so.
func TestMetrics(t *testing.T) {
	regs := []metrics.Registration{{Name: "toy", Series: []*metrics.Desc{widgets, gadgets, temp, limit}, Docs: []metrics.DocTable{
		{ID: "toy/a", Columns: []string{"Source"}, Rows: []metrics.DocRow{
			{Series: []*metrics.Desc{widgets}, Cells: []string{"`/proc/toy`"}},
			{Series: []*metrics.Desc{limit}, Cells: []string{"`/proc/toy_limit`"}},
			{Series: []*metrics.Desc{temp}, MIG: true, UnitNote: "(hot)", Cells: []string{"NVML"}},
			{Family: "toy_<x>_ratio", Unit: metrics.UnitRatio, Cells: []string{"made at run time"}},
		}},
	}}}
	got, err := Metrics([]byte(page), regs)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Metrics\n\nProse.\n\n<!-- table toy/a (generated) -->\n" +
		"| Metric | Unit | Source |\n|---|---|---|\n" +
		"| `toy_widgets_count` | count | `/proc/toy` |\n" +
		"| `toy_limit_count` | count, steady | `/proc/toy_limit` |\n" +
		"| `gpu_N_mig_M_temp_celsius` | celsius (hot) | NVML |\n" +
		"| `toy_<x>_ratio` | ratio | made at run time |\n" +
		"<!-- end table -->\n\nMore prose.\n<!-- table other -->\n" +
		"\n## Other collectors\n\nTheir series, from their descriptors.\n\n### `toy`\n\n" +
		"| Metric | Unit | Meaning |\n|---|---|---|\n| `toy_gadgets_count` | count | Gadgets the toy counted. |\n" +
		"<!-- end table -->\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	again, err := Metrics(got, regs)
	if err != nil || !bytes.Equal(again, got) {
		t.Errorf("a second run changed the page: %v\n%s", err, again)
	}
}

func TestMetricsRefuses(t *testing.T) {
	reg := func(rows ...metrics.DocRow) []metrics.Registration {
		return []metrics.Registration{{Name: "toy", Series: []*metrics.Desc{widgets},
			Docs: []metrics.DocTable{{ID: "toy/a", Columns: []string{"Source"}, Rows: rows}}}}
	}
	ok := metrics.DocRow{Series: []*metrics.Desc{widgets}, Cells: []string{"x"}}
	for name, tc := range map[string]struct {
		page string
		regs []metrics.Registration
	}{
		"a marker no table has":   {page + "<!-- table toy/b -->\n<!-- end table -->\n", reg(ok)},
		"no place for the others": {strings.ReplaceAll(page, "<!-- table other -->\n<!-- end table -->\n", ""), reg(ok)},
		"a marker not closed":     {"<!-- table toy/a -->\n", reg(ok)},
		"a cell with a bar":       {page, reg(metrics.DocRow{Series: []*metrics.Desc{widgets}, Cells: []string{"a | b"}})},
		"a row short of cells":    {page, reg(metrics.DocRow{Series: []*metrics.Desc{widgets}})},
		"two units in a row":      {page, reg(metrics.DocRow{Series: []*metrics.Desc{widgets, temp}, Cells: []string{"x"}})},
		"steady and not in a row": {page, reg(metrics.DocRow{Series: []*metrics.Desc{widgets, limit}, Cells: []string{"x"}})},
		"a MIG row not per GPU":   {page, reg(metrics.DocRow{Series: []*metrics.Desc{widgets}, MIG: true, Cells: []string{"x"}})},
		"a row without series":    {page, reg(metrics.DocRow{Cells: []string{"x"}})},
	} {
		if _, err := Metrics([]byte(tc.page), tc.regs); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestAlternatives(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"node_load_1m"}, "node_load_1m"},
		{[]string{"node_load_1m", "node_load_5m", "node_load_15m"}, "node_load_{1m,5m,15m}"},
		{[]string{"node_pressure_cpu_some_avg10_percentage", "node_pressure_io_some_avg10_percentage"}, "node_pressure_{cpu,io}_some_avg10_percentage"},
		{[]string{"gpu_N_memory_used_megabytes", "gpu_N_memory_total_megabytes"}, "gpu_N_memory_{used,total}_megabytes"},
		{[]string{"a_count", "b_count"}, "a_count`, `b_count"},
	} {
		if got := alternatives(tc.in); got != tc.want {
			t.Errorf("alternatives(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Every option is a row: flag, variable, default as shown, meaning.
func TestFlags(t *testing.T) {
	readme := "# x\n\n<!-- flags (generated) -->\nold\n<!-- end flags -->\n\nafter\n"
	got, err := Flags([]byte(readme), []option.Spec{
		{Key: "toy-widgets", Default: 3, Usage: "widgets to count"},
		{Key: "toy-names", Default: []string{}, Usage: "names", Doc: "the names, `comma`-separated", Shown: "all"},
		{Key: "toy-path", Default: "", Usage: "a path"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "# x\n\n<!-- flags (generated) -->\n| flag | environment | default | meaning |\n|---|---|---|---|\n" +
		"| `--toy-widgets` | `BRIDGE_TOY_WIDGETS` | `3` | widgets to count |\n" +
		"| `--toy-names` | `BRIDGE_TOY_NAMES` | all | the names, `comma`-separated |\n" +
		"| `--toy-path` | `BRIDGE_TOY_PATH` | | a path |\n" +
		"<!-- end flags -->\n\nafter\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := Flags([]byte("no marker\n"), nil); err == nil {
		t.Error("a page without the marker taken")
	}
	if _, err := Flags([]byte(readme), []option.Spec{{Key: "x", Default: "", Usage: "a | b"}}); err == nil {
		t.Error("a bar in a cell taken")
	}
}
