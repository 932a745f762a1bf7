// Package rapl reads the energy the node's CPU packages use, from their RAPL
// (Running Average Power Limit) counters under <sys>/class/powercap: Intel
// since Sandy Bridge, AMD since Zen (the same intel-rapl zones).
//
// RAPL measures a whole package, every core and the uncore, whoever runs on
// it: the series are node_. Only package zones (intel-rapl:N, named
// package-N) are read. Their subzones (core, uncore, dram) cover parts of
// the package or sit beside it and are not added to it; intel-rapl-mmio:N
// mirrors package N and psys the platform: neither is read.
//
// The zones are found once, by New, as prometheus/procfs's GetRaplZones
// finds them but through the bounded reader (internal/kfile); a node
// without them gets no collector at all, so it pays nothing per sample.
// Each sample reads one file per package, energy_uj, a counter in µJ that
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

// ErrUnavailable says that this machine has no package zone bridge can read:
// no powercap class, no RAPL driver, or energy_uj readable by root only.
var ErrUnavailable = errors.New("no readable RAPL package zone")

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

// zone is one package zone and what Collect keeps of it.
type zone struct {
	pkg    int    // the N of package-N
	path   string // its energy_uj
	power  *metrics.Desc
	energy *metrics.Desc
	c      counter.Counter // energy_uj in µJ, wrapping at max_energy_range_uj
}

// Collector reads the package zones New found.
//
// Contract: as metrics.Collector and metrics.Closer. Detect reads only what
// New found; Close drops the reader's records (it keeps no descriptor: sysfs
// files are opened on each read).
type Collector struct {
	sysRoot string
	allSrc  string // the source of the node's sums
	zones   []*zone
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

// New finds the package zones under opts.SysRoot. It returns an error
// wrapping ErrUnavailable when there is none to read: the collector is then
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
		return nil, fmt.Errorf("%w: no %s (no powercap driver on this machine)", ErrUnavailable, classDir)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: listing the zones of %s: %w", ErrUnavailable, classDir, err)
	}
	c := &Collector{sysRoot: opts.SysRoot, allSrc: filepath.Join(classDir, "intel-rapl:*/energy_uj"), now: opts.Now, log: opts.Log.With("source", Name), noted: map[string]bool{},
		files: kfile.NewPathReader(kfile.Options{Size: 64})}
	var denied error
	var broken []error // zones whose files are no regular files of one value
	for _, z := range all {
		if z.err != nil {
			broken = append(broken, z.err)
			continue
		}
		if z.name != "package" || !packageZone.MatchString(filepath.Base(z.dir)) {
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
		pkg := strconv.Itoa(z.index)
		c.zones = append(c.zones, &zone{pkg: z.index, path: p, c: counter.Counter{Max: z.max, MaxRate: MaxPackageWatts * 1e6},
			power: PackagePower.For(pkg), energy: PackageEnergy.For(pkg)})
	}
	sort.Slice(c.zones, func(i, j int) bool { return c.zones[i].pkg < c.zones[j].pkg })
	switch {
	case len(c.zones) > 0:
		if len(broken) > 0 {
			c.log.Warn("RAPL zones unreadable; left out, the others are read", "err", errors.Join(broken...))
		}
	case denied != nil:
		return nil, fmt.Errorf("%w: %w (energy_uj is readable by root only since Linux 5.10, CVE-2020-8694; a user namespace's root is not enough)", ErrUnavailable, denied)
	case len(broken) > 0:
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, errors.Join(broken...))
	default:
		return nil, fmt.Errorf("%w: no package zone (intel-rapl:N named package-N) in %s", ErrUnavailable, classDir)
	}
	zs := make([]map[string]any, 0, len(c.zones))
	for _, z := range c.zones {
		zs = append(zs, map[string]any{"package": z.pkg, "energy_uj": z.path, "max_energy_range_uj": z.c.Max})
	}
	c.detect = map[string]any{"sys_root": opts.SysRoot, "packages": zs}
	return c, nil
}

// foundZone is one zone directory of the powercap class, as procfs's
// RaplZone: its name ("package" for package-N), the index the name
// carries, its counter's range; err when one of them could not be read.
type foundZone struct {
	dir   string
	name  string
	index int
	max   uint64
	err   error
}

// findZones lists the zones of classDir: each directory with a name file
// (a zone; the others are the class's own files), its name split as
// procfs's getIndexAndName does, and its max_energy_range_uj. A name or a
// range that is no regular file of one short value (a FIFO, /dev/zero) is
// that zone's err, not a wait and not an endless read.
func findZones(ctx context.Context, classDir string) ([]foundZone, error) {
	ents, err := kfile.ReadDir(ctx, classDir, kfile.Entries)
	if err != nil {
		return nil, err
	}
	used := map[string]int{}
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
		z.index = used[z.name]
		if base, num, ok := strings.Cut(z.name, "-"); ok && !strings.Contains(num, "-") {
			if n, err := strconv.Atoi(num); err == nil {
				z.index, z.name = n, base
			}
		}
		used[z.name] = z.index + 1
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

// Collect reads every package's counter. Energy and power need two
// readings; the node's totals are given only in a sample where every
// package was read (else they would count a package short).
func (c *Collector) Collect(ctx context.Context, b *metrics.Batch) error {
	var errs []error
	var power, energy float64
	all := true
	for _, z := range c.zones {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		raw, err := c.read(z.path)
		var v uint64
		if err == nil {
			v, err = parseMicrojoules(raw)
		}
		now := c.now()
		if err != nil {
			all = false
			if kfile.IsAbsent(err) { // the zone went away (driver unloaded): no data
				c.noteOnce(z.path, "absent", err.Error())
				continue
			}
			errs = append(errs, fmt.Errorf("reading CPU package %d energy from %s: %w", z.pkg, z.path, err))
			continue
		}
		st := z.c.Update(v, now)
		if why := st.Why(v, &z.c); why != "" {
			c.noteOnce(z.path, "skip", why)
		}
		if !st.Counted() {
			all = false
			continue
		}
		p := st.Rate() / 1e6
		b.Add(z.power, p, z.path)
		b.Add(z.energy, z.c.Total/1e6, z.path)
		power += p
		energy += z.c.Total / 1e6
	}
	if all && len(c.zones) > 0 {
		b.Add(Power, power, c.allSrc)
		b.Add(metrics.NodeCPUEnergy, energy, c.allSrc)
	}
	return errors.Join(errs...)
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
