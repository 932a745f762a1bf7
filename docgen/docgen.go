// Package docgen writes the parts of bridge's docs that the code knows:
// the series tables of docs/metrics.md, from the collectors'
// registrations (their descriptors and Docs), and the README's flag table,
// from config's options and the registrations'. Each part lies between
// markers in a hand-written page; the prose around them is left as it is.
//
// Run it with go generate ./docgen; TestGenerated fails while a checked-in
// page differs from what it would write.
package docgen

// -w: gendocs links the GPU collector, whose cgo build would print the C
// compiler's deprecation warnings about the NVML calls go-nvml wraps.
//
//go:generate env "CGO_CFLAGS=-O2 -g -w" go run ./gendocs -root ..

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/config/option"
	"github.com/bridge-dev/bridge/metrics"
)

// Pages are the files docgen writes, relative to the module's root.
const (
	MetricsPage = "docs/metrics.md"
	Readme      = "README.md"
)

// OtherTables is the ID of the place in docs/metrics.md for the tables
// whose own place the page lacks (a new collector's), under a heading each.
const OtherTables = "other"

// Files are the pages under root as docgen writes them for these
// registrations and choices (pipeline.Collectors, pipeline.Choices).
func Files(root string, regs []metrics.Registration, ch config.Choices) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, f := range []struct {
		path string
		gen  func([]byte) ([]byte, error)
	}{
		{MetricsPage, func(b []byte) ([]byte, error) { return Metrics(b, regs) }},
		{Readme, func(b []byte) ([]byte, error) { return Flags(b, config.Specs(ch)) }},
	} {
		b, err := os.ReadFile(filepath.Join(root, f.path))
		if err != nil {
			return nil, err
		}
		if out[f.path], err = f.gen(b); err != nil {
			return nil, fmt.Errorf("%s: %w", f.path, err)
		}
	}
	return out, nil
}

// tableMarker opens a generated table: <!-- table ID ... -->; endTable
// closes it.
var (
	tableMarker = regexp.MustCompile(`(?m)^<!-- table ([[:alnum:]_/.-]+)[^\n]*-->\n`)
	endTable    = "<!-- end table -->\n"
	flagsMarker = regexp.MustCompile(`(?m)^<!-- flags\b[^\n]*-->\n`)
	endFlags    = "<!-- end flags -->\n"
)

// Metrics is doc (docs/metrics.md) with every table marker's content
// written from regs: the table of that ID, or under OtherTables every table
// whose ID has no marker. A series of a registration that no table lists
// gets a row in a table of its registration's name, from its help.
func Metrics(doc []byte, regs []metrics.Registration) ([]byte, error) {
	tables, err := collect(regs)
	if err != nil {
		return nil, err
	}
	placed := map[string]bool{}
	for _, m := range tableMarker.FindAllSubmatch(doc, -1) {
		id := string(m[1])
		if id != OtherTables && !slices.ContainsFunc(tables, func(t metrics.DocTable) bool { return t.ID == id }) {
			return nil, fmt.Errorf("marker of table %q, which no registration has", id)
		}
		placed[id] = true
	}
	if !placed[OtherTables] {
		return nil, fmt.Errorf("no <!-- table %s --> marker for the tables without a place of their own", OtherTables)
	}
	var b strings.Builder
	return replace(doc, tableMarker, endTable, func(id string) (string, error) {
		b.Reset()
		if id != OtherTables {
			i := slices.IndexFunc(tables, func(t metrics.DocTable) bool { return t.ID == id })
			if err := render(&b, tables[i]); err != nil {
				return "", err
			}
			return b.String(), nil
		}
		for _, t := range tables {
			if placed[t.ID] {
				continue
			}
			if b.Len() == 0 {
				b.WriteString("\n## Other collectors\n\nTheir series, from their descriptors.\n")
			}
			b.WriteString("\n### `" + t.ID + "`\n\n")
			if err := render(&b, t); err != nil {
				return "", err
			}
		}
		return b.String(), nil
	})
}

// collect are regs' tables, and one for each registration with series no
// table lists.
func collect(regs []metrics.Registration) ([]metrics.DocTable, error) {
	var tables []metrics.DocTable
	listed := map[*metrics.Desc]bool{}
	for _, r := range regs {
		for _, t := range r.Docs {
			if slices.ContainsFunc(tables, func(o metrics.DocTable) bool { return o.ID == t.ID }) || t.ID == OtherTables {
				return nil, fmt.Errorf("two tables %q", t.ID)
			}
			tables = append(tables, t)
			for _, row := range t.Rows {
				for _, d := range row.Series {
					listed[d] = true
				}
			}
		}
	}
	for _, r := range regs {
		t := metrics.DocTable{ID: r.Name, Columns: []string{"Meaning"}}
		for _, d := range r.Series {
			if !listed[d] {
				listed[d] = true
				t.Rows = append(t.Rows, metrics.DocRow{Series: []*metrics.Desc{d}, Cells: []string{d.Help}})
			}
		}
		if len(t.Rows) == 0 {
			continue
		}
		if slices.ContainsFunc(tables, func(o metrics.DocTable) bool { return o.ID == t.ID }) {
			return nil, fmt.Errorf("%s: series no table lists (%s), and a table %q of another kind", r.Name, t.Rows[0].Series[0].Name, t.ID)
		}
		tables = append(tables, t)
	}
	return tables, nil
}

// render writes table t into b.
func render(b *strings.Builder, t metrics.DocTable) error {
	row := func(cells []string) error {
		for _, c := range cells {
			if strings.ContainsAny(c, "|\n") || c == "" {
				return fmt.Errorf("table %s: cell %q: empty, or a | or a line break, which end a Markdown table cell", t.ID, c)
			}
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		return nil
	}
	head := append([]string{"Metric", "Unit"}, t.Columns...)
	if err := row(head); err != nil {
		return err
	}
	b.WriteString(strings.Repeat("|---", len(head)) + "|\n")
	for _, r := range t.Rows {
		if len(r.Cells) != len(t.Columns) {
			return fmt.Errorf("table %s: a row of %d cells under %d columns", t.ID, len(r.Cells), len(t.Columns))
		}
		name, unit, err := metricCell(r)
		if err != nil {
			return fmt.Errorf("table %s: %w", t.ID, err)
		}
		if r.UnitNote != "" {
			unit += " " + r.UnitNote
		}
		if err := row(append([]string{name, unit}, r.Cells...)); err != nil {
			return err
		}
	}
	return nil
}

// metricCell is a row's Metric cell and unit: its series' names (one name
// with {a,b} alternatives where they differ in one part), or its Family.
func metricCell(r metrics.DocRow) (name, unit string, _ error) {
	if r.Family != "" {
		if len(r.Series) > 0 || r.Unit == "" {
			return "", "", fmt.Errorf("family %s: with series, or without a unit", r.Family)
		}
		return "`" + r.Family + "`", string(r.Unit), nil
	}
	if len(r.Series) == 0 {
		return "", "", errors.New("a row without series")
	}
	names := make([]string, len(r.Series))
	for i, d := range r.Series {
		if d.Unit != r.Series[0].Unit {
			return "", "", fmt.Errorf("one row for %s in %s and %s in %s", r.Series[0].Name, r.Series[0].Unit, d.Name, d.Unit)
		}
		if d.Steady != r.Series[0].Steady {
			return "", "", fmt.Errorf("one row for %s and %s, of which only one is steady", r.Series[0].Name, d.Name)
		}
		if r.MIG && !d.PerGPU {
			return "", "", fmt.Errorf("%s: a MIG row of a series that is not per GPU", d.Name)
		}
		names[i] = docName(d, r.MIG)
	}
	unit = string(r.Series[0].Unit)
	if r.Series[0].Steady {
		unit += ", steady" // sent to MLflow when it changes (metrics.Desc.Steady)
	}
	return "`" + alternatives(names) + "`", unit, nil
}

// docName is how the docs name series d: a per-GPU template for GPU N
// (gpu_N_...), or for MIG slice M of it (gpu_N_mig_M_...); any other as
// its descriptor is named (a per-instance template with its <label>s).
func docName(d *metrics.Desc, mig bool) string {
	switch {
	case d.PerGPU && mig:
		return "gpu_N_mig_M_" + d.Name
	case d.PerGPU:
		return "gpu_N_" + d.Name
	}
	return d.Name
}

// alternatives writes names as one: prefix{a,b,c}suffix, the parts cut at
// underscores; names with nothing in common are listed.
func alternatives(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	pre, suf := names[0], names[0]
	for _, n := range names[1:] {
		for !strings.HasPrefix(n, pre) {
			pre = pre[:len(pre)-1]
		}
		for !strings.HasSuffix(n, suf) {
			suf = suf[1:]
		}
	}
	pre = pre[:strings.LastIndex(pre, "_")+1]
	if i := strings.Index(suf, "_"); i >= 0 {
		suf = suf[i:]
	} else {
		suf = ""
	}
	mids := make([]string, len(names))
	for i, n := range names {
		if len(n) < len(pre)+len(suf)+1 || pre == "" {
			return strings.Join(names, "`, `")
		}
		mids[i] = n[len(pre) : len(n)-len(suf)]
	}
	return pre + "{" + strings.Join(mids, ",") + "}" + suf
}

// Flags is readme with its flag table written from specs: bridge's own
// options and the registrations', in that order.
func Flags(readme []byte, specs []option.Spec) ([]byte, error) {
	var b strings.Builder
	b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
	for _, s := range specs {
		def := s.Shown
		if def == "" {
			def = shownDefault(s.Default)
		}
		doc := s.Doc
		if doc == "" {
			doc = s.Usage
		}
		for _, c := range []string{def, doc} {
			if strings.Contains(c, "\n") || strings.Contains(strings.ReplaceAll(c, "\\|", ""), "|") {
				return nil, fmt.Errorf("--%s: %q holds a | or a line break, which end a Markdown table cell", s.Key, c)
			}
		}
		fmt.Fprintf(&b, "| `--%s` | `%s` |%s| %s |\n", s.Key, config.EnvName(s.Key), pad(def), doc)
	}
	if len(flagsMarker.FindAll(readme, -1)) != 1 {
		return nil, errors.New("want one <!-- flags ... --> marker")
	}
	return replace(readme, flagsMarker, endFlags, func(string) (string, error) { return b.String(), nil })
}

// pad is a cell's content with a space each side, none for an empty one.
func pad(s string) string {
	if s == "" {
		return " "
	}
	return " " + s + " "
}

// shownDefault is a default as the flag table shows it: in backticks,
// nothing for an empty one.
func shownDefault(v any) string {
	var s string
	switch v := v.(type) {
	case []string:
		s = strings.Join(v, ",")
	case *regexp.Regexp:
		if v != nil {
			s = v.String()
		}
	default:
		s = fmt.Sprint(v)
	}
	if s == "" {
		return ""
	}
	return "`" + s + "`"
}

// replace writes doc with the text between each opening marker (its first
// group the argument of content) and the next end marker made by content.
func replace(doc []byte, open *regexp.Regexp, end string, content func(arg string) (string, error)) ([]byte, error) {
	var out bytes.Buffer
	for {
		loc := open.FindSubmatchIndex(doc)
		if loc == nil {
			out.Write(doc)
			return out.Bytes(), nil
		}
		arg := ""
		if len(loc) >= 4 && loc[2] >= 0 {
			arg = string(doc[loc[2]:loc[3]])
		}
		out.Write(doc[:loc[1]])
		doc = doc[loc[1]:]
		i := bytes.Index(doc, []byte(end))
		if i < 0 {
			return nil, fmt.Errorf("a marker without its %q", strings.TrimSpace(end))
		}
		c, err := content(arg)
		if err != nil {
			return nil, err
		}
		out.WriteString(c)
		doc = doc[i:]
		out.WriteString(end)
		doc = doc[len(end):]
	}
}
