package metrics

import (
	"math"
	"strconv"
	"strings"
)

// Unit is what a series' values count, as the end of its name says
// (megabytes, percentage, cores, ...).
type Unit string

// Units.
const (
	UnitMegabytes          Unit = "megabytes" // 10^6 bytes, as MLflow
	UnitMegabytesPerSecond Unit = "megabytes_per_second"
	UnitPercentage         Unit = "percentage"
	UnitCores              Unit = "cores"
	UnitSeconds            Unit = "seconds"
	UnitHours              Unit = "hours" // a device's time, for a job's figure (GPU-hours)
	UnitCount              Unit = "count"
	UnitRatio              Unit = "ratio"
	UnitWatts              Unit = "watts"
	UnitJoules             Unit = "joules"
	UnitCelsius            Unit = "celsius"
	UnitMHz                Unit = "mhz"
	UnitLoad               Unit = "load"
)

// Megabyte is the unit of every _megabytes metric (decimal, as MLflow).
const Megabyte = 1e6

// MB converts a byte count to UnitMegabytes.
func MB(bytes float64) float64 { return bytes / Megabyte }

// Base converts v from u to the base unit /metrics exposes it in, as
// Prometheus names units: bytes for megabytes, bytes per second for
// megabytes per second; other units are already base units. Megabytes
// become bytes exactly: collectors compute MB as bytes/1e6 from an integer
// byte count, and for any count below 2^51 (2 PB) rounding the product back
// to the nearest integer recovers that count, since the two roundings err
// by at most 2^-52 relatively, less than half a byte.
func (u Unit) Base(v float64) float64 {
	switch u {
	case UnitMegabytes:
		return math.Round(v * Megabyte)
	case UnitMegabytesPerSecond:
		return v * Megabyte
	}
	return v
}

// Scaled reports whether Base changes the value: such a series needs an
// exposition name of its own (Desc.Prom) that names the base unit.
func (u Unit) Scaled() bool { return u == UnitMegabytes || u == UnitMegabytesPerSecond }

// Range is the values a series can take, Min <= v <= Max: what the
// quantity allows physically (a share from 0 to 100, a size or an energy
// not negative, a temperature above absolute zero). Each bound is finite
// and wide enough never to refuse a real reading; finite, so that sums and
// products of valid values (a mean, a total over GPUs, a rounding) stay
// finite too. The zero Range stands for the unit's (Unit.Range).
type Range struct{ Min, Max float64 }

// Holds reports whether v is within r. NaN and the infinities never are.
func (r Range) Holds(v float64) bool { return v >= r.Min && v <= r.Max }

// Bounds of the units' ranges: past any one node, so that only a broken
// reading (a driver's all-ones, an exporter's 1e306) is refused.
const (
	maxMegabytes        = 1e15 // a zettabyte: more than any node holds, or moves in years
	maxMegabytesPerSec  = 1e8  // 100 TB/s: past any link or memory bus of a node
	maxCores            = 1e6  // CPUs of a node, with room
	maxSeconds          = 1e13 // CPU seconds: a million cores for 300 years
	maxCount            = math.MaxUint64
	maxWatts            = 1e6 // a megawatt: no node, let alone one device
	maxJoules           = 1e15
	absoluteZero        = -273.15
	maxCelsius          = 200 // every chip has shut down well below; solder melts near 220 °C
	maxMHz              = 1e5 // 100 GHz
	maxLoad             = 1e7 // runnable tasks: more than pid_max allows
	unboundedMagnitudes = math.MaxFloat64
)

// Range is the unit's range, for the series that declare none: a
// percentage 0 to 100, a ratio 0 to 1, a temperature from absolute zero to
// 200 °C, every other unit not negative and below a bound past any node; a
// series without a unit (passed through from --scrape) any finite value.
func (u Unit) Range() Range {
	switch u {
	case UnitPercentage:
		return Range{0, 100}
	case UnitRatio:
		return Range{0, 1}
	case UnitCelsius:
		return Range{absoluteZero, maxCelsius}
	case UnitMegabytes:
		return Range{0, maxMegabytes}
	case UnitMegabytesPerSecond:
		return Range{0, maxMegabytesPerSec}
	case UnitCores:
		return Range{0, maxCores}
	case UnitSeconds:
		return Range{0, maxSeconds}
	case UnitHours:
		return Range{0, maxSeconds / 3600}
	case UnitCount:
		return Range{0, maxCount}
	case UnitWatts:
		return Range{0, maxWatts}
	case UnitJoules:
		return Range{0, maxJoules}
	case UnitMHz:
		return Range{0, maxMHz}
	case UnitLoad:
		return Range{0, maxLoad}
	}
	return Range{-unboundedMagnitudes, unboundedMagnitudes}
}

// Kind is how /metrics types a series.
type Kind uint8

// Kinds.
const (
	Gauge   Kind = iota // a value that goes up and down (most series)
	Counter             // a running total that only grows (Prometheus rates it)
)

// Desc describes one series, once, for every place that shows it: the key
// the trackers and the spool get (Name), `bridge sample`'s table and
// docs/metrics.md (Name, Unit, Scope), and /metrics (Prom, Kind, Help,
// Unit.Base). A collector adds a value against a Desc (Batch.Add); nothing
// downstream parses a name to learn what a series is.
//
// Most descriptors are static, declared once, in the package of the
// collector that makes them (series.go holds those several collectors
// share). Three kinds are made at run time, each modelled, not
// parsed: per-GPU series (a PerGPU template, bound to one GPU or MIG slice
// by ForGPU or ForMIG), per-instance series of a node's devices (an
// Instance template, bound to one InfiniBand port or CPU package by For),
// and series passed through from a --scrape endpoint (Passthrough). A Desc
// is never changed once made; it may be shared by any number of
// goroutines.
type Desc struct {
	// Name is the key sent to the trackers (MLflow "system/<Name>", W&B
	// "system.<Name>") and written to the spool: the scope first, the
	// unit last. For a PerGPU template it is the part after gpu_N_ (or
	// gpu_N_mig_M_).
	Name  string
	Unit  Unit
	Scope Scope
	Kind  Kind
	// Help is the one-line description /metrics serves.
	Help string
	// Steady marks a series that keeps its value for long stretches by
	// nature (a limit, a capacity, a count of rare events): a tracker that
	// pays per point may send it only when it changes, at least once a
	// minute, and at the run's start and end (tracker/mlflow, steady.go).
	// The spool and /metrics get it every sample.
	Steady bool
	// Prom is the /metrics name: cAdvisor's or node-exporter's where they
	// have the series, so that their dashboards read bridge unchanged;
	// else "" for bridge_<Name>, which a series whose Unit is Scaled may
	// not use (its name must say the base unit). For a PerGPU template it
	// is the part after bridge_gpu_ (bridge_gpu_mig_), "" for Name.
	Prom string
	// Valid is the range of the series' values when it is not its unit's
	// (Range): declared where the series is, with why. A value outside is
	// never sent (the Sampler's check).
	Valid Range
	// Total is the series this one is a part of (memory used names memory
	// total): a value above the total's in the same collector's points of
	// the same sample is never sent. Bound with the series (ForGPU, For).
	Total *Desc

	// PerGPU marks a template: it is sent only bound to a GPU or a MIG
	// slice (ForGPU, ForMIG), never as it is.
	PerGPU bool
	// Of is the template a bound descriptor was made from; nil otherwise.
	Of *Desc
	// GPU and MIG are a bound descriptor's GPU index and MIG slice (-1:
	// the whole GPU); unused when Of is nil or not PerGPU.
	GPU, MIG int

	// Instance marks a template of one series per instance of a node's
	// device (an InfiniBand port, a CPU package): it names the labels that
	// tell the instances apart, and Name holds "<label>" for each, in this
	// order. It is sent only bound to an instance (For). Prom names the
	// whole family (it may not be ""); the labels go on /metrics.
	Instance []string
	// Labels are a series bound by For: its Instance labels and their
	// values, name then value, in Instance's order. Nil otherwise.
	Labels []string
}

// Range is the range of d's values: Valid, else its unit's.
func (d *Desc) Range() Range {
	if d.Valid != (Range{}) {
		return d.Valid
	}
	return d.Unit.Range()
}

// PromName is the name /metrics exposes d under.
func (d *Desc) PromName() string {
	if d.Prom != "" {
		return d.Prom
	}
	return "bridge_" + d.Name
}

// ForGPU binds template d to GPU i: gpu_<i>_<d.Name>, exposed as
// bridge_gpu_<d.Prom> with a gpu label. A collector binds each template
// once per GPU and keeps the result (the name is built here, not for every
// sample).
func (d *Desc) ForGPU(i int) *Desc { return d.bind(i, -1, "bridge_gpu_") }

// ForMIG binds template d to MIG slice m of GPU i: gpu_<i>_mig_<m>_<d.Name>,
// exposed as bridge_gpu_mig_<d.Prom> with gpu and mig labels.
func (d *Desc) ForMIG(i, m int) *Desc { return d.bind(i, m, "bridge_gpu_mig_") }

func (d *Desc) bind(gpu, mig int, promPrefix string) *Desc {
	if !d.PerGPU {
		panic("metrics: " + d.Name + " is not a per-GPU template")
	}
	tail := d.Prom
	if tail == "" {
		tail = d.Name
	}
	b := *d
	b.Name, b.Prom = GPUName(gpu, mig, d.Name), promPrefix+tail
	b.PerGPU, b.Of, b.GPU, b.MIG = false, d, gpu, mig
	if d.Total != nil {
		b.Total = d.Total.bind(gpu, mig, promPrefix)
	}
	return &b
}

// For binds Instance template d to the instance whose labels have these
// values (one per label, in Instance's order): "<label>" in the name
// becomes the value with every character other than a letter, a digit or
// "_" made "_" (a key every tracker takes), and /metrics gets the value as
// it is, under the label. A collector binds each template once per
// instance, when it finds the instance, and keeps the result.
func (d *Desc) For(values ...string) *Desc {
	if len(d.Instance) == 0 || len(values) != len(d.Instance) {
		panic("metrics: " + d.Name + " is not a template of " + strconv.Itoa(len(values)) + " labels")
	}
	b := *d
	b.Instance, b.Of, b.Labels = nil, d, make([]string, 0, 2*len(values))
	for i, l := range d.Instance {
		b.Name = strings.ReplaceAll(b.Name, "<"+l+">", KeyPart(values[i]))
		b.Labels = append(b.Labels, l, values[i])
	}
	if d.Total != nil {
		b.Total = d.Total.For(values...)
	}
	return &b
}

// KeyPart is s as a part of a series key: every character other than an
// ASCII letter, a digit or "_" becomes "_", so that a device name the
// kernel chose (mlx5_0, ibp12s0f1, rocep1s0f0) makes a key MLflow, W&B and
// Prometheus all take.
func KeyPart(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, s)
}

// GPUName is the key of the per-GPU series name of GPU gpu (mig >= 0: of
// its MIG slice mig): gpu_<gpu>_<name>, gpu_<gpu>_mig_<mig>_<name>. The
// bound descriptors' names are made by it; a collector that must know a
// key before it binds one (to bound the keys it adds) uses it too.
func GPUName(gpu, mig int, name string) string {
	if mig < 0 {
		return "gpu_" + strconv.Itoa(gpu) + "_" + name
	}
	return "gpu_" + strconv.Itoa(gpu) + "_mig_" + strconv.Itoa(mig) + "_" + name
}

// Passthrough describes a series read from a --scrape endpoint that bridge
// does not map: name is its key (prom_<name>[__<label>_<value>...]), and
// it is exposed as bridge_<name>, a gauge without a unit.
func Passthrough(name string) *Desc {
	return &Desc{Name: name, Scope: ScopeProm,
		Help: "A series passed through from a --scrape endpoint (docs/prometheus.md)."}
}

// Index finds the descriptor of a series known only by its key (a
// tracker's history, a sample read back from a spool), among the
// descriptors it was made of: the one place a key is read back to what
// made it, beside the functions that make keys (ForGPU, ForMIG, For).
// Safe for concurrent use.
type Index struct {
	static    map[string]*Desc // by Name
	perGPU    map[string]*Desc // per-GPU templates, by Name
	instances []*Desc          // Instance templates
}

// NewIndex is the Index of ds: descriptors, per-GPU templates and
// Instance templates.
func NewIndex(ds ...*Desc) *Index {
	x := &Index{static: map[string]*Desc{}, perGPU: map[string]*Desc{}}
	for _, d := range ds {
		switch {
		case d.PerGPU:
			x.perGPU[d.Name] = d
		case len(d.Instance) > 0:
			x.instances = append(x.instances, d)
		default:
			x.static[d.Name] = d
		}
	}
	return x
}

// Lookup returns the descriptor of the series whose key is key: a
// descriptor of the index by its Name; a per-GPU template bound to the GPU
// or MIG slice the key names (gpu_<i>_<name>, gpu_<i>_mig_<m>_<name>:
// ForGPU, ForMIG); an Instance template bound to the values the key holds
// where the template has its labels (For), each as the key spells it. ok
// is false when the key is none of them.
func (x *Index) Lookup(key string) (d *Desc, ok bool) {
	if d, ok := x.static[key]; ok {
		return d, true
	}
	if gpu, mig, name, ok := parseGPUName(key); ok {
		if t, ok := x.perGPU[name]; ok {
			if mig < 0 {
				return t.ForGPU(gpu), true
			}
			return t.ForMIG(gpu, mig), true
		}
	}
	for _, t := range x.instances {
		if values, ok := instanceValues(t, key); ok {
			return t.For(values...), true
		}
	}
	return nil, false
}

// parseGPUName is GPUName read back: the GPU, the MIG slice (-1: the whole
// GPU) and the template's name of key.
func parseGPUName(key string) (gpu, mig int, name string, ok bool) {
	rest, ok := strings.CutPrefix(key, "gpu_")
	if !ok {
		return 0, 0, "", false
	}
	gpu, rest, ok = leadingIndex(rest)
	if !ok {
		return 0, 0, "", false
	}
	mig = -1
	if after, isMIG := strings.CutPrefix(rest, "mig_"); isMIG {
		if m, tail, ok := leadingIndex(after); ok {
			mig, rest = m, tail
		}
	}
	return gpu, mig, rest, rest != ""
}

// leadingIndex reads "<digits>_" at the start of s: the number, and what
// follows the "_".
func leadingIndex(s string) (n int, rest string, ok bool) {
	digits, rest, ok := strings.Cut(s, "_")
	if !ok || digits == "" || len(digits) > 9 {
		return 0, "", false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 || strconv.Itoa(n) != digits {
		return 0, "", false
	}
	return n, rest, true
}

// instanceValues reads key as template t's name with a value (not empty)
// in the place of each <label>: the values, in t.Instance's order.
func instanceValues(t *Desc, key string) ([]string, bool) {
	// The literal parts of t's name around its placeholders, in order.
	lits := []string{t.Name}
	for _, l := range t.Instance {
		last := lits[len(lits)-1]
		before, after, ok := strings.Cut(last, "<"+l+">")
		if !ok {
			return nil, false
		}
		lits = append(lits[:len(lits)-1], before, after)
	}
	rest, ok := strings.CutPrefix(key, lits[0])
	if !ok {
		return nil, false
	}
	rest, ok = strings.CutSuffix(rest, lits[len(lits)-1])
	if !ok {
		return nil, false
	}
	values := make([]string, 0, len(t.Instance))
	for _, lit := range lits[1 : len(lits)-1] {
		v, tail, ok := strings.Cut(rest, lit)
		if !ok || v == "" {
			return nil, false
		}
		values, rest = append(values, v), tail
	}
	if rest == "" {
		return nil, false
	}
	return append(values, rest), true
}
