// Package config loads bridge's settings into one typed struct. Precedence:
// flags, then environment (BRIDGE_<FLAG>, dashes as underscores), then a YAML
// file (--config / BRIDGE_CONFIG), then defaults. Unknown file keys and bad
// values are usage errors that name the flag, variable or file key involved.
package config

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// ErrUsage marks a configuration error; the CLI exits 2 on it.
var ErrUsage = errors.New("usage error")

// Scopes that can be collected.
var AllScopes = []string{"container", "node", "rootfs", "netns", "process", "gpu"}

// Trackers that can be selected.
var allTrackers = []string{"auto", "mlflow", "wandb", "none"}

// Config is every setting of bridge.
type Config struct {
	Interval       time.Duration // time between samples
	FastInterval   time.Duration // time between samples when the working set nears the limit
	FastThreshold  float64       // percent of the memory limit above which FastInterval applies
	CollectTimeout time.Duration // bound on each collector's call
	Window         time.Duration // `bridge sample`: time between its two readings
	Scopes         []string      // which scopes to collect
	NoContainer    bool          // container awareness off: no cgroup collector
	NodeID         string        // multi-node runs: keys go under system/<node_id>/
	LogLevel       string        // debug, info, warn, error
	Trackers       []string      // auto, mlflow, wandb, none
	RunName        string        // name of a run bridge creates
	Spool          string        // JSON Lines spool path; empty = derived default
	QueueSize      int           // samples buffered between sampling and the spool writer
	FlushTimeout   time.Duration // after the child exits, longest wait for trackers
	ProcRoot       string        // procfs mount point
	CgroupRoot     string        // cgroupfs mount point
	Rootfs         string        // path whose filesystem rootfs_ describes
	GPUs           []string      // restrict GPUs by index or UUID
	GPUMatchCUDA   bool          // restrict GPUs to CUDA_VISIBLE_DEVICES, matched by UUID
	ConfigFile     string        // the YAML file read, if any

	MetricsAddr       string         // listen address of /metrics; "" = off (a bare port became 127.0.0.1:PORT)
	Scrape            []string       // Prometheus text-format endpoints read at every sample
	ScrapeInclude     *regexp.Regexp // nil: every scraped series
	ScrapeExclude     *regexp.Regexp // nil: none excluded
	ScrapePassthrough bool           // unmapped scraped series sent as prom_<name>
	ScrapeTimeout     time.Duration  // per scrape request
}

type option struct {
	key, def, usage string
	kind            string // duration, float, int, bool, string, list
}

var options = []option{
	{"interval", "10s", "time between samples (Go duration, e.g. 10s)", "duration"},
	{"fast-interval", "1s", "time between samples while the working set is above --fast-threshold of the limit (0 turns it off)", "duration"},
	{"fast-threshold", "90", "percent of the memory limit above which bridge samples every --fast-interval", "float"},
	{"collect-timeout", "5s", "longest wait for one collector in one sample", "duration"},
	{"window", "1s", "bridge sample: time between the two readings that CPU rates need", "duration"},
	{"scopes", strings.Join(AllScopes, ","), "scopes to collect: " + strings.Join(AllScopes, ", "), "list"},
	{"no-container", "false", "turn container awareness off: no container_ metrics, as JVM -XX:-UseContainerSupport", "bool"},
	{"node-id", "", "node id for multi-node runs: MLflow keys go under system/<node-id>/, W&B series get the label /l:<node-id>", "string"},
	{"log-level", "info", "log level: debug, info, warn, error", "string"},
	{"trackers", "auto", "trackers to send to: auto, mlflow, wandb, none (comma-separated)", "list"},
	{"run-name", "", "name of the run when bridge creates it (default: from the command line)", "string"},
	{"spool", "", "JSON Lines spool file (default ./bridge-spool-<run>.jsonl)", "string"},
	{"flush-timeout", "30s", "after the child exits, longest wait for trackers to take what is left (the rest stays in the spool)", "duration"},
	{"queue-size", "1024", "samples buffered between sampling and the spool writer", "int"},
	{"proc-root", "/proc", "where procfs is mounted (e.g. /host/proc for a sidecar reading another view)", "path"},
	{"cgroup-root", "/sys/fs/cgroup", "where the cgroup filesystem is mounted", "path"},
	{"rootfs", "/", "the filesystem the rootfs_ series describe", "path"},
	{"gpus", "", "GPUs to collect, by index or UUID (comma-separated; default all visible)", "list"},
	{"gpu-match-cuda-visible", "false", "collect only the GPUs named in CUDA_VISIBLE_DEVICES, matched by UUID", "bool"},
	{"metrics-addr", "", "serve the samples on /metrics in the Prometheus text format: PORT (binds 127.0.0.1), HOST:PORT or :PORT (all interfaces); default off", "string"},
	{"scrape", "", "Prometheus text-format URL to read at every sample, e.g. dcgm-exporter's http://localhost:9400/metrics (repeatable)", "repeat"},
	{"scrape-include", "", "regular expression (RE2): keep only scraped series whose name matches", "string"},
	{"scrape-exclude", "", "regular expression (RE2): drop scraped series whose name matches", "string"},
	{"scrape-passthrough", "false", "send scraped series bridge does not map under prom_<name>", "bool"},
	{"scrape-timeout", "2s", "longest wait for one --scrape URL in one sample", "duration"},
}

// Keys returns the known configuration keys (the flag names).
func Keys() []string {
	ks := make([]string, len(options))
	for i, o := range options {
		ks[i] = o.key
	}
	return ks
}

// EnvName is the environment variable for a key.
func EnvName(key string) string {
	return "BRIDGE_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// RegisterFlags adds every option, and --config, to fs.
func RegisterFlags(fs *pflag.FlagSet) {
	for _, o := range options {
		switch o.kind {
		case "bool":
			fs.Bool(o.key, o.def == "true", o.usage)
		default:
			v := &text{s: o.def, kind: o.kind}
			fs.Var(v, o.key, o.usage)
			fs.Lookup(o.key).DefValue = o.def
		}
	}
	fs.String("config", "", "YAML config file (also BRIDGE_CONFIG)")
}

// Load builds the Config from fs (already parsed), the process environment
// and the file named by --config or BRIDGE_CONFIG. Errors wrap ErrUsage.
func Load(fs *pflag.FlagSet) (Config, error) {
	v := viper.New()
	for _, o := range options {
		v.SetDefault(o.key, o.def)
		if f := fs.Lookup(o.key); f != nil {
			if err := v.BindPFlag(o.key, f); err != nil {
				return Config{}, fmt.Errorf("binding flag --%s: %w", o.key, err)
			}
		}
		if err := v.BindEnv(o.key, EnvName(o.key)); err != nil {
			return Config{}, fmt.Errorf("binding %s: %w", EnvName(o.key), err)
		}
	}
	src := sources{fs: fs}

	file := ""
	if f := fs.Lookup("config"); f != nil && f.Changed {
		file, src.fileVia = f.Value.String(), "--config"
	} else if e := os.Getenv("BRIDGE_CONFIG"); e != "" {
		file, src.fileVia = e, "BRIDGE_CONFIG"
	}
	if file != "" {
		// A separate instance sees only the file, to find unknown keys.
		fv := viper.New()
		fv.SetConfigFile(file)
		fv.SetConfigType("yaml")
		if err := fv.ReadInConfig(); err != nil {
			return Config{}, fmt.Errorf("%w: cannot read config file %q (from %s): %w", ErrUsage, file, src.fileVia, err)
		}
		known := Keys()
		var unknown []string
		src.fileKeys = map[string]bool{}
		for _, k := range fv.AllKeys() {
			if !slices.Contains(known, k) {
				unknown = append(unknown, k)
			}
			src.fileKeys[k] = true
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return Config{}, fmt.Errorf("%w: unknown key(s) %s in config file %q; known keys: %s",
				ErrUsage, strings.Join(unknown, ", "), file, strings.Join(known, ", "))
		}
		if err := v.MergeConfigMap(fv.AllSettings()); err != nil {
			return Config{}, fmt.Errorf("%w: config file %q: %w", ErrUsage, file, err)
		}
		src.file = file
	}

	// get returns the winning value (flag > env > file > default) as text;
	// YAML lists are joined with commas like the flag form.
	get := func(key string) string {
		switch t := v.Get(key).(type) {
		case []any:
			parts := make([]string, len(t))
			for i, p := range t {
				parts[i] = fmt.Sprint(p)
			}
			return strings.Join(parts, ",")
		case nil:
			return ""
		default:
			return fmt.Sprint(t)
		}
	}

	var c Config
	var err error
	bad := func(key, val, why string) error {
		return fmt.Errorf("%w: %s=%q: %s", ErrUsage, src.name(key), val, why)
	}
	dur := func(key string, min time.Duration) (time.Duration, error) {
		s := get(key)
		d, e := time.ParseDuration(s)
		if e != nil {
			return 0, bad(key, s, "not a Go duration (e.g. 10s, 500ms, 1m)")
		}
		switch {
		case d < 0:
			return 0, bad(key, s, "must not be negative")
		case d < min:
			return 0, bad(key, s, "must be at least "+min.String())
		}
		return d, nil
	}
	if c.Interval, err = dur("interval", 100*time.Millisecond); err != nil {
		return c, err
	}
	if c.FastInterval, err = dur("fast-interval", 0); err != nil {
		return c, err
	}
	if c.CollectTimeout, err = dur("collect-timeout", 10*time.Millisecond); err != nil {
		return c, err
	}
	if c.FlushTimeout, err = dur("flush-timeout", 0); err != nil {
		return c, err
	}
	if c.Window, err = dur("window", 0); err != nil {
		return c, err
	}
	{
		s := get("fast-threshold")
		f, e := strconv.ParseFloat(s, 64)
		if e != nil || f <= 0 || f > 100 {
			return c, bad("fast-threshold", s, "must be a percentage in (0, 100]")
		}
		c.FastThreshold = f
	}
	{
		s := get("queue-size")
		n, e := strconv.Atoi(s)
		if e != nil || n < 1 {
			return c, bad("queue-size", s, "must be a positive integer")
		}
		c.QueueSize = n
	}
	boolean := func(key string) (bool, error) {
		s := get(key)
		b, e := strconv.ParseBool(s)
		if e != nil {
			return false, bad(key, s, "must be true or false")
		}
		return b, nil
	}
	if c.NoContainer, err = boolean("no-container"); err != nil {
		return c, err
	}
	if c.GPUMatchCUDA, err = boolean("gpu-match-cuda-visible"); err != nil {
		return c, err
	}
	list := func(key string, allowed []string) ([]string, error) {
		s := get(key)
		var out []string
		for _, p := range strings.Split(s, ",") {
			p = strings.TrimSpace(p)
			if p == "" {
				continue
			}
			if allowed != nil && !slices.Contains(allowed, p) {
				return nil, bad(key, s, fmt.Sprintf("unknown value %q; known: %s", p, strings.Join(allowed, ", ")))
			}
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
		return out, nil
	}
	if c.Scopes, err = list("scopes", AllScopes); err != nil {
		return c, err
	}
	if len(c.Scopes) == 0 {
		return c, bad("scopes", get("scopes"), "name at least one scope")
	}
	if c.Trackers, err = list("trackers", allTrackers); err != nil {
		return c, err
	}
	if len(c.Trackers) == 0 {
		c.Trackers = []string{"auto"}
	}
	if len(c.Trackers) > 1 && (slices.Contains(c.Trackers, "none") || slices.Contains(c.Trackers, "auto")) {
		return c, bad("trackers", get("trackers"), `"auto" and "none" cannot be combined with other trackers`)
	}
	if c.GPUs, err = list("gpus", nil); err != nil {
		return c, err
	}
	c.LogLevel = strings.ToLower(get("log-level"))
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.LogLevel) {
		return c, bad("log-level", get("log-level"), "must be debug, info, warn or error")
	}
	c.NodeID = get("node-id")
	if c.NodeID != "" && !validNodeID(c.NodeID) {
		return c, bad("node-id", c.NodeID, "may hold only letters, digits, '_', '-', '.' (it becomes one MLflow key segment)")
	}
	for key, dst := range map[string]*string{"proc-root": &c.ProcRoot, "cgroup-root": &c.CgroupRoot, "rootfs": &c.Rootfs} {
		*dst = get(key)
		if st, e := os.Stat(*dst); e != nil || !st.IsDir() {
			return c, bad(key, *dst, "not a directory")
		}
	}
	c.RunName = get("run-name")
	c.Spool = get("spool")
	c.ConfigFile = file
	if err := loadPrometheus(&c, get, bad, boolean, list, dur); err != nil {
		return c, err
	}
	return c, nil
}

func validNodeID(s string) bool {
	for _, r := range s {
		ok := r == '_' || r == '-' || r == '.' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !ok {
			return false
		}
	}
	return len(s) <= 100
}

// HasScope reports whether scope s is collected.
func (c Config) HasScope(s string) bool { return slices.Contains(c.Scopes, s) }

// sources names where a key's value came from, for error messages.
type sources struct {
	fs       *pflag.FlagSet
	file     string
	fileVia  string
	fileKeys map[string]bool
}

func (s sources) name(key string) string {
	if f := s.fs.Lookup(key); f != nil && f.Changed {
		return "--" + key
	}
	if _, ok := os.LookupEnv(EnvName(key)); ok {
		return EnvName(key)
	}
	if s.fileKeys[key] {
		return fmt.Sprintf("%s (in %s)", key, s.file)
	}
	return "--" + key + " (default)"
}

// text is a flag value parsed later, by Load, so that a bad value is reported
// like one from the environment or the file; its Type names the kind for
// --help.
type text struct {
	s, kind string
	set     bool // Set was called: a "repeat" flag appends
}

func (t *text) String() string { return t.s }
func (t *text) Set(v string) error {
	if t.kind == "repeat" && t.set && t.s != "" {
		v = t.s + "," + v
	}
	t.s, t.set = v, true
	return nil
}
func (t *text) Type() string { return t.kind }
