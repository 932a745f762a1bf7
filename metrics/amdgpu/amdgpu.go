// Package amdgpu reads AMD GPUs through the amdgpu driver's sysfs files (no
// ROCm library): per GPU its utilization, memory activity, VRAM and GTT
// used and total, power and power cap, temperature and clocks, under the
// gpu_N_ names NVIDIA's GPUs use for the same meaning, and the VRAM the
// child's process tree holds, from the KFD per-process files.
//
// The job's GPUs are found once, by New, as ROCm would list them for the
// child: the KFD topology's GPU nodes in node order, each on its amdgpu
// card (<sys>/class/drm/cardN, driver amdgpu; a compute partition's node,
// on an amdgpu_xcp render node, on the card at its PCI location), those
// whose render node is in <dev>/dri (a container is given only its own
// GPUs' device files, while /sys shows the node's), then
// ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES. A card's files describe
// the whole card: they are read once, for the first of the job's GPUs on
// it. A node without an amdgpu card gets no collector at all, so it pays
// nothing per sample.
//
// procfs's ClassDRMCardAMDGPUStats is not used: it globs card[0-9] (missing
// card10 and later, common on 8-GPU nodes), reads a file that is absent or
// unreadable (EPERM while the GPU resets) as 0, and reads ten files a card
// where a sample needs a few. Each file a sample reads is found at start
// and read through kfile.
package amdgpu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
)

// Name is the collector's name in `bridge sample` and the registrations.
const Name = "amdgpu"

// ErrNoGPU says the node has no GPU the amdgpu driver drives.
var ErrNoGPU = errors.New("no AMD GPU (amdgpu driver)")

// ErrNoneForJob says the node has AMD GPUs but none is the job's: no render
// node here, or the visibility variables leave none.
var ErrNoneForJob = errors.New("no AMD GPU for this job")

// Options configure a Collector.
type Options struct {
	// Context bounds New's reads (a Build's deadline); nil: none but
	// kfile's own.
	Context context.Context
	// SysRoot is where sysfs is mounted; "" means /sys.
	SysRoot string
	// DevRoot is where the device files are (the render nodes in dri/);
	// "" means /dev.
	DevRoot string
	// Offset is N of the first AMD GPU's gpu_N_ series: NVIDIA's GPUs come
	// first, so it is the number of GPUs NVML sees.
	Offset int
	// LookupEnv reads the child's ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES
	// and CUDA_VISIBLE_DEVICES (os.LookupEnv when nil). The last counts
	// only when Offset is 0: on a node with NVIDIA GPUs it is theirs.
	LookupEnv func(string) (string, bool)
	// ProcessTree is the child's process tree (process.Tree, shared with
	// the process collector); nil: no process_gpu_ series (bridge sample).
	ProcessTree ProcessTree
	// Log receives notes about GPUs left out; nil discards them.
	Log *slog.Logger
}

// ProcessTree is the child's process tree as the collector matches KFD's
// processes against it (process.Tree implements it).
type ProcessTree interface {
	// PIDs lists the tree's processes as seen in the PID namespace of
	// bridge's proc root; none while there is no child.
	PIDs(ctx context.Context) ([]int, error)
	// NoteGPUHolders records which of the tree's processes hold VRAM on
	// the GPUs collector source collects, as its last sample found them.
	// Safe beside PIDs.
	NoteGPUHolders(source string, pids []int)
	// Close releases what the tree keeps open. It may run beside PIDs,
	// and more than once (the tree has other users).
	Close() error
}

// reading is one file a sample reads, and what it gives.
type reading struct {
	path  string
	desc  *metrics.Desc // the GPU's series; nil for the power cap, which only divides
	scale float64       // the file's unit to the series' (µW to W: 1e-6)
}

// gpu is one of the job's GPUs.
type gpu struct {
	device
	index int // N of gpu_N_
	// figures: this GPU carries its card's readings (the first of the
	// job's GPUs on the card; a partition's are its card's, sent once).
	figures bool
	reads   []reading
	// The files whose values are combined, "" when absent.
	vramUsed, vramTotal, gttUsed, gttTotal, power, powerCap    string
	used, total, usagePct, gttUsedD, gttTotalD, powerW, limitW *metrics.Desc
	powerPct                                                   *metrics.Desc
	figuresAt                                                  int // without figures: N of the GPU that carries its card's
}

// Collector reads the job's AMD GPUs.
//
// Contract: as metrics.Collector and metrics.Closer. Detect and Tags read
// what New found, and the note of the last process match under mu; Close
// drops the readers' records (sysfs files are opened on each read) and
// closes the shared tree.
type Collector struct {
	sysRoot string
	gpus    []*gpu
	notes   []string              // GPUs left out and why; visibility entries naming none
	kfd     bool                  // the KFD topology is there: per-process VRAM can be read
	files   *kfile.Reader[string] // the GPUs' files
	vram    *kfile.Reader[string] // KFD's per-process files: no absence kept
	tree    ProcessTree
	log     *slog.Logger
	buf     []byte

	mu              sync.Mutex
	procNote        string
	unmatchedLogged bool
}

// New finds the job's AMD GPUs. It returns an error wrapping ErrNoGPU on a
// node without one, ErrNoneForJob when none is the job's; any other error
// means the driver's files could not be read.
func New(opts Options) (*Collector, error) {
	if opts.SysRoot == "" {
		opts.SysRoot = "/sys"
	}
	if opts.DevRoot == "" {
		opts.DevRoot = "/dev"
	}
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	sys := driverFiles{ctx: opts.Context, log: opts.Log.With("source", Name)}
	drm := filepath.Join(opts.SysRoot, "class/drm")
	cards, err := sys.findCards(opts.SysRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no %s", ErrNoGPU, drm)
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", drm, err)
	}
	if len(cards) == 0 {
		return nil, fmt.Errorf("%w: no card in %s is driven by amdgpu", ErrNoGPU, drm)
	}
	nodes, haveKFD, err := sys.kfdTopology(opts.SysRoot)
	if err != nil {
		return nil, err
	}
	c := &Collector{sysRoot: opts.SysRoot, kfd: haveKFD, tree: opts.ProcessTree, log: opts.Log.With("source", Name),
		files: kfile.NewPathReader(kfile.Options{Size: 64, Absent: true}), vram: kfile.NewPathReader(kfile.Options{Size: 64})}
	listed, dropped := rocmOrder(cards, nodes, haveKFD)
	c.notes = append(c.notes, dropped...)
	listed, dropped = sys.openable(listed, opts.DevRoot)
	c.notes = append(c.notes, dropped...)
	ids := make([]visibleGPU, len(listed))
	for i, d := range listed {
		// A partition's UUID as ROCm derives it is not known here: it is
		// chosen by index only.
		if d.card.uniqueID != "" && d.partition < 0 {
			ids[i].UUID = "GPU-" + d.card.uniqueID
		}
	}
	keep, notes := visible(ids, opts.LookupEnv, opts.Offset == 0)
	c.notes = append(c.notes, notes...)
	if len(c.notes) > 0 {
		c.log.Info("AMD GPUs left out of the job's", "why", strings.Join(c.notes, "; "))
	}
	carrier := map[*card]*gpu{}
	for i, k := range keep {
		d := listed[k]
		first := carrier[d.card]
		g := sys.newGPU(*d, opts.Offset+i, first == nil)
		if first == nil {
			carrier[d.card] = g
		} else {
			g.figuresAt = first.index
		}
		c.gpus = append(c.gpus, g)
	}
	if err := opts.Context.Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: finding the AMD GPUs' files: %w", kfile.ErrNoAnswer, err)
	}
	if len(c.gpus) == 0 {
		return nil, fmt.Errorf("%w: %d amdgpu cards on the node, none left: %s", ErrNoneForJob, len(cards), strings.Join(c.notes, "; "))
	}
	return c, nil
}

// newGPU makes gpu_<index> of device d; with figures it carries the
// readings of d's card, found here.
func (s driverFiles) newGPU(d device, index int, figures bool) *gpu {
	g := &gpu{device: d, index: index, figures: figures, figuresAt: -1}
	if !figures {
		return g
	}
	c := d.card
	has := func(path string) string {
		if path != "" && kfile.Exists(s.ctx, path) {
			return path
		}
		return ""
	}
	add := func(path string, tmpl *metrics.Desc, scale float64) {
		if has(path) != "" {
			g.reads = append(g.reads, reading{path: path, desc: tmpl.ForGPU(index), scale: scale})
		}
	}
	add(filepath.Join(c.dev, "gpu_busy_percent"), metrics.GPUUtilization, 1)
	add(filepath.Join(c.dev, "mem_busy_percent"), metrics.GPUMemoryControllerUtilization, 1)
	if c.hwmon != "" {
		add(s.hwmonInput(c.hwmon, "temp", 1, "edge", "junction"), metrics.GPUTemperature, 1e-3) // m°C
		add(s.hwmonInput(c.hwmon, "freq", 1, "sclk"), metrics.GPUSMClock, 1e-6)                 // Hz
		// The memory clock only from its own sensor: an APU has no
		// freq2_*, and freq1 is the shader clock.
		add(s.hwmonInput(c.hwmon, "freq", 2, "mclk"), metrics.GPUMemoryClock, 1e-6)
		// Average power where the GPU gives it, else the instant one: not
		// every product has both.
		g.power = has(filepath.Join(c.hwmon, "power1_average"))
		if g.power == "" {
			g.power = has(filepath.Join(c.hwmon, "power1_input"))
		}
		g.powerCap = has(filepath.Join(c.hwmon, "power1_cap"))
	}
	g.vramUsed = has(filepath.Join(c.dev, "mem_info_vram_used"))
	g.vramTotal = has(filepath.Join(c.dev, "mem_info_vram_total"))
	g.gttUsed = has(filepath.Join(c.dev, "mem_info_gtt_used"))
	g.gttTotal = has(filepath.Join(c.dev, "mem_info_gtt_total"))
	g.used, g.total, g.usagePct = metrics.GPUMemoryUsed.ForGPU(index), metrics.GPUMemoryTotal.ForGPU(index), metrics.GPUMemoryUsagePercent.ForGPU(index)
	g.gttUsedD, g.gttTotalD = GTTUsed.ForGPU(index), GTTTotal.ForGPU(index)
	g.powerW, g.limitW, g.powerPct = metrics.GPUPowerUsage.ForGPU(index), metrics.GPUPowerLimit.ForGPU(index), metrics.GPUPowerUsagePercent.ForGPU(index)
	return g
}

// hwmonInput is the <kind>K_input of hwmon dir whose <kind>K_label is the
// first of labels present; else, where the sensor at the driver's fixed
// place (<kind><at>_input: freq1 is sclk, freq2 mclk, temp1 edge) has no
// label naming another, that one; else "".
func (s driverFiles) hwmonInput(dir, kind string, at int, labels ...string) string {
	for _, want := range labels {
		for _, l := range s.names(dir, kind, "_label") {
			if s.firstLine(l) == want {
				in := strings.TrimSuffix(l, "_label") + "_input"
				if kfile.Exists(s.ctx, in) {
					return in
				}
			}
		}
	}
	base := filepath.Join(dir, kind+strconv.Itoa(at))
	if !kfile.Exists(s.ctx, base+"_input") {
		return ""
	}
	if l := s.firstLine(base + "_label"); l != "" && !slices.Contains(labels, l) {
		return "" // another sensor's place on this product
	}
	return base + "_input"
}

// uuidKey is the key of the card's UUID in g's description: a
// partition's is its card's, not its own.
func (g *gpu) uuidKey() string {
	if g.partition >= 0 {
		return "card_uuid"
	}
	return "uuid"
}

// Name implements metrics.Collector.
func (c *Collector) Name() string { return Name }

// Close implements metrics.Closer.
func (c *Collector) Close() error {
	if c.tree != nil {
		_ = c.tree.Close() // shared: safe beside its other users' walks
	}
	c.vram.Close()
	return c.files.Close()
}

// Collect reads every GPU's files, then the child's VRAM. Each file is read
// on its own: one that fails is in the joined error, the rest still count.
func (c *Collector) Collect(ctx context.Context, b *metrics.Batch) error {
	var errs []error
	for _, g := range c.gpus {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if !g.figures {
			continue
		}
		for _, r := range g.reads {
			if v, ok := c.value(g, r.path, &errs); ok {
				b.Add(r.desc, v*r.scale, r.path)
			}
		}
		used, uok := c.value(g, g.vramUsed, &errs)
		total, tok := c.value(g, g.vramTotal, &errs)
		if uok {
			b.Add(g.used, metrics.MB(used), g.vramUsed)
		}
		if tok {
			b.Add(g.total, metrics.MB(total), g.vramTotal)
		}
		if uok && tok && total > 0 {
			b.Add(g.usagePct, 100*used/total, g.vramUsed)
		}
		if v, ok := c.value(g, g.gttUsed, &errs); ok {
			b.Add(g.gttUsedD, metrics.MB(v), g.gttUsed)
		}
		if v, ok := c.value(g, g.gttTotal, &errs); ok {
			b.Add(g.gttTotalD, metrics.MB(v), g.gttTotal)
		}
		power, pok := c.value(g, g.power, &errs)
		limit, lok := c.value(g, g.powerCap, &errs)
		if pok {
			b.Add(g.powerW, power/1e6, g.power) // µW
		}
		if lok && limit > 0 {
			b.Add(g.limitW, limit/1e6, g.powerCap)
			if pok {
				b.Add(g.powerPct, 100*power/limit, g.power)
			}
		}
	}
	if c.tree != nil && c.kfd {
		if err := c.collectProcesses(ctx, b); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// value reads the number in file path of g ("" : none). A file the GPU
// does not support (gone, EOPNOTSUPP, an empty power1_cap when the query
// failed) is no value; an unreadable or malformed one is an error.
func (c *Collector) value(g *gpu, path string, errs *[]error) (float64, bool) {
	if path == "" {
		return 0, false
	}
	var err error
	c.buf, err = c.files.Read(path, c.buf)
	if kfile.IsAbsent(err) {
		return 0, false
	}
	if err != nil {
		why := ""
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EBUSY) {
			why = " (the GPU is resetting or suspended?)"
		}
		*errs = append(*errs, fmt.Errorf("GPU %d (%s): reading %s: %w%s", g.index, g.card.name, path, err, why))
		return 0, false
	}
	v, ok := kfile.Int(c.buf) // hwmon values are signed (temperatures)
	if !ok {
		s := strings.TrimSpace(string(c.buf))
		if s == "" {
			return 0, false
		}
		*errs = append(*errs, fmt.Errorf("GPU %d (%s): parsing %s: want a whole number, got %q", g.index, g.card.name, path, s))
		return 0, false
	}
	return float64(v), true
}

// Detect implements metrics.Detector: the job's GPUs, what was left out,
// and how the child's processes were matched.
func (c *Collector) Detect(context.Context) map[string]any {
	gpus := make([]map[string]any, 0, len(c.gpus))
	for _, g := range c.gpus {
		m := map[string]any{"index": g.index, "card": g.card.name, "pci": g.card.pci, "render_node": "renderD" + strconv.Itoa(g.render)}
		if g.card.uniqueID != "" {
			m[g.uuidKey()] = "GPU-" + g.card.uniqueID
		}
		if g.card.product != "" {
			m["name"] = g.card.product
		}
		if g.gpuID != "" {
			m["kfd_gpu_id"] = g.gpuID
		}
		if g.partition >= 0 {
			m["partition"] = g.partition
		}
		if !g.figures {
			m["card_figures"] = fmt.Sprintf("under gpu_%d, on the same card", g.figuresAt)
			gpus = append(gpus, m)
			continue
		}
		var files []string
		for _, r := range g.reads {
			files = append(files, r.path)
		}
		for _, f := range []string{g.vramUsed, g.vramTotal, g.gttUsed, g.gttTotal, g.power, g.powerCap} {
			if f != "" {
				files = append(files, f)
			}
		}
		m["files"] = files
		gpus = append(gpus, m)
	}
	out := map[string]any{"sys_root": c.sysRoot, "gpus": gpus}
	if len(c.notes) > 0 {
		out["left_out"] = c.notes
	}
	switch {
	case !c.kfd:
		out["process_pids"] = "no KFD (" + filepath.Join(c.sysRoot, "class/kfd") + "): the child's VRAM is not read"
	case c.tree == nil:
		out["process_pids"] = "no child process tree"
	default:
		c.mu.Lock()
		out["process_pids"] = c.procNote
		c.mu.Unlock()
	}
	return out
}

// Tags name the job's AMD GPUs for the run: bridge.gpu.N.uuid (a
// partition's: bridge.gpu.N.card_uuid, its card's), bridge.gpu.N.name,
// bridge.gpu.N.vendor (amd), bridge.gpu.N.partition (a partition's card
// and place) and bridge.gpu.amd_count.
func (c *Collector) Tags() map[string]string {
	t := map[string]string{"bridge.gpu.amd_count": strconv.Itoa(len(c.gpus))}
	for _, g := range c.gpus {
		p := "bridge.gpu." + strconv.Itoa(g.index) + "."
		t[p+"vendor"] = "amd"
		if g.card.uniqueID != "" {
			t[p+g.uuidKey()] = "GPU-" + g.card.uniqueID
		}
		if g.partition >= 0 {
			t[p+"partition"] = g.device.String()
		}
		name := g.card.product
		if name == "" {
			name = "AMD GPU " + g.card.pci
		}
		t[p+"name"] = name
	}
	return t
}
