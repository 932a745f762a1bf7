// Package infiniband reads the node's InfiniBand and RoCE ports from
// <sys>/class/infiniband: per device and port, the data received and
// transmitted per second, and the error and congestion counters users
// watch (symbol errors, link downs, receive errors, transmit discards,
// transmit wait), as counts since bridge started. The ports are the node's,
// whoever uses them: the series are node_.
//
// The devices, their ports and their state, rate and link layer are found
// once, by New, as prometheus/procfs reads them but through the bounded
// reader (internal/kfile); a node without
// <sys>/class/infiniband gets no collector at all, so it pays nothing per
// sample. Each sample then reads only the counter files it reports (each
// read sends the HCA a management datagram), through kfile.
package infiniband

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/internal/counter"
)

// Name is the collector's name in `bridge sample` and the registrations.
const Name = "infiniband"

// ErrUnavailable says the node has no InfiniBand or RoCE port.
var ErrUnavailable = errors.New("no InfiniBand or RoCE port")

// Options configure a Collector.
type Options struct {
	// Context bounds New's reads (a Build's deadline); nil: none but
	// kfile's own.
	Context context.Context
	// SysRoot is where sysfs is mounted; "" means /sys.
	SysRoot string
	// Log receives notes about counters that cannot be read; nil discards
	// them.
	Log *slog.Logger
	// Now is the clock the rates are computed with; nil means time.Now.
	Now func() time.Time
}

// errorCounters are the error and congestion counters reported, each with
// its file under counters/ and its width (the IBA PortCounters attribute:
// these counters stop at all ones rather than wrap).
var errorCounters = []struct {
	desc *metrics.Desc
	file string
	bits int
}{
	{SymbolErrors, "symbol_error", 16},
	{LinkDowned, "link_downed", 8},
	{ReceiveErrors, "port_rcv_errors", 16},
	{XmitDiscards, "port_xmit_discards", 16},
	{XmitWait, "port_xmit_wait", 32},
}

// port is one port and what Collect keeps of it.
type port struct {
	device, num string
	facts       facts
	data        []*portCounter // rx and tx, those the port has
	errs        []*portCounter
	link        *metrics.Desc // its link rate's series; nil when the rate is unknown
}

// facts are a port's state at start.
type facts struct {
	State, PhysState, LinkLayer string
	RateGbps                    float64 // 0: unknown
	Err                         string  // why they are unknown
}

// Collector reads the ports New found.
//
// Contract: as metrics.Collector and metrics.Closer. Detect and Tags read
// only what New found; Close drops the reader's records (it keeps no
// descriptor: sysfs files are opened on each read).
type Collector struct {
	sysRoot string
	ports   []*port
	files   *kfile.Reader[string]
	now     func() time.Time
	log     *slog.Logger
	buf     []byte

	mu    sync.Mutex
	noted map[string]bool // notes already logged, by kind and path
}

// New finds the ports under opts.SysRoot; an error wrapping ErrUnavailable
// means the node has none.
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
	classDir := filepath.Join(opts.SysRoot, "class/infiniband")
	names, err := kfile.ReadDirNames(opts.Context, classDir, kfile.Entries)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no %s", ErrUnavailable, classDir)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: listing %s: %w", ErrUnavailable, classDir, err)
	}
	c := &Collector{sysRoot: opts.SysRoot, now: opts.Now, log: opts.Log.With("source", Name), noted: map[string]bool{},
		files: kfile.NewPathReader(kfile.Options{Size: 64, Absent: true})}
	for _, name := range names {
		ports, err := c.findPorts(opts.Context, classDir, name)
		if err != nil {
			return nil, err
		}
		c.ports = append(c.ports, ports...)
	}
	if len(c.ports) == 0 {
		return nil, fmt.Errorf("%w: no port under %s", ErrUnavailable, classDir)
	}
	return c, nil
}

// findPorts lists the ports of device name. Their facts are read as
// procfs's InfiniBandDevice reads them (fw_ver, then each port's state,
// phys_state, rate and link layer); a device whose facts cannot be read (a
// driver without fw_ver, a malformed file, one that is no regular file of
// one value) still has its ports read, with the facts unknown and why. It
// fails only when ctx ends.
func (c *Collector) findPorts(ctx context.Context, classDir, name string) ([]*port, error) {
	byNum, err := deviceFacts(ctx, filepath.Join(classDir, name))
	if errors.Is(err, kfile.ErrNoAnswer) {
		return nil, err
	}
	if err != nil {
		c.log.Warn("InfiniBand device facts unreadable; its ports' counters are still read", "device", name, "err", err)
	}
	portsDir := filepath.Join(classDir, name, "ports")
	ents, rerr := kfile.ReadDirNames(ctx, portsDir, kfile.Entries)
	if errors.Is(rerr, kfile.ErrNoAnswer) {
		return nil, rerr
	}
	if rerr != nil {
		c.log.Warn("InfiniBand device without readable ports; left out", "device", name, "err", rerr)
		return nil, nil
	}
	var out []*port
	for _, num := range ents {
		if _, err := strconv.ParseUint(num, 10, 32); err != nil {
			continue
		}
		p := &port{device: name, num: num}
		if f, ok := byNum[num]; ok {
			p.facts = f
		} else {
			p.facts.Err = fmt.Sprintf("reading %s: %v", filepath.Join(classDir, name), err)
		}
		dir := filepath.Join(portsDir, num)
		if p.facts.RateGbps > 0 {
			p.link = metrics.InfinibandLinkRate.For(name, num)
		}
		for _, k := range []*portCounter{
			c.dataCounter(ctx, dir, "port_rcv_data", metrics.InfinibandReceiveRate.For(name, num)),
			c.dataCounter(ctx, dir, "port_xmit_data", metrics.InfinibandTransmitRate.For(name, num)),
		} {
			if k != nil {
				k.c.MaxRate = maxWords(p.facts.RateGbps)
				p.data = append(p.data, k)
			}
		}
		for _, ec := range errorCounters {
			path := filepath.Join(dir, "counters", ec.file)
			if kfile.Exists(ctx, path) {
				p.errs = append(p.errs, &portCounter{path: path, desc: ec.desc.For(name, num), max: 1<<ec.bits - 1})
			}
		}
		out = append(out, p)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: listing the ports of %s: %w", kfile.ErrNoAnswer, name, err)
	}
	sort.Slice(out, func(i, j int) bool { return portNumber(out[i].num) < portNumber(out[j].num) })
	return out, nil
}

// deviceFacts reads the facts of the device at dir by port number: its
// fw_ver must be there (as procfs asks), and each port's state,
// phys_state ("4: ACTIVE"), rate ("200 Gb/sec (4X HDR)") and link layer.
func deviceFacts(ctx context.Context, dir string) (map[string]facts, error) {
	read := func(path string) (string, error) {
		b, err := kfile.ReadFile(ctx, path, kfile.Value)
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", path, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if _, err := read(filepath.Join(dir, "fw_ver")); err != nil {
		return nil, err
	}
	nums, err := kfile.ReadDirNames(ctx, filepath.Join(dir, "ports"), kfile.Entries)
	if err != nil {
		return nil, err
	}
	out := map[string]facts{}
	for _, num := range nums {
		pd := filepath.Join(dir, "ports", num)
		var f facts
		var state, phys, rate string
		for _, r := range []struct {
			file string
			to   *string
		}{{"link_layer", &f.LinkLayer}, {"state", &state}, {"phys_state", &phys}, {"rate", &rate}} {
			if *r.to, err = read(filepath.Join(pd, r.file)); err != nil {
				return nil, err
			}
		}
		if f.State, err = stateName(state); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(pd, "state"), err)
		}
		if f.PhysState, err = stateName(phys); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(pd, "phys_state"), err)
		}
		// "200 Gb/sec (4X HDR)": the number, in Gb/s.
		g, _, _ := strings.Cut(rate, " ")
		if f.RateGbps, err = strconv.ParseFloat(g, 64); err != nil || f.RateGbps < 0 || math.IsInf(f.RateGbps, 0) {
			return nil, fmt.Errorf("%s: want a rate in Gb/sec, got %q", filepath.Join(pd, "rate"), rate)
		}
		out[num] = f
	}
	return out, nil
}

// stateName is the name of a state file's "ID: NAME".
func stateName(s string) (string, error) {
	id, name, ok := strings.Cut(s, ":")
	if _, err := strconv.ParseUint(strings.TrimSpace(id), 10, 32); !ok || err != nil || strings.Contains(name, ":") {
		return "", fmt.Errorf("want \"ID: NAME\", got %q", s)
	}
	return strings.TrimSpace(name), nil
}

func portNumber(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// MaxLinkGbps is the stated physical bound of a port whose rate is
// unknown: twice the fastest link today (12x XDR, 2.4 Tb/s).
const MaxLinkGbps = 4800

// maxWords is the most a data counter (4-byte words) can grow a second on
// a link of rateGbps (0: unknown, MaxLinkGbps).
func maxWords(rateGbps float64) float64 {
	if rateGbps <= 0 {
		rateGbps = MaxLinkGbps
	}
	return rateGbps * 1e9 / 8 / 4
}

// dataCounter is the port's data counter of base name file: the 64-bit
// counters_ext/<file>_64 where the device has it (older kernels' extended
// counters), else counters/<file> (64-bit on HCAs with extended width,
// else 32 bits that stop at all ones); nil when it has neither.
func (c *Collector) dataCounter(ctx context.Context, dir, file string, d *metrics.Desc) *portCounter {
	if p := filepath.Join(dir, "counters_ext", file+"_64"); kfile.Exists(ctx, p) {
		return &portCounter{path: p, desc: d}
	}
	if p := filepath.Join(dir, "counters", file); kfile.Exists(ctx, p) {
		return &portCounter{path: p, desc: d, max: math.MaxUint32}
	}
	return nil
}

// Name implements metrics.Collector.
func (c *Collector) Name() string { return Name }

// Close implements metrics.Closer.
func (c *Collector) Close() error { return c.files.Close() }

// Collect reads every port's counters. Each counter is read on its own: one
// that fails is in the joined error, the others' points still count.
func (c *Collector) Collect(ctx context.Context, b *metrics.Batch) error {
	var errs []error
	for _, p := range c.ports {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		rated := false
		for _, dc := range p.data {
			st, err := c.take(dc)
			if err != nil {
				errs = append(errs, err)
			}
			if st.Counted() {
				b.Add(dc.desc, metrics.MB(4*st.Rate()), dc.path) // the counters count 4-byte words
				rated = true
			}
		}
		// The link's rate beside the port's, against which it is read.
		if p.link != nil && rated {
			b.Add(p.link, p.facts.RateGbps*1e9/8/metrics.Megabyte, "rate") // Gb/s
		}
		for _, ec := range p.errs {
			st, err := c.take(ec)
			if err != nil {
				errs = append(errs, err)
			}
			// A count since bridge started holds even over an interval
			// that was not counted (a reset): it stays as it was.
			if st.Skip != counter.Baseline {
				b.Add(ec.desc, ec.c.Total, ec.path)
			}
		}
	}
	return errors.Join(errs...)
}

// take reads counter k and updates it. The step is not Counted on its
// first reading, when it cannot be read, and when the counter rule or its
// saturation leaves the interval out.
func (c *Collector) take(k *portCounter) (counter.Step, error) {
	if k.gone {
		return counter.Step{Skip: counter.Baseline}, nil
	}
	raw, err := c.read(k.path)
	now := c.now()
	var v uint64
	if err == nil {
		v, err = parseCounter(raw)
	}
	switch {
	case err == nil:
	case errors.Is(err, errNoPMA):
		k.gone = true // the device answers no counters: never asked again
		c.note("nopma", k.path, "InfiniBand counter not available (no PMA on this device); left out", err)
		return counter.Step{Skip: counter.Baseline}, nil
	case kfile.IsAbsent(err):
		c.note("absent", k.path, "InfiniBand counter gone since start (device removed?); left out while so", err)
		return counter.Step{Skip: counter.Baseline}, nil
	default:
		return counter.Step{Skip: counter.Baseline}, fmt.Errorf("reading %s: %w", k.path, err)
	}
	st, why := k.update(v, now)
	if why != "" {
		c.note("skipped", k.path, why, nil)
	}
	return st, nil
}

func (c *Collector) read(path string) ([]byte, error) {
	var err error
	c.buf, err = c.files.Read(path, c.buf)
	return c.buf, err
}

// note logs msg once per kind and path.
func (c *Collector) note(kind, path, msg string, err error) {
	c.mu.Lock()
	first := !c.noted[kind+" "+path]
	c.noted[kind+" "+path] = true
	c.mu.Unlock()
	if !first {
		return
	}
	if kind == "skipped" {
		c.log.Info(msg, "path", path)
		return
	}
	c.log.Debug(msg, "path", path, "err", err)
}

// Detect implements metrics.Detector: the ports, their state at start and
// the counter files read.
func (c *Collector) Detect(context.Context) map[string]any {
	ports := make([]map[string]any, 0, len(c.ports))
	for _, p := range c.ports {
		m := map[string]any{"device": p.device, "port": p.num}
		if p.facts.Err != "" {
			m["facts"] = "unknown: " + p.facts.Err
		} else {
			m["state"], m["phys_state"], m["link_layer"], m["rate_gbps"] = p.facts.State, p.facts.PhysState, p.facts.LinkLayer, metrics.FloatOf(p.facts.RateGbps)
		}
		var files []string
		for _, k := range append(slices.Clone(p.data), p.errs...) {
			files = append(files, strings.TrimPrefix(k.path, filepath.Join(c.sysRoot, "class/infiniband", p.device, "ports", p.num)+"/"))
		}
		m["counters"] = files
		ports = append(ports, m)
	}
	return map[string]any{"sys_root": c.sysRoot, "ports": ports}
}

// Tags are the ports' state at start, for the run:
// bridge.infiniband.<device>.<port>.{state,phys_state,rate,link_layer}.
func (c *Collector) Tags() map[string]string {
	t := map[string]string{}
	for _, p := range c.ports {
		k := "bridge.infiniband." + metrics.KeyPart(p.device) + "." + p.num + "."
		if p.facts.Err != "" {
			t[k+"state"] = "unknown"
			continue
		}
		t[k+"state"] = p.facts.State
		t[k+"phys_state"] = p.facts.PhysState
		t[k+"link_layer"] = p.facts.LinkLayer
		if p.facts.RateGbps > 0 {
			t[k+"rate"] = strconv.FormatFloat(p.facts.RateGbps, 'f', -1, 64) + " Gb/s"
		}
	}
	return t
}
