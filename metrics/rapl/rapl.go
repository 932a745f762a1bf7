// Package rapl reads the energy the node's CPU packages use, from their RAPL
// (Running Average Power Limit) counters under <sys>/class/powercap: Intel
// since Sandy Bridge, AMD since Zen (the same intel-rapl zones).
//
// RAPL measures a whole package, every core and the uncore, whoever runs on
// it: the series are node_. Only package zones (intel-rapl:N, named
// package-P, or package-P-die-D on a package of several dies, whose dies
// are summed) are read. Their subzones (core, uncore, dram) cover parts of
// the package or sit beside it and are not added to it; intel-rapl-mmio:N
// mirrors package N and psys the platform: neither is read.
//
// The zones are found once, by New, as prometheus/procfs's GetRaplZones
// finds them (each directory with a name file) but through the bounded
// reader (internal/kfile), and named by the kernel's pattern, not procfs's
// split at one dash (which drops package-P-die-D); a node without them
// gets no collector at all, so it pays nothing per sample.
// Each sample reads one file per zone, energy_uj, a counter in µJ that
// wraps at max_energy_range_uj, followed by the one counter rule
// (metrics/internal/counter): a step back is a wrap only near that
// maximum, and no package draws more than MaxPackageWatts.
package rapl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/internal/counter"
)

// Name is the collector's name in `bridge sample` and the registrations.
const Name = "rapl"

// errUnavailable says that this machine has no package zone bridge can read:
// no powercap class, no RAPL driver, or energy_uj readable by root only.
var errUnavailable = errors.New("no readable RAPL package zone")

// MaxPackageWatts is the stated physical bound of one CPU package's power:
// twice the largest package's TDP today (500 W). A growth of its energy
// counter faster than this is a glitch, and no step back further than one
// interval at this power from the counter's maximum is a wrap.
const MaxPackageWatts = 1000

// Options configure a Collector.
type Options struct {
	// Context bounds New's reads (a Build's deadline); nil: none but
	// kfile's own.
	Context context.Context
	// SysRoot is where sysfs is mounted; "" means /sys.
	SysRoot string
	// Log receives notes (a counter that went back without a known range);
	// nil discards them.
	Log *slog.Logger
	// Now is the clock the power is computed with; nil means time.Now.
	Now func() time.Time
}

// zone is one top-level zone, a package's or one die's, and what Collect
// keeps of it.
type zone struct {
	die  int             // the D of package-P-die-D; -1 for a whole package
	path string          // its energy_uj
	c    counter.Counter // energy_uj in µJ, wrapping at max_energy_range_uj
}

// cpuPackage is one CPU package: its zone, or its dies' zones, summed.
type cpuPackage struct {
	pkg    int     // the P of package-P
	zones  []*zone // by die
	src    string  // the source of its series: its zones' energy_uj
	power  *metrics.Desc
	energy *metrics.Desc
}

// Collector reads the package zones New found.
//
// Contract: as metrics.Collector and metrics.Closer. Detect reads only what
// New found; Close drops the reader's records (it keeps no descriptor: sysfs
// files are opened on each read).
type Collector struct {
	sysRoot string
	allSrc  string // the source of the node's sums
	pkgs    []*cpuPackage
	files   *kfile.Reader[string]
	now     func() time.Time
	log     *slog.Logger
	buf     []byte

	mu     sync.Mutex
	noted  map[string]bool // notes already logged, by kind and zone path
	detect map[string]any
}

// packageZone matches a top-level RAPL zone directory: not a subzone
// (intel-rapl:0:1) nor the MMIO mirror (intel-rapl-mmio:0).
var packageZone = regexp.MustCompile(`^intel-rapl:[0-9]+$`)

// packageName matches a package zone's name: package-P, or package-P-die-D
// where the package has several dies (intel_rapl_common.c names a zone per
// die then, each with its own counter).
var packageName = regexp.MustCompile(`^package-([0-9]+)(?:-die-([0-9]+))?$`)

// New finds the package zones under opts.SysRoot. It returns an error
// wrapping errUnavailable when there is none to read: the collector is then
// off on this machine (no powercap class, a kernel without RAPL, or an
// energy_uj that only root may read).
func New(opts Options) (*Collector, error) {
	if opts.SysRoot == "" {
		opts.SysRoot = "/sys"
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	classDir := filepath.Join(opts.SysRoot, "class/powercap")
	all, err := findZones(opts.Context, classDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no %s (no powercap driver on this machine)", errUnavailable, classDir)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: listing the zones of %s: %w", errUnavailable, classDir, err)
	}
	c := &Collector{sysRoot: opts.SysRoot, allSrc: filepath.Join(classDir, "intel-rapl:*/energy_uj"), now: opts.Now, log: opts.Log.With("source", Name), noted: map[string]bool{},
		files: kfile.NewPathReader(kfile.Options{Size: 64})}
	var denied error
	var broken []error // zones whose files are no regular files of one value
	byPkg := map[int]*cpuPackage{}
	for _, z := range all {
		if z.err != nil {
			broken = append(broken, z.err)
			continue
		}
		m := packageName.FindStringSubmatch(z.name)
		if m == nil || !packageZone.MatchString(filepath.Base(z.dir)) {
			continue
		}
		p := filepath.Join(z.dir, "energy_uj")
		// One read now: a counter that only root may read is no collector.
		if _, err := c.read(p); errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EPERM) {
			denied = fmt.Errorf("reading %s: %w", p, err)
			continue
		} else if kfile.IsAbsent(err) {
			continue
		} else if err != nil {
			broken = append(broken, fmt.Errorf("reading %s: %w", p, err))
			continue
		}
		n, _ := strconv.Atoi(m[1])
		die := -1
		if m[2] != "" {
			die, _ = strconv.Atoi(m[2])
		}
		pk := byPkg[n]
		if pk == nil {
			pk = &cpuPackage{pkg: n}
			byPkg[n] = pk
		}
		if slices.ContainsFunc(pk.zones, func(o *zone) bool { return o.die == die || (o.die < 0) != (die < 0) }) {
			broken = append(broken, fmt.Errorf("%s: a second zone for package %d (%s); left out", z.dir, n, z.name))
			continue
		}
		pk.zones = append(pk.zones, &zone{die: die, path: p, c: counter.Counter{Max: z.max, MaxRate: MaxPackageWatts * 1e6}})
	}
	for _, pk := range byPkg {
		sort.Slice(pk.zones, func(i, j int) bool { return pk.zones[i].die < pk.zones[j].die })
		var paths []string
		for _, z := range pk.zones {
			paths = append(paths, z.path)
		}
		name := strconv.Itoa(pk.pkg)
		pk.src, pk.power, pk.energy = strings.Join(paths, " + "), PackagePower.For(name), PackageEnergy.For(name)
		c.pkgs = append(c.pkgs, pk)
	}
	sort.Slice(c.pkgs, func(i, j int) bool { return c.pkgs[i].pkg < c.pkgs[j].pkg })
	switch {
	case len(c.pkgs) > 0:
		if len(broken) > 0 {
			c.log.Warn("RAPL zones unreadable; left out, the others are read", "err", errors.Join(broken...))
		}
	case denied != nil:
		return nil, fmt.Errorf("%w: %w (energy_uj is readable by root only since Linux 5.10, CVE-2020-8694; a user namespace's root is not enough)", errUnavailable, denied)
	case len(broken) > 0:
		return nil, fmt.Errorf("%w: %w", errUnavailable, errors.Join(broken...))
	default:
		return nil, fmt.Errorf("%w: no package zone (intel-rapl:N named package-P or package-P-die-D) in %s", errUnavailable, classDir)
	}
	pkgs := make([]map[string]any, 0, len(c.pkgs))
	for _, pk := range c.pkgs {
		if z := pk.zones[0]; z.die < 0 {
			pkgs = append(pkgs, map[string]any{"package": pk.pkg, "energy_uj": z.path, "max_energy_range_uj": z.c.Max})
			continue
		}
		dies := make([]map[string]any, 0, len(pk.zones))
		for _, z := range pk.zones {
			dies = append(dies, map[string]any{"die": z.die, "energy_uj": z.path, "max_energy_range_uj": z.c.Max})
		}
		pkgs = append(pkgs, map[string]any{"package": pk.pkg, "dies": dies})
	}
	c.detect = map[string]any{"sys_root": opts.SysRoot, "packages": pkgs}
	return c, nil
}

// foundZone is one zone directory of the powercap class: its name
// (package-0, core, psys, ...) and its counter's range; err when one of
// them could not be read.
type foundZone struct {
	dir  string
	name string
	max  uint64
	err  error
}

// findZones lists the zones of classDir: each directory with a name file
// (a zone; the others are the class's own files), with its name and its
// max_energy_range_uj. A name or a range that is no regular file of one
// short value (a FIFO, /dev/zero) is that zone's err, not a wait and not
// an endless read.
func findZones(ctx context.Context, classDir string) ([]foundZone, error) {
	ents, err := kfile.ReadDir(ctx, classDir, kfile.Entries)
	if err != nil {
		return nil, err
	}
	var out []foundZone
	for _, e := range ents {
		dir := filepath.Join(classDir, e.Name)
		raw, err := kfile.ReadFile(ctx, filepath.Join(dir, "name"), kfile.Value)
		switch {
		case errors.Is(err, kfile.ErrNoAnswer):
			return nil, err
		case kfile.IsAbsent(err) || errors.Is(err, syscall.ENOTDIR):
			continue // not a zone
		case err != nil:
			out = append(out, foundZone{dir: dir, err: fmt.Errorf("reading %s: %w", filepath.Join(dir, "name"), err)})
			continue
		}
		z := foundZone{dir: dir, name: strings.TrimSpace(string(raw))}
		rangePath := filepath.Join(dir, "max_energy_range_uj")
		raw, err = kfile.ReadFile(ctx, rangePath, kfile.Value)
		if err == nil {
			var ok bool
			if z.max, ok = kfile.Uint(raw); !ok {
				err = fmt.Errorf("want a count of microjoules, got %q", strings.TrimSpace(string(raw)))
			}
		}
		if errors.Is(err, kfile.ErrNoAnswer) {
			return nil, err
		}
		if err != nil {
			z.err = fmt.Errorf("reading %s: %w", rangePath, err)
		}
		out = append(out, z)
	}
	return out, nil
}

// Name implements metrics.Collector.
func (c *Collector) Name() string { return Name }

// Detect implements metrics.Detector: the package zones read.
func (c *Collector) Detect(context.Context) map[string]any { return c.detect }

// Close implements metrics.Closer.
func (c *Collector) Close() error { return c.files.Close() }

func (c *Collector) read(path string) ([]byte, error) {
	var err error
	c.buf, err = c.files.Read(path, c.buf)
	return c.buf, err
}

// Collect reads every zone's counter. Energy and power need two readings;
// a package's are given only in a sample where each of its dies was
// counted, and the node's totals only where every package was (else they
// would count a die or a package short).
func (c *Collector) Collect(ctx context.Context, b *metrics.Batch) error {
	var errs []error
	var power, energy float64
	all := true
	for _, pk := range c.pkgs {
		var pw, en float64
		whole := true
		for _, z := range pk.zones {
			if err := ctx.Err(); err != nil {
				return errors.Join(append(errs, err)...)
			}
			rate, ok, err := c.update(pk, z)
			if err != nil {
				errs = append(errs, err)
			}
			if !ok {
				whole = false
				continue
			}
			pw += rate / 1e6
			en += z.c.Total / 1e6
		}
		if !whole {
			all = false
			continue
		}
		b.Add(pk.power, pw, pk.src)
		b.Add(pk.energy, en, pk.src)
		power += pw
		energy += en
	}
	if all && len(c.pkgs) > 0 {
		b.Add(Power, power, c.allSrc)
		b.Add(metrics.NodeCPUEnergy, energy, c.allSrc)
	}
	return errors.Join(errs...)
}

// update reads zone z of package pk and follows its counter: ok when the
// interval since the previous reading was counted, with its rate in µJ/s.
func (c *Collector) update(pk *cpuPackage, z *zone) (rate float64, ok bool, err error) {
	raw, err := c.read(z.path)
	var v uint64
	if err == nil {
		v, err = parseMicrojoules(raw)
	}
	now := c.now()
	if err != nil {
		if kfile.IsAbsent(err) { // the zone went away (driver unloaded): no data
			c.noteOnce(z.path, "absent", err.Error())
			return 0, false, nil
		}
		what := "CPU package " + strconv.Itoa(pk.pkg)
		if z.die >= 0 {
			what += " die " + strconv.Itoa(z.die)
		}
		return 0, false, fmt.Errorf("reading %s energy from %s: %w", what, z.path, err)
	}
	st := z.c.Update(v, now)
	if why := st.Why(v, &z.c); why != "" {
		c.noteOnce(z.path, "skip", why)
	}
	return st.Rate(), st.Counted(), nil
}

// noteOnce logs, once per zone and kind, an interval the counter rule did
// not count ("skip": a step back that is no wrap, a growth too fast) or a
// zone gone since start ("absent").
func (c *Collector) noteOnce(path, kind, why string) {
	c.mu.Lock()
	first := !c.noted[kind+" "+path]
	c.noted[kind+" "+path] = true
	c.mu.Unlock()
	switch {
	case !first:
	case kind == "absent":
		c.log.Debug("RAPL zone gone since start; its package is left out", "path", path, "err", why)
	default:
		c.log.Warn("RAPL energy counter: an interval not counted (said once a package)", "path", path, "why", why)
	}
}

// parseMicrojoules parses the content of energy_uj.
func parseMicrojoules(b []byte) (uint64, error) {
	v, ok := kfile.Uint(b)
	if !ok {
		return 0, fmt.Errorf("want a count of microjoules, got %q", strings.TrimSpace(string(b)))
	}
	return v, nil
}
