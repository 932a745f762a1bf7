// Package node collects host-wide figures from /proc (CPU, memory, load,
// pressure), the root filesystem from statfs, and network traffic of the
// network namespace from /proc/net/dev.
//
// Scopes: node_* series describe the whole host (these /proc files are not
// isolated by any namespace: inside a pod they describe the node), rootfs_*
// the filesystem under RootfsPath (an overlay root reports the node's disk),
// netns_* the network namespace bridge runs in (the pod's, in Kubernetes).
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"

	kfileio "github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
)

// Options configure a Collector.
type Options struct {
	// Context bounds New's check of ProcRoot (a Build's deadline); nil:
	// none but the bounded reader's own.
	Context context.Context
	// ProcRoot is where procfs is mounted; "" means /proc.
	ProcRoot string
	// SysRoot is where sysfs is mounted ("" means /sys): <SysRoot>/class/net
	// tells which network interfaces are stacked on others.
	SysRoot string
	// RootfsPath is the path whose filesystem rootfs_* describes; "" means /.
	RootfsPath string
	// Log receives debug notes about absent sources; nil discards them.
	Log *slog.Logger
	// Scopes are the scopes to read: node (/proc/stat, meminfo, loadavg,
	// pressure), rootfs (statfs of RootfsPath), netns (/proc/net/dev).
	// Sources of other scopes are not touched: --scopes container,node
	// makes no statfs call. Empty means all three.
	Scopes []metrics.Scope
}

// Collector reads the node, rootfs and netns sources. It keeps the previous
// /proc/stat and /proc/net/dev readings to compute deltas.
//
// Contract: as metrics.Collector and metrics.Closer. Detect keeps no state
// and may run beside a Collect, Close too (the kept files are a
// kfile.Reader's).
type Collector struct {
	procRoot   string
	rootfsPath string
	log        *slog.Logger
	now        func() time.Time

	prevCPU  *procfs.CPUStat
	net      netTracker
	classNet string // <SysRoot>/class/net

	// The scopes Collect reads (Options.Scopes, in ServedScopes' order) and
	// their sources' readers, in order.
	scopes []metrics.Scope
	steps  []func(context.Context, *metrics.Batch) error
	// statfs is readFsUsage; tests count its calls.
	statfs func(path string) (fsUsage, error)

	// The files read every sample (paths under ProcRoot), read through
	// files: kept open on a real procfs, a missing one (no PSI) not looked
	// for every sample. buf is Collect's, reused.
	statFile, meminfoFile, loadavgFile, netDevFile string
	pressureFiles                                  []string // as Pressure
	files                                          *kfileio.Reader[string]
	buf                                            []byte
	statfsSrc                                      string // "statfs(<RootfsPath>)"

	mu     sync.Mutex
	absent map[string]bool // sources already logged as absent
	topo   *netTopology    // the interfaces counted, as last read; replaced, never changed
	tags   map[string]string
}

// New returns a Collector reading under opts.ProcRoot.
func New(opts Options) (*Collector, error) {
	if opts.ProcRoot == "" {
		opts.ProcRoot = procfs.DefaultMountPoint
	}
	if opts.RootfsPath == "" {
		opts.RootfsPath = "/"
	}
	if opts.SysRoot == "" {
		opts.SysRoot = "/sys"
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if st, err := kfileio.Stat(opts.Context, opts.ProcRoot); err != nil || !st.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("node metrics: opening proc filesystem at %s: %w", opts.ProcRoot, err)
	}
	file := func(rel string) string { return filepath.Join(opts.ProcRoot, rel) }
	var psi []string
	for _, p := range Pressure {
		psi = append(psi, file("pressure/"+p.Resource))
	}
	c := &Collector{
		statFile:      file("stat"),
		meminfoFile:   file("meminfo"),
		loadavgFile:   file("loadavg"),
		netDevFile:    file("net/dev"),
		pressureFiles: psi,
		procRoot:      opts.ProcRoot,
		rootfsPath:    opts.RootfsPath,
		statfsSrc:     "statfs(" + opts.RootfsPath + ")",
		classNet:      filepath.Join(opts.SysRoot, "class/net"),
		topo:          &netTopology{},
		log:           log.With("source", "node"),
		now:           time.Now,
		statfs:        readFsUsage,
		absent:        map[string]bool{},
	}
	c.files = kfileio.NewPathReader(kfileio.Options{Max: kfileio.Table, Absent: true, Now: func() time.Time { return c.now() }})
	for _, sc := range opts.Scopes {
		if !slices.Contains(ServedScopes, sc) {
			return nil, fmt.Errorf("node metrics: scope %q is not one this collector reads (node, rootfs, netns)", sc)
		}
	}
	for _, sc := range ServedScopes {
		if len(opts.Scopes) > 0 && !slices.Contains(opts.Scopes, sc) {
			continue
		}
		c.scopes = append(c.scopes, sc)
		switch sc {
		case metrics.ScopeNode:
			c.steps = append(c.steps, plain(c.collectCPU), plain(c.collectMemory), plain(c.collectLoad), plain(c.collectPressure))
		case ScopeRootfs:
			c.steps = append(c.steps, plain(c.collectRootfs))
		case metrics.ScopeNetns:
			c.steps = append(c.steps, func(ctx context.Context, b *metrics.Batch) error { return c.collectNet(ctx, b, c.now()) })
			c.startNet(opts.Context)
		}
	}
	return c, nil
}

// plain is a step that reads no file beyond what Reader keeps.
func plain(f func(*metrics.Batch) error) func(context.Context, *metrics.Batch) error {
	return func(_ context.Context, b *metrics.Batch) error { return f(b) }
}

// startNet reads the network interfaces and their stacking once, for the
// run's tags: what the job's netns_ series count at its start. A failure
// leaves it to the first Collect, and no tags.
func (c *Collector) startNet(ctx context.Context) {
	if ctx == nil {
		ctx = context.Background()
	}
	b, err := kfileio.ReadFile(ctx, c.netDevFile, kfileio.Table)
	if err != nil {
		return
	}
	nd, err := parseNetDev(b)
	if err != nil {
		return
	}
	t := readNetTopology(ctx, c.classNet, nd)
	c.topo = &t
	if !t.known {
		return
	}
	counted, leftOut := t.describe()
	c.tags = map[string]string{TagNetnsCounted: capList(counted)}
	if len(leftOut) > 0 {
		c.tags[TagNetnsLeftOut] = capList(leftOut)
	}
}

// The run tags that say which interfaces netns_ counts (at the job's
// start): those counted, and those left out with what they are stacked
// over. Set only where sysfs could tell.
const (
	TagNetnsCounted = "bridge.netns.interfaces_counted"
	TagNetnsLeftOut = "bridge.netns.interfaces_left_out"
)

// maxTagNames bounds the names a tag lists (a node with hundreds of veths).
const maxTagNames = 32

// capList joins names, at most maxTagNames of them, saying how many more.
func capList(names []string) string {
	if len(names) <= maxTagNames {
		return strings.Join(names, "; ")
	}
	return strings.Join(names[:maxTagNames], "; ") + fmt.Sprintf("; and %d more", len(names)-maxTagNames)
}

// Tags are what the netns_ series count at the start of the job, where
// sysfs could tell (TagNetnsCounted, TagNetnsLeftOut).
func (c *Collector) Tags() map[string]string { return c.tags }

// ServedScopes are the scopes the node collector serves, in the order it
// reads them.
var ServedScopes = []metrics.Scope{metrics.ScopeNode, ScopeRootfs, metrics.ScopeNetns}

// Close releases the files kept open, without waiting for a read in flight
// (see kfile.Reader.Close).
func (c *Collector) Close() error { return c.files.Close() }

// read reads the file at path into the collector's buffer.
func (c *Collector) read(path string) ([]byte, error) {
	var err error
	c.buf, err = c.files.Read(path, c.buf)
	return c.buf, err
}

// Name implements metrics.Collector.
func (c *Collector) Name() string { return Name }

// Collect implements metrics.Collector. Each source is read independently: one
// that fails is reported in the joined error while the others' points are
// still returned.
func (c *Collector) Collect(ctx context.Context, b *metrics.Batch) error {
	var errs []error
	for _, step := range c.steps {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		if err := step(ctx, b); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Scopes returns the scopes Collect reads, in the order node, rootfs, netns.
func (c *Collector) Scopes() []metrics.Scope { return slices.Clone(c.scopes) }

// Detect implements metrics.Detector.
func (c *Collector) Detect(ctx context.Context) map[string]any {
	out := map[string]any{
		"proc_root":   c.procRoot,
		"rootfs_path": c.rootfsPath,
		"net_dev":     c.path("net/dev"),
	}
	read := func(rel string) ([]byte, error) { return kfileio.ReadFile(ctx, c.path(rel), kfileio.Table) }
	b, err := read("stat")
	var ncpu int
	if err == nil {
		_, ncpu, err = parseProcStat(b)
	}
	if err == nil {
		out["cpu_count"] = ncpu
	} else {
		out["cpu_count_error"] = fmt.Sprintf("reading %s: %v", c.path("stat"), err)
	}
	if b, err := read("meminfo"); err == nil {
		if mi, err := parseMeminfo(b); err == nil && mi.MemTotalBytes != nil {
			out["memory_total_megabytes"] = metrics.FloatOf(metrics.MB(float64(*mi.MemTotalBytes)))
		}
	}
	var psi []string
	for _, p := range Pressure {
		if b, err := read("pressure/" + p.Resource); err == nil {
			if _, err := parsePSI(b); err == nil {
				psi = append(psi, p.Resource)
			}
		}
	}
	out["pressure"] = psi // the /proc/pressure files present; empty: kernel without PSI
	if slices.Contains(c.scopes, metrics.ScopeNetns) {
		c.mu.Lock()
		t := c.topo
		c.mu.Unlock()
		switch {
		case t.known:
			counted, leftOut := t.describe()
			out["net_counted"] = counted
			if len(leftOut) > 0 {
				out["net_left_out"] = leftOut
			}
		case t.note != "":
			out["net_counted"] = t.note
		default:
			out["net_counted"] = "every interface but lo, until net/dev is read"
		}
	}
	return out
}

// path is the file under ProcRoot that a metric's Source names.
func (c *Collector) path(rel string) string { return filepath.Join(c.procRoot, rel) }

// readSource reads the file src and parses it: the one way every /proc
// source of the collector is read. ok is false when there is nothing to
// add: see outcome.
func readSource[T any](c *Collector, src, what string, parse func([]byte) (T, error)) (v T, ok bool, err error) {
	b, err := c.read(src)
	if err == nil {
		v, err = parse(b)
	}
	ok, err = c.outcome(src, what, err)
	return v, ok, err
}

// outcome sorts the error of reading source src: none is ok; a source this
// machine does not have (a missing file, a kernel that refuses it: PSI
// built in but disabled) is no data, logged once at debug, and no error;
// any other is an error that says what was read, and from where.
func (c *Collector) outcome(src, what string, err error) (ok bool, _ error) {
	switch {
	case err == nil:
		return true, nil
	case kfileio.IsAbsent(err):
		c.noteAbsent(src, err)
		return false, nil
	}
	return false, fmt.Errorf("reading %s from %s: %w", what, src, err)
}

// noteAbsent logs once, at debug, that a source is missing.
func (c *Collector) noteAbsent(src string, err error) {
	c.mu.Lock()
	first := !c.absent[src]
	c.absent[src] = true
	c.mu.Unlock()
	if first {
		c.log.Debug("source not available; its metrics are omitted", "path", src, "err", err)
	}
}
