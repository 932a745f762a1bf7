// Package snapshot is `bridge sample`: one sample of every collector,
// what they detected and how each one's run went, printed as a table or
// as JSON (the golden sample-v2.json).
package snapshot

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/internal/printable"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/pipeline"
)

// Snapshot is one sample of a job's collectors, with what they found.
type Snapshot struct {
	Detected map[string]any    // each collector's findings, and the job's
	Sample   metrics.Sample    // the second of two readings (rates need two)
	Sources  map[string]string // where each value came from, by series name
	Health   []metrics.Health  // how each collector's run for Sample went
}

// Take builds the collectors of regs for cfg (argv: the command a job
// would run, which may name a multi-node job) and takes a snapshot: one
// reading, cfg.Window, then the one shown. An error is a usage error
// (a collector's option).
func Take(ctx context.Context, regs []metrics.Registration, cfg config.Config, argv []string, log *slog.Logger) (*Snapshot, error) {
	job := pipeline.DetectJob(cfg, argv, os.Getenv)
	job.Apply(&cfg)
	src, err := pipeline.BuildSourcesOf(regs, cfg, log)
	if err != nil {
		return nil, err
	}
	smp := metrics.NewSampler(src.Collectors, cfg.CollectTimeout, log)
	defer smp.Close()
	s := &Snapshot{Detected: src.Detected(ctx, smp)}
	s.Detected["job"] = job.Describe()
	// Rates (CPU cores, throttling) need two readings: take one, wait, take
	// the one that is printed, with where each value came from.
	smp.Sample(ctx)
	first := smp.Health()
	time.Sleep(cfg.Window)
	s.Sample, s.Sources = smp.SampleExplained(ctx)
	s.Health = smp.Health()
	for i := range s.Health {
		// The printed sample's own values refused, not the first's too.
		s.Health[i].Refused -= first[i].Refused
		if s.Health[i].Refused == 0 {
			s.Health[i].LastRefused = ""
		}
	}
	return s, nil
}

// JSON writes the snapshot as one indented JSON object (Output).
func (s *Snapshot) JSON(w io.Writer) error {
	out := Output{Detected: s.Detected, Metrics: make([]Point, 0, len(s.Sample.Points))}
	for _, h := range s.Health {
		jh := Health{Name: h.Collector, Success: h.OK}
		jh.Duration, _ = metrics.Finite(h.Duration.Seconds())
		if !h.OK {
			jh.Error = h.LastError
		}
		jh.Refused, jh.RefusedLast = h.Refused, h.LastRefused
		out.Collectors = append(out.Collectors, jh)
	}
	for _, p := range s.Sample.Points {
		out.Metrics = append(out.Metrics, Point{p.Name(), jsonValue(p.Value), string(p.Desc.Unit), string(p.Desc.Scope), s.Sources[p.Name()]})
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // a path or an error as written: "->", not "-\u003e"
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// Text writes the snapshot for a terminal: what was detected, the
// collectors' runs, and a table of the values.
func (s *Snapshot) Text(w io.Writer) {
	writeDetected(w, s.Detected)
	writeHealth(w, s.Health)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVALUE\tUNIT\tSCOPE\tSOURCE")
	for _, p := range s.Sample.Points {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name(), formatValue(p.Value), p.Desc.Unit, p.Desc.Scope, s.Sources[p.Name()])
	}
	tw.Flush()
}

// Output is the JSON form of `bridge sample --json` (Snapshot.JSON).
type Output struct {
	Detected   map[string]any `json:"detected"`
	Collectors []Health       `json:"collectors"`
	Metrics    []Point        `json:"metrics"`
}

// Health is how a collector's run for the printed sample went.
type Health struct {
	Name     string        `json:"name"`
	Success  bool          `json:"success"`
	Duration metrics.Float `json:"duration_seconds"`
	Error    string        `json:"error,omitempty"`
	// Refused counts the values it gave that were left out of the sample
	// (out of their series' range), RefusedLast names the last.
	Refused     int    `json:"values_refused,omitempty"`
	RefusedLast string `json:"last_value_refused,omitempty"`
}

// Point keeps non-finite values representable (encoding/json rejects NaN).
type Point struct {
	Name   string `json:"name"`
	Value  any    `json:"value"`
	Unit   string `json:"unit"`
	Scope  string `json:"scope"`
	Source string `json:"source"`
}

// writeHealth prints how each collector's run for the printed sample went.
func writeHealth(w io.Writer, health []metrics.Health) {
	fmt.Fprintln(w, "collectors:")
	for _, h := range health {
		d := h.Duration.Round(time.Microsecond)
		line := fmt.Sprintf("  %s: failed after %s: %s", h.Collector, d, printable.Line(h.LastError))
		if h.OK {
			line = fmt.Sprintf("  %s: ok in %s", h.Collector, d)
		}
		if h.Refused > 0 {
			line += fmt.Sprintf("; %s out of range left out (last: %s)", values(h.Refused), printable.Line(h.LastRefused))
		}
		fmt.Fprintln(w, line)
	}
}

// values is "1 value", "N values".
func values(n int) string {
	if n == 1 {
		return "1 value"
	}
	return fmt.Sprintf("%d values", n)
}

func jsonValue(v float64) any {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "Infinity"
	case math.IsInf(v, -1):
		return "-Infinity"
	}
	f, _ := metrics.Finite(v)
	return f
}

func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// writeDetected prints what the collectors found, the cgroup first.
func writeDetected(w io.Writer, d map[string]any) {
	fmt.Fprintln(w, "detected:")
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if (keys[i] == "cgroup") != (keys[j] == "cgroup") {
			return keys[i] == "cgroup"
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		switch v := d[k].(type) {
		case map[string]any:
			fmt.Fprintf(w, "  %s:\n", k)
			sub := make([]string, 0, len(v))
			for sk := range v {
				sub = append(sub, sk)
			}
			sort.Strings(sub)
			for _, sk := range sub {
				fmt.Fprintf(w, "    %-22s %s\n", sk+":", printable.Line(flat(v[sk])))
			}
		default:
			fmt.Fprintf(w, "  %s: %s\n", k, printable.Line(flat(v)))
		}
	}
}

func flat(v any) string {
	switch t := v.(type) {
	case map[string]string:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + t[k]
		}
		return strings.Join(parts, " ")
	case float64:
		return formatValue(t)
	case *metrics.Float:
		if t == nil {
			return ""
		}
		return formatValue(t.Float64())
	case string:
		return t
	default:
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(t); err != nil {
			return fmt.Sprint(t)
		}
		return strings.TrimSuffix(b.String(), "\n")
	}
}
