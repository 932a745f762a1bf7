package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/internal/printable"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/pipeline"
)

// sampleOutput is the JSON form of `bridge sample --json`.
type sampleOutput struct {
	Detected   map[string]any `json:"detected"`
	Collectors []jsonHealth   `json:"collectors"`
	Metrics    []jsonPoint    `json:"metrics"`
}

// jsonHealth is how a collector's run for the printed sample went.
type jsonHealth struct {
	Name     string        `json:"name"`
	Success  bool          `json:"success"`
	Duration metrics.Float `json:"duration_seconds"`
	Error    string        `json:"error,omitempty"`
	// Refused counts the values it gave that were left out of the sample
	// (out of their series' range), RefusedLast names the last.
	Refused     int    `json:"values_refused,omitempty"`
	RefusedLast string `json:"last_value_refused,omitempty"`
}

// jsonPoint keeps non-finite values representable (encoding/json rejects NaN).
type jsonPoint struct {
	Name   string `json:"name"`
	Value  any    `json:"value"`
	Unit   string `json:"unit"`
	Scope  string `json:"scope"`
	Source string `json:"source"`
}

func runSample(args []string, stdout, stderr io.Writer) int {
	return sample(pipeline.Collectors(), args, stdout, stderr)
}

// sample is `bridge sample` with regs for bridge's collectors.
func sample(regs []metrics.Registration, args []string, stdout, stderr io.Writer) int {
	var asJSON bool
	fs, cfg, code := parseOf(regs, "sample", args, stdout, stderr, func(fs *pflag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print one JSON object instead of a table")
	})
	if fs == nil {
		return code
	}
	// A command after the flags is the one bridge would run: a torchrun's
	// options name the job (bridge sample -- torchrun ... train.py).
	if fs.NArg() > 0 && !isCommand(args, fs.Args()) {
		fmt.Fprintf(stderr, "bridge: sample takes no arguments, only a command after -- (got %q)\n", fs.Args())
		return exitUsage
	}
	log := newLogger(stderr, cfg.LogLevel)
	job := pipeline.DetectJob(cfg, fs.Args(), os.Getenv)
	job.Apply(&cfg)
	src, err := pipeline.BuildSourcesOf(regs, cfg, log)
	if err != nil {
		return usageError(stderr, err)
	}
	smp := metrics.NewSampler(src.Collectors, cfg.CollectTimeout, log)
	defer smp.Close()
	ctx := context.Background()

	detected := src.Detected(ctx, smp)
	detected["job"] = job.Describe()
	// Rates (CPU cores, throttling) need two readings: take one, wait, take
	// the one that is printed, with where each value came from.
	smp.Sample(ctx)
	first := smp.Health()
	time.Sleep(cfg.Window)
	sample, sources := smp.SampleExplained(ctx)
	health := smp.Health()
	for i := range health {
		// The printed sample's own values refused, not the first's too.
		health[i].Refused -= first[i].Refused
		if health[i].Refused == 0 {
			health[i].LastRefused = ""
		}
	}

	if asJSON {
		out := sampleOutput{Detected: detected, Metrics: make([]jsonPoint, 0, len(sample.Points))}
		for _, h := range health {
			jh := jsonHealth{Name: h.Collector, Success: h.OK}
			jh.Duration, _ = metrics.Finite(h.Duration.Seconds())
			if !h.OK {
				jh.Error = h.LastError
			}
			jh.Refused, jh.RefusedLast = h.Refused, h.LastRefused
			out.Collectors = append(out.Collectors, jh)
		}
		for _, p := range sample.Points {
			out.Metrics = append(out.Metrics, jsonPoint{p.Name(), jsonValue(p.Value), string(p.Desc.Unit), string(p.Desc.Scope), sources[p.Name()]})
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "bridge: writing JSON: %v\n", err)
			return 1
		}
		return 0
	}
	writeDetected(stdout, detected)
	writeHealth(stdout, health)
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight*0)
	fmt.Fprintln(tw, "NAME\tVALUE\tUNIT\tSCOPE\tSOURCE")
	for _, p := range sample.Points {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name(), formatValue(p.Value), p.Desc.Unit, p.Desc.Scope, sources[p.Name()])
	}
	tw.Flush()
	return 0
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
		b, err := json.Marshal(t)
		if err != nil {
			return fmt.Sprint(t)
		}
		return string(b)
	}
}

// isCommand reports whether rest, what is left after the flags, came after
// a "--" in args.
func isCommand(args, rest []string) bool {
	n := len(args) - len(rest)
	return n > 0 && args[n-1] == "--"
}
