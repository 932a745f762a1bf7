// Package config loads bridge's settings into one typed struct. Precedence:
// flags, then environment (BRIDGE_<FLAG>, dashes as underscores), then a YAML
// file (--config / BRIDGE_CONFIG), then defaults. One viper instance merges
// them and decodes them strictly into Config; unknown file keys and bad
// values are usage errors (ErrUsage) that name the flag, variable or file key
// involved. The settings of one collector alone are declared in its package
// (package option) and come with its registration (Choices.Options): they
// are loaded the same way, into Config.Options.
//
// One whitespace rule for every value from every source: surrounding
// whitespace is not part of it and is trimmed (a Kubernetes value written as
// a YAML block, `value: |`, ends in a newline).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/bridge-dev/bridge/config/option"
	"github.com/bridge-dev/bridge/internal/userfile"
	"github.com/bridge-dev/bridge/jobkey"
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

// spec is o with the choices' default, usage and doc, for the options that
// take them.
func (ch Choices) spec(o option.Spec) option.Spec {
	switch o.Key {
	case "scopes":
		o.Default, o.Usage = slices.Clone(ch.Scopes), o.Usage+": "+strings.Join(ch.Scopes, ", ")
		o.Doc = "`" + strings.Join(ch.Scopes, ",") + "`"
	case "trackers":
		o.Usage += ": " + strings.Join(ch.trackers(), ", ") + " (comma-separated)"
		o.Doc = "`" + strings.Join(ch.trackers(), "`, `") + "`; " + o.Doc
	}
	return o
}

// Specs are every option's, bridge's own then the registrations', as the
// flags and the README's flag table (docgen) show them; --config is not
// among them.
func Specs(ch Choices) []option.Spec {
	out := make([]option.Spec, 0, len(options)+len(ch.Options))
	for _, o := range options {
		out = append(out, ch.spec(o))
	}
	for _, o := range ch.Options {
		out = append(out, o.Spec())
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

// Config is every setting of bridge. The mapstructure tags are the file keys
// and flag names.
type Config struct {
	Interval       time.Duration `mapstructure:"interval"`        // time between samples
	FastInterval   time.Duration `mapstructure:"fast-interval"`   // time between samples when the working set nears the limit
	FastThreshold  float64       `mapstructure:"fast-threshold"`  // percent of the memory limit above which FastInterval applies
	CollectTimeout time.Duration `mapstructure:"collect-timeout"` // bound on each collector's call
	Window         time.Duration `mapstructure:"window"`          // `bridge sample`: time between its two readings
	Scopes         []string      `mapstructure:"scopes"`          // which scopes to collect
	NodeID         string        `mapstructure:"node-id"`         // multi-node runs: keys go under system/<node_id>/
	LogLevel       string        `mapstructure:"log-level"`       // debug, info, warn, error
	Trackers       []string      `mapstructure:"trackers"`        // auto, mlflow, wandb, none
	RunName        string        `mapstructure:"run-name"`        // name of a run bridge creates
	Spool          string        `mapstructure:"spool"`           // JSON Lines spool path; empty = derived default
	SpoolMaxSize   ByteSize      `mapstructure:"spool-max-size"`  // cap on the spool file; 0 = no cap
	SpoolSync      time.Duration `mapstructure:"spool-sync"`      // longest delay of the spool's fsync; 0 = fsync every sample
	KeepSpool      bool          `mapstructure:"keep-spool"`      // keep a fully delivered spool of a clean run
	FlushTimeout   time.Duration `mapstructure:"flush-timeout"`   // after the child exits, longest wait for trackers
	StartTimeout   time.Duration `mapstructure:"start-timeout"`   // longest wait for trackers before the child starts
	KillAfter      time.Duration `mapstructure:"kill-after"`      // SIGKILL this long after a forwarded SIGTERM; 0 = never
	ProcRoot       string        `mapstructure:"proc-root"`       // procfs mount point
	CgroupRoot     string        `mapstructure:"cgroup-root"`     // cgroupfs mount point
	Rootfs         string        `mapstructure:"rootfs"`          // path whose filesystem rootfs_ describes
	SysRoot        string        `mapstructure:"sys-root"`        // sysfs mount point (RAPL, InfiniBand, AMD GPUs)
	ConfigFile     string        `mapstructure:"config"`          // the YAML file read, if any

	// Multi-node jobs (docs/multinode.md): the explicit settings win over
	// what the launcher gives (package jobkey).
	JobKey    string        `mapstructure:"job-key"`    // names the job's one run on every node; "none": no key
	Nodes     int           `mapstructure:"nodes"`      // nodes the job has; 0: from the launcher
	JobSettle time.Duration `mapstructure:"job-settle"` // the election's settle time

	// Where JobKey, NodeID and Nodes came from ("--job-key", "BRIDGE_JOB_KEY",
	// "job-key (in FILE)"), for `bridge sample` and the log; "" when unset.
	JobKeyFrom, NodeIDFrom, NodesFrom string `mapstructure:"-"`

	MetricsAddr string `mapstructure:"metrics-addr"` // listen address of /metrics; "" = off (a bare port became 127.0.0.1:PORT)

	// Options are the values of the registrations' options (Choices.Options),
	// by key: a collector reads its own with option.Of.Get.
	Options option.Values `mapstructure:"-"`
}

// options are bridge's own settings, in the order of the README's flag
// table. Each flag is registered typed, so that pflag rejects a value of the
// wrong type naming the flag.
var options = []option.Spec{
	{Key: "interval", Default: 10 * time.Second,
		Usage: "time between samples (Go duration, e.g. 10s; 100ms to 24h); the second sample comes after a random part of it, so that bridges started together do not post at once",
		Doc:   "time between samples (Go duration), as MLflow; the first sample is taken at once, the second after a random part of the interval, so that bridges started together do not all post at the same instant"},
	{Key: "fast-interval", Default: time.Second,
		Usage: "time between samples while the working set is above --fast-threshold of the limit (0 turns it off)",
		Doc:   "sampling interval while the working set is above `--fast-threshold` of the limit"},
	{Key: "fast-threshold", Default: 90.0,
		Usage: "percent of the memory limit above which bridge samples every --fast-interval, in (0, 100]",
		Doc:   "percent of the memory limit that switches to fast sampling"},
	{Key: "scopes", Default: []string{}, Usage: "scopes to collect", Shown: "all"}, // Choices.spec
	{Key: "node-id", Default: "", Shown: "from the launcher",
		Usage: "node id for multi-node runs: MLflow keys go under system/<node-id>/, W&B series get the label /l:<node-id>",
		Doc:   "multi-node runs: keys under `system/<node-id>/` (MLflow), label `/l:<node-id>` (W&B)"},
	{Key: "job-key", Default: "", Shown: "from the launcher",
		Usage: "multi-node jobs: the key that names the job's one run on every node (default: found from the launcher: Slurm, torchrun, Kubernetes; \"none\" turns that off); " + jobkey.KeyRule,
		Doc:   "multi-node jobs: the key that names the job's one run on every node (Slurm, torchrun, Kubernetes give one; `none` turns that off; [docs/multinode.md](docs/multinode.md))"},
	{Key: "nodes", Default: 0, Shown: "from the launcher",
		Usage: "multi-node jobs: how many nodes the job has (default: from the launcher); the run is FINISHED once that many nodes ended cleanly",
		Doc:   "multi-node jobs: how many nodes must end cleanly before the job's run is FINISHED"},
	{Key: "job-settle", Default: time.Second,
		Usage: "multi-node jobs: how long a node that created a candidate run waits before it looks again and picks the job's run (100ms to 1m; see docs/multinode.md)",
		Doc:   "multi-node jobs: the settle time of the election that finds the job's run"},
	{Key: "log-level", Default: "info", Usage: "log level: debug, info, warn, error", Doc: "`debug`, `info`, `warn`, `error`"},
	{Key: "trackers", Default: []string{"auto"}, Usage: "trackers to send to", Shown: "`auto`", // Choices.spec
		Doc: "`auto` turns on MLflow when `MLFLOW_TRACKING_URI` is set (it must be an `mlflow server`'s http(s) URL) and W&B when `WANDB_API_KEY` or `WANDB_PROJECT` is set"},
	{Key: "run-name", Default: "", Shown: "command line",
		Usage: "name of the run when bridge creates it (default: from the command line as recorded)",
		Doc:   "name of a run bridge creates"},
	{Key: "spool", Default: "", Shown: "`./bridge-spool-<node>-<run>.jsonl`",
		Usage: "JSON Lines spool file (default ./bridge-spool-<node>-<run>.jsonl)",
		Doc:   "the durable JSON Lines spool (one writer at a time; `<node>` is `--node-id` or the job's node id, else the host name, with `.task-<n>` for a job's further bridges on one node)"},
	{Key: "flush-timeout", Default: 30 * time.Second,
		Usage: "after the child exits, longest wait in all for trackers to take what is left and record the end (the rest stays in the spool; a tracker that never answered gets 2s); a second SIGINT/SIGTERM ends it at once",
		Doc:   "after the child exits, the longest bridge waits in all (trackers taking what is left, recording the end) before it exits; what is unsent stays in the spool. A tracker that never answered during the job gets 2 s of it. A second SIGINT/SIGTERM during this wait ends it at once"},
	{Key: "start-timeout", Default: DefaultStartTimeout,
		Usage: "longest wait for trackers before the child starts: the child starts within this whatever the trackers do (100ms to 10m)",
		Doc:   "the child starts within this, whatever the trackers do (100ms to 10m); a tracker that is unreachable by then is started again in the background (see docs/reliability.md); one whose start has not even returned is not used for this attempt, its samples stay in the spool for `bridge sync`"},
	{Key: "kill-after", Default: time.Duration(0), Shown: "`0` (off)",
		Usage: "after bridge forwards SIGTERM (or SIGINT), send SIGKILL to the child's group if it is still running this long after (0 = never)",
		Doc:   "once bridge has forwarded SIGTERM or SIGINT, SIGKILL the child's group if it still runs this long after; the verdict says so"},
	{Key: "spool-max-size", Default: ByteSize(defaultSpoolSize),
		Usage: "largest size of the spool file, e.g. 512MiB, 1GiB (0 = no cap)",
		Doc:   "largest size of the spool file (`512MiB`, `1GiB`, `0` = no cap; binary units)"},
	{Key: "spool-sync", Default: time.Second,
		Usage: "longest delay before the spool's writes are fsynced, 0 to 1m (0 = fsync every sample); a machine crash (not a crash of bridge) can lose the samples of this delay not yet sent",
		Doc:   "longest delay before what no tracker has is fsynced (0 to 1m); what every tracker acknowledged is not fsynced. A crash or kill of bridge loses nothing either way; a machine crash (kernel panic, power loss) can lose up to this much of the samples not yet sent to a tracker. `0` fsyncs every write (see [docs/reliability.md](docs/reliability.md))"},
	{Key: "keep-spool", Default: false,
		Usage: "keep the spool file of a clean run even when every tracker has taken all of it",
		Doc:   "keep the spool of a clean run even when every tracker took all of it"},
	{Key: "collect-timeout", Default: 5 * time.Second,
		Usage: "longest wait for one collector in one sample (10ms to 10m)",
		Doc:   "longest wait for one collector, and for the cgroup's limits before the child starts (a hung NVML call or kernel read cannot stall sampling or the start)"},
	{Key: "window", Default: time.Second,
		Usage: "bridge sample: time between the two readings that CPU rates need",
		Doc:   "`bridge sample`: time between its two readings"},
	{Key: "proc-root", Default: "/proc",
		Usage: "where procfs is mounted (e.g. /host/proc for a sidecar reading another view)",
		Doc:   "where procfs is read from (a sidecar with the host's mounted elsewhere; the golden test's fixture trees)"},
	{Key: "cgroup-root", Default: "/sys/fs/cgroup", Usage: "where the cgroup filesystem is mounted",
		Doc: "where the cgroup filesystem is read from"},
	{Key: "rootfs", Default: "/", Usage: "the filesystem the rootfs_ series describe", Doc: "the filesystem the `rootfs_` series describe"},
	{Key: "sys-root", Default: "/sys",
		Usage: "where sysfs is mounted (RAPL energy, InfiniBand ports, AMD GPUs are read under its class/)",
		Doc:   "where sysfs is read from: RAPL, InfiniBand and AMD GPUs under `<sys-root>/class`"},
	{Key: "metrics-addr", Default: "", Shown: "off",
		Usage: "serve the samples on /metrics in the Prometheus text format: PORT (binds 127.0.0.1), HOST:PORT or :PORT (all interfaces); default off",
		Doc:   "serve the samples on `/metrics` (Prometheus text format, cAdvisor names); a bare port binds 127.0.0.1 ([docs/prometheus.md](docs/prometheus.md))"},
}

// Keys returns the known configuration keys (the flag names): bridge's
// own, then the registrations' (ch.Options).
func Keys(ch Choices) []string {
	ks := make([]string, 0, len(options)+len(ch.Options))
	for _, o := range Specs(ch) {
		ks = append(ks, o.Key)
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
		if _, isList := o.Default.([]string); !isList { // a list's items are trimmed by option.List
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
	v := viper.New()
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	for _, o := range append(Specs(ch), option.Spec{Key: configKey, Default: ""}) {
		v.SetDefault(o.Key, flagDefault(o.Default))
		if f := fs.Lookup(o.Key); f != nil {
			if err := v.BindPFlag(o.Key, f); err != nil {
				return Config{}, fmt.Errorf("%w: binding flag --%s: %w", ErrUsage, o.Key, err)
			}
		}
	}
	src := sources{fs: fs, v: v}

	if file := strings.TrimSpace(v.GetString(configKey)); file != "" {
		src.file, src.fileVia = file, src.name(configKey)
		v.SetConfigType("yaml")
		// Read by bridge, not viper: only a regular file, of bounded size
		// (/dev/zero would be read without end, a FIFO waited on forever).
		raw, err := userfile.Read(file, MaxConfigBytes)
		if err == nil {
			err = v.ReadConfig(bytes.NewReader(raw))
		}
		if err != nil {
			return Config{}, fmt.Errorf("%w: cannot read config file %q (from %s): %w", ErrUsage, file, src.fileVia, err)
		}
		// Said here, by name, rather than in UnmarshalExact's terms.
		known := append(Keys(ch), configKey)
		var unknown []string
		for _, k := range v.AllKeys() {
			top, _, _ := strings.Cut(k, ".")
			if !slices.Contains(known, top) || top != k {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return Config{}, fmt.Errorf("%w: unknown key(s) %s in config file %q; known keys: %s",
				ErrUsage, strings.Join(unknown, ", "), file, strings.Join(Keys(ch), ", "))
		}
	}

	// bridge's own settings into Config; the registrations' are not its
	// fields, so they are left out of what it decodes.
	own := map[string]any{configKey: v.Get(configKey)}
	for _, o := range options {
		own[o.Key] = v.Get(o.Key)
	}
	var c Config
	err := decode(own, &c, true)
	if err != nil {
		var de *mapstructure.DecodeError
		if errors.As(err, &de) && slices.Contains(Keys(ch), de.Name()) {
			return c, src.bad(de.Name(), v.Get(de.Name()), decodeReason(ownDefault(de.Name()), de.Unwrap()))
		}
		return c, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if err := c.validate(src, ch); err != nil {
		return c, err
	}
	if c.Options, err = loadOptions(v, src, ch.Options); err != nil {
		return c, err
	}
	return c, nil
}

// decode decodes in into out with the hooks every value goes through, as
// strictly for every option (exact: no key out lacks).
func decode(in, out any, exact bool) error {
	d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:      out,
		ErrorUnused: exact,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			trimHook,
			bareDurationHook,
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.TextUnmarshallerHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
			mapstructure.StringToBasicTypeHookFunc(),
			wholeNumberHook,
			regexpHook,
			scalarToStringHook,
		),
	})
	if err != nil {
		return err
	}
	return d.Decode(in)
}

// loadOptions decodes and checks the registrations' options, as the
// options of Config: a bad value is a usage error naming where it came
// from.
func loadOptions(v *viper.Viper, src sources, opts []option.Option) (option.Values, error) {
	out := make(option.Values, len(opts))
	for _, o := range opts {
		sp := o.Spec()
		raw := v.Get(sp.Key)
		typed := reflect.New(reflect.TypeOf(sp.Default))
		if err := decode(raw, typed.Interface(), false); err != nil {
			var de *mapstructure.DecodeError
			if errors.As(err, &de) {
				err = de.Unwrap()
			}
			return nil, src.bad(sp.Key, raw, decodeReason(sp.Default, err))
		}
		val, err := o.Check(typed.Elem().Interface())
		if err != nil {
			shown := typed.Elem().Interface()
			if l, ok := shown.([]string); ok {
				shown = strings.Join(l, ",")
			}
			var b *option.Bad
			if errors.As(err, &b) {
				shown = b.Value
			}
			return nil, src.bad(sp.Key, shown, err.Error())
		}
		out[sp.Key] = val
	}
	return out, nil
}

// decodeReason is a decode error in the user's terms: the kind of value
// the option wants (that of its default; nil: unknown), then the parser's
// own words.
func decodeReason(def any, err error) string {
	if def == nil {
		return err.Error()
	}
	return fmt.Sprintf("not a valid %s (%v)", kindName(reflect.TypeOf(def)), err)
}

// ownDefault is the default of bridge's own option key; nil for another.
func ownDefault(key string) any {
	for _, o := range options {
		if o.Key == key {
			return o.Default
		}
	}
	return nil
}

func kindName(t reflect.Type) string {
	switch t {
	case reflect.TypeOf(time.Duration(0)):
		return "Go duration (e.g. 10s, 500ms, 1m)"
	case reflect.TypeOf(ByteSize(0)):
		return "size (e.g. 512MiB, 1GiB, 0)"
	case reflect.TypeOf(""):
		return "string"
	case reflect.TypeOf((*regexp.Regexp)(nil)):
		return "regular expression (RE2)"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "boolean (true or false)"
	case reflect.Int, reflect.Int64:
		return "whole number"
	case reflect.Float64:
		return "number"
	case reflect.Slice:
		return "list"
	}
	return t.String()
}

// trimHook trims surrounding whitespace from every string value (the
// environment, the file and flags as viper hands them on): the whitespace
// rule of the package doc, before any other hook parses the value.
func trimHook(f, _ reflect.Type, data any) (any, error) {
	if s, ok := data.(string); ok {
		return strings.TrimSpace(s), nil
	}
	return data, nil
}

// bareDurationHook refuses a number without a unit (a YAML `interval: 20`)
// for a duration setting, which mapstructure would take as nanoseconds:
// `spool-sync: 1` would silently mean an fsync every write. 0 stays valid.
func bareDurationHook(f, t reflect.Type, data any) (any, error) {
	if t != reflect.TypeOf(time.Duration(0)) || f == t { // f == t: a default or a flag's value
		return data, nil
	}
	switch f.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		if v := reflect.ValueOf(data); !v.IsZero() {
			return nil, fmt.Errorf("a number without a unit: write it with one, e.g. %vs or %vms", data, data)
		}
		return time.Duration(0), nil
	}
	return data, nil
}

// wholeNumberHook refuses a fractional number (a YAML 1.5) for an integer
// setting, which mapstructure would truncate.
func wholeNumberHook(f, t reflect.Type, data any) (any, error) {
	if t.Kind() != reflect.Int && t.Kind() != reflect.Int64 {
		return data, nil
	}
	if f.Kind() == reflect.Float64 || f.Kind() == reflect.Float32 {
		x := reflect.ValueOf(data).Float()
		if x != math.Trunc(x) || math.IsInf(x, 0) || math.Abs(x) > 1<<62 {
			return nil, fmt.Errorf("not a whole number: %v", x)
		}
		return int64(x), nil
	}
	return data, nil
}

// regexpHook compiles a regular expression setting; "" is none (nil).
func regexpHook(f, t reflect.Type, data any) (any, error) {
	if t != reflect.TypeOf((*regexp.Regexp)(nil)) || f.Kind() != reflect.String {
		return data, nil
	}
	s := data.(string)
	if s == "" {
		return (*regexp.Regexp)(nil), nil
	}
	return regexp.Compile(s)
}

// scalarToStringHook lets a file say node-id: 7 for a string setting.
func scalarToStringHook(f, t reflect.Type, data any) (any, error) {
	if t.Kind() != reflect.String {
		return data, nil
	}
	switch f.Kind() {
	case reflect.Int, reflect.Int64, reflect.Float64, reflect.Bool:
		return fmt.Sprint(data), nil
	}
	return data, nil
}

// validate checks ranges and forms, in one place, naming each key's source:
// each group of settings in turn, the first error wins.
func (c *Config) validate(src sources, ch Choices) error {
	for _, check := range []func(sources) error{
		c.validateDurations,
		c.validateBounds,
		func(src sources) error { return c.validateLists(src, ch) },
		c.validatePrometheus,
		c.validateJob,
		c.validatePaths,
	} {
		if err := check(src); err != nil {
			return err
		}
	}
	return nil
}

// validateDurations checks each duration against its range; zero is
// allowed only where zeroOK (it means "off" or "none" there). The
// registrations' own are checked by their option.Within.
func (c *Config) validateDurations(src sources) error {
	for _, d := range []struct {
		key      string
		d        time.Duration
		min, max time.Duration
		zeroOK   bool
	}{
		{"interval", c.Interval, 100 * time.Millisecond, maxDuration, false},
		{"fast-interval", c.FastInterval, 10 * time.Millisecond, maxDuration, true},
		{"collect-timeout", c.CollectTimeout, 10 * time.Millisecond, 10 * time.Minute, false},
		{"window", c.Window, 0, time.Hour, true},
		{"flush-timeout", c.FlushTimeout, 0, maxDuration, true},
		{"start-timeout", c.StartTimeout, 100 * time.Millisecond, maxStartTimeout, false},
		{"kill-after", c.KillAfter, 0, maxDuration, true},
		{"spool-sync", c.SpoolSync, 0, maxSpoolSync, true},
		{"job-settle", c.JobSettle, 100 * time.Millisecond, time.Minute, false},
	} {
		if _, err := option.Within(d.min, d.max, d.zeroOK)(d.d); err != nil {
			return src.bad(d.key, d.d, err.Error())
		}
	}
	return nil
}

// validateBounds checks the numbers that are not durations.
func (c *Config) validateBounds(src sources) error {
	switch {
	case math.IsNaN(c.FastThreshold) || c.FastThreshold <= 0 || c.FastThreshold > 100:
		return src.bad("fast-threshold", c.FastThreshold, "must be a percentage in (0, 100]")
	case c.SpoolMaxSize != 0 && c.SpoolMaxSize < MinSpoolMaxSize:
		return src.bad("spool-max-size", c.SpoolMaxSize, fmt.Sprintf("must be 0 (no cap) or at least %s", ByteSize(MinSpoolMaxSize)))
	}
	return nil
}

// validateLists cleans and checks the list settings (and the log level):
// --scopes and --trackers against what the registrations offer (ch).
func (c *Config) validateLists(src sources, ch Choices) error {
	var err error
	if c.Scopes, err = list(c.Scopes, ch.Scopes, "scopes", src); err != nil {
		return err
	}
	if len(c.Scopes) == 0 {
		return src.bad("scopes", "", "name at least one scope")
	}
	if c.Trackers, err = list(c.Trackers, ch.trackers(), "trackers", src); err != nil {
		return err
	}
	if len(c.Trackers) == 0 {
		c.Trackers = []string{"auto"}
	}
	if len(c.Trackers) > 1 && (slices.Contains(c.Trackers, "none") || slices.Contains(c.Trackers, "auto")) {
		return src.bad("trackers", strings.Join(c.Trackers, ","), `"auto" and "none" cannot be combined with other trackers`)
	}
	c.LogLevel = strings.ToLower(strings.TrimSpace(c.LogLevel))
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.LogLevel) {
		return src.bad("log-level", c.LogLevel, "must be debug, info, warn or error")
	}
	return nil
}

// validateJob checks the multi-node job's settings and records where each
// one given came from (JobKeyFrom, NodeIDFrom, NodesFrom).
func (c *Config) validateJob(src sources) error {
	switch {
	case c.NodeID != "" && !jobkey.ValidNodeID(c.NodeID):
		return src.bad("node-id", c.NodeID, jobkey.NodeIDRule)
	case c.JobKey != "" && !strings.EqualFold(c.JobKey, jobkey.None) && !jobkey.ValidKey(c.JobKey):
		return src.bad("job-key", c.JobKey, jobkey.KeyRule+`, or "none"`)
	case c.Nodes < 0 || c.Nodes > MaxNodes:
		return src.bad("nodes", c.Nodes, fmt.Sprintf("must be a whole number from 1 to %d (0: from the launcher)", MaxNodes))
	}
	for _, k := range []struct {
		key  string
		val  string
		from *string
	}{{"job-key", c.JobKey, &c.JobKeyFrom}, {"node-id", c.NodeID, &c.NodeIDFrom}, {"nodes", fmt.Sprint(c.Nodes), &c.NodesFrom}} {
		if k.val != "" && k.val != "0" {
			*k.from = strings.TrimSuffix(src.name(k.key), " (default)")
		}
	}
	return nil
}

// validatePaths checks the run name, the spool's path and the roots.
func (c *Config) validatePaths(src sources) error {
	if len(c.RunName) > 250 || strings.ContainsFunc(c.RunName, isControl) {
		return src.bad("run-name", c.RunName, "must be at most 250 characters without control characters")
	}
	if strings.ContainsFunc(c.Spool, isControl) || strings.ContainsRune(c.Spool, 0) {
		return src.bad("spool", c.Spool, "must be a file path without control characters")
	}
	if c.Spool != "" {
		if st, e := statWithin(c.Spool, 2*time.Second); e == nil && st.IsDir() {
			return src.bad("spool", c.Spool, "is a directory; name a file")
		}
	}
	for _, p := range []struct {
		key string
		dir string
	}{{"proc-root", c.ProcRoot}, {"cgroup-root", c.CgroupRoot}, {"rootfs", c.Rootfs}, {"sys-root", c.SysRoot}} {
		if st, e := os.Stat(p.dir); p.dir == "" || e != nil || !st.IsDir() {
			return src.bad(p.key, p.dir, "not a directory")
		}
	}
	return nil
}

// statWithin is os.Stat that gives up after d: a spool on a hung network
// mount must not hold the job back here (its open is bounded too, and
// says what happened).
func statWithin(path string, d time.Duration) (os.FileInfo, error) {
	type stat struct {
		fi  os.FileInfo
		err error
	}
	done := make(chan stat, 1)
	go func() {
		fi, err := os.Stat(path)
		done <- stat{fi, err}
	}()
	select {
	case s := <-done:
		return s.fi, s.err
	case <-time.After(d):
		return nil, fmt.Errorf("stat %s: no answer in %v", path, d)
	}
}

// list cleans a list setting (option.List), naming key when it is refused.
func list(in, allowed []string, key string, src sources) ([]string, error) {
	out, err := option.List(in, allowed)
	if err != nil {
		return nil, src.bad(key, strings.Join(in, ","), err.Error())
	}
	return out, nil
}

func isControl(r rune) bool { return option.IsControl(r) }

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
