// Package config loads bridge's settings. Every setting, bridge's own and
// each collector's, is an option.Of declared once, with its validity: bridge's
// own in this package (options.go), bound to a field of Config, a
// collector's in its package, carried by its registration
// (Choices.Options) into Config.Options. Precedence: flags, then
// environment (BRIDGE_<FLAG>, dashes as underscores), then a YAML file
// (--config / BRIDGE_CONFIG), then defaults. One viper instance merges them;
// each option reads what it holds (option.Parse) and checks it (its Valid).
// Unknown file keys and bad values are usage errors (ErrUsage) that name the
// flag, variable or file key involved.
//
// One whitespace rule for every value from every source: surrounding
// whitespace is not part of it and is trimmed (a Kubernetes value written as
// a YAML block, `value: |`, ends in a newline).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/bridge-dev/bridge/config/option"
	"github.com/bridge-dev/bridge/internal/kfile"
)

// ErrUsage marks a configuration error; the CLI exits 2 on it.
var ErrUsage = errors.New("usage error")

// Choices are what comes from the registrations of bridge's collectors and
// trackers (package pipeline, which imports this one): the names --scopes
// and --trackers take, and the collectors' own options. config checks
// values against them and lists them in the usage text without knowing what
// they are.
type Choices struct {
	Scopes   []string        // every scope a collector serves; the default is all of them
	Trackers []string        // every tracker, besides "auto" and "none"
	Options  []option.Option // the collectors' own settings, loaded into Config.Options
}

func (ch Choices) trackers() []string {
	return append(append([]string{"auto"}, ch.Trackers...), "none")
}

// Specs are every option's, bridge's own then the registrations', as the
// flags and the README's flag table (docgen) show them; --config is not
// among them.
func Specs(ch Choices) []option.Spec {
	all := settings(new(Config), ch)
	out := make([]option.Spec, len(all))
	for i, o := range all {
		out[i] = o.Spec()
	}
	return out
}

// Bounds on the sizes, so that a typo cannot make bridge allocate (or wait)
// without limit.
const (
	MaxNodes         = 100_000
	MinSpoolMaxSize  = 4 << 10 // below this not even one sample fits
	maxSize          = 1 << 50 // 1 PiB: any larger "size" is a typo
	maxDuration      = 24 * time.Hour
	maxStartTimeout  = 10 * time.Minute
	maxSpoolSync     = time.Minute // longer would leave minutes of samples to a machine crash
	envPrefix        = "BRIDGE"
	configKey        = "config"
	defaultSpoolSize = 1 << 30
)

// MaxConfigBytes bounds the --config file: its few dozen keys take a few
// KiB; anything near this is not a configuration file.
const MaxConfigBytes = 1 << 20

// DefaultStartTimeout is how long the child waits for the trackers before it
// starts unless --start-timeout says otherwise.
const DefaultStartTimeout = 5 * time.Second

// Config is every setting of bridge: each field of bridge's own is an
// option's value (options.go binds them), Options the registrations'.
type Config struct {
	Interval       time.Duration // time between samples
	FastInterval   time.Duration // time between samples when the working set nears the limit
	FastThreshold  float64       // percent of the memory limit above which FastInterval applies
	CollectTimeout time.Duration // bound on each collector's call
	Window         time.Duration // `bridge sample`: time between its two readings
	AnalysisWindow time.Duration // the span of each bottleneck verdict
	Scopes         []string      // which scopes to collect
	NodeID         string        // multi-node runs: keys go under system/<node_id>/
	LogLevel       string        // debug, info, warn, error
	Trackers       []string      // auto, mlflow, wandb, none
	RunName        string        // name of a run bridge creates
	Spool          string        // JSON Lines spool path; empty = derived default
	SpoolMaxSize   ByteSize      // cap on the spool file; 0 = no cap
	SpoolSync      time.Duration // longest delay of the spool's fsync; 0 = fsync every sample
	KeepSpool      bool          // keep a fully delivered spool of a clean run
	FlushTimeout   time.Duration // after the child exits, longest wait for trackers
	StartTimeout   time.Duration // longest wait for trackers before the child starts
	KillAfter      time.Duration // SIGKILL this long after a forwarded SIGTERM; 0 = never
	ProcRoot       string        // procfs mount point
	CgroupRoot     string        // cgroupfs mount point
	Rootfs         string        // path whose filesystem rootfs_ describes
	SysRoot        string        // sysfs mount point (RAPL, InfiniBand, AMD GPUs)
	ConfigFile     string        // the YAML file read, if any

	// Multi-node jobs (docs/multinode.md): the explicit settings win over
	// what the launcher gives (package jobkey).
	JobKey    string        // names the job's one run on every node; "none": no key
	Nodes     int           // nodes the job has; 0: from the launcher
	JobSettle time.Duration // the election's settle time

	// Where JobKey, NodeID and Nodes came from ("--job-key", "BRIDGE_JOB_KEY",
	// "job-key (in FILE)"), for `bridge sample` and the log; "" when unset.
	JobKeyFrom, NodeIDFrom, NodesFrom string

	MetricsAddr string // listen address of /metrics; "" = off (a bare port became 127.0.0.1:PORT)

	RunTick          time.Duration // time between the run's ticks (pipeline's Session)
	PricePerGPUHour  float64       // a GPU's price an hour; 0: none
	PricePerNodeHour float64       // a node's price an hour; 0: none

	// Options are the values of the registrations' options (Choices.Options),
	// by key: a collector reads its own with option.Of.Get.
	Options option.Values
}

// Keys returns the known configuration keys (the flag names): bridge's
// own, then the registrations' (ch.Options).
func Keys(ch Choices) []string {
	specs := Specs(ch)
	ks := make([]string, len(specs))
	for i, o := range specs {
		ks[i] = o.Key
	}
	return ks
}

// EnvName is the environment variable for a key.
func EnvName(key string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// RegisterFlags adds every option, and --config, to fs, each with its type;
// ch names what --scopes and --trackers take.
func RegisterFlags(fs *pflag.FlagSet, ch Choices) {
	for _, o := range Specs(ch) {
		switch d := o.Default.(type) {
		case time.Duration:
			fs.Duration(o.Key, d, o.Usage)
		case float64:
			fs.Float64(o.Key, d, o.Usage)
		case int:
			fs.Int(o.Key, d, o.Usage)
		case bool:
			fs.Bool(o.Key, d, o.Usage)
		case string:
			fs.String(o.Key, d, o.Usage)
		case []string:
			fs.StringSlice(o.Key, d, o.Usage)
		case ByteSize:
			v := d
			fs.Var(&v, o.Key, o.Usage)
		case *regexp.Regexp:
			fs.String(o.Key, flagDefault(d).(string), o.Usage)
		default:
			panic(fmt.Sprintf("config: option %s has default of unhandled type %T", o.Key, o.Default))
		}
		if _, isList := o.Default.([]string); !isList { // a list's items are trimmed by option.Parse
			f := fs.Lookup(o.Key)
			f.Value = trimmed{f.Value}
		}
	}
	fs.String(configKey, "", "YAML config file (also BRIDGE_CONFIG)")
}

// flagDefault is a default as a flag, a variable or the file gives the
// value: a regular expression as its source, "" for none.
func flagDefault(v any) any {
	if re, ok := v.(*regexp.Regexp); ok {
		if re == nil {
			return ""
		}
		return re.String()
	}
	return v
}

// trimmed hands a flag's value to its typed parser without surrounding
// whitespace: the whitespace rule (see the package doc) for flags.
type trimmed struct{ pflag.Value }

func (t trimmed) Set(s string) error { return t.Value.Set(strings.TrimSpace(s)) }

// Parse parses args into fs (made with RegisterFlags); a bad flag is an
// error wrapping ErrUsage that names it.
func Parse(fs *pflag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return nil
}

// Load builds the Config from fs (already parsed, made by RegisterFlags with
// the same ch), the process environment and the file named by --config or
// BRIDGE_CONFIG. Errors wrap ErrUsage.
func Load(fs *pflag.FlagSet, ch Choices) (Config, error) {
	c := Config{Options: option.Values{}}
	all := settings(&c, ch)
	v := viper.New()
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	for _, sp := range append(Specs(ch), option.Spec{Key: configKey, Default: ""}) {
		v.SetDefault(sp.Key, flagDefault(sp.Default))
		if f := fs.Lookup(sp.Key); f != nil {
			if err := v.BindPFlag(sp.Key, f); err != nil {
				return c, fmt.Errorf("%w: binding flag --%s: %w", ErrUsage, sp.Key, err)
			}
		}
	}
	src := sources{fs: fs, v: v}
	if err := src.readFile(ch); err != nil {
		return c, err
	}
	c.ConfigFile = src.file
	// Each option reads what viper holds for it, from the source that wins.
	for _, o := range all {
		key := o.Spec().Key
		val, err := o.Value(v.Get(key))
		if err != nil {
			var b *option.Bad
			if !errors.As(err, &b) {
				b = &option.Bad{Value: v.Get(key), Why: err.Error()}
			}
			return c, src.bad(key, b.Value, b.Why)
		}
		o.set(val)
	}
	c.JobKeyFrom = src.given("job-key", c.JobKey)
	c.NodeIDFrom = src.given("node-id", c.NodeID)
	c.NodesFrom = src.given("nodes", fmt.Sprint(c.Nodes))
	return c, nil
}

// readFile reads the file --config or BRIDGE_CONFIG names, if any, into
// s.v: a YAML file of known keys.
func (s *sources) readFile(ch Choices) error {
	file := strings.TrimSpace(s.v.GetString(configKey))
	if file == "" {
		return nil
	}
	s.file, s.fileVia = file, s.name(configKey)
	s.v.SetConfigType("yaml")
	// Read by bridge, not viper: only a regular file, of bounded size
	// (/dev/zero would be read without end, a FIFO waited on forever).
	raw, err := kfile.ReadUserFile(file, MaxConfigBytes)
	if err == nil {
		err = s.v.ReadConfig(bytes.NewReader(raw))
	}
	if err != nil {
		return fmt.Errorf("%w: cannot read config file %q (from %s): %w", ErrUsage, file, s.fileVia, err)
	}
	known := append(Keys(ch), configKey)
	var unknown []string
	for _, k := range s.v.AllKeys() {
		top, _, _ := strings.Cut(k, ".")
		if !slices.Contains(known, top) || top != k {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("%w: unknown key(s) %s in config file %q; known keys: %s",
			ErrUsage, strings.Join(unknown, ", "), file, strings.Join(Keys(ch), ", "))
	}
	return nil
}

// HasScope reports whether scope s is collected.
func (c Config) HasScope(s string) bool { return slices.Contains(c.Scopes, s) }

// sources names where a key's value came from, for error messages.
type sources struct {
	fs      *pflag.FlagSet
	v       *viper.Viper
	file    string
	fileVia string
}

// bad is the usage error for key's value: where it came from, the value,
// why it is refused.
func (s sources) bad(key string, val any, why string) error {
	return fmt.Errorf("%w: %s=%q: %s", ErrUsage, s.name(key), fmt.Sprint(val), why)
}

// given is where the value of key came from, "" when val is its zero
// value: for the job's settings (Config.JobKeyFrom, ...).
func (s sources) given(key, val string) string {
	if val == "" || val == "0" {
		return ""
	}
	return strings.TrimSuffix(s.name(key), " (default)")
}

func (s sources) name(key string) string {
	if f := s.fs.Lookup(key); f != nil && f.Changed {
		return "--" + key
	}
	if e, ok := os.LookupEnv(EnvName(key)); ok && e != "" {
		return EnvName(key)
	}
	if s.file != "" && s.v.InConfig(key) {
		return fmt.Sprintf("%s (in %s)", key, s.file)
	}
	return "--" + key + " (default)"
}
