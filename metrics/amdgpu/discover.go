package amdgpu

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

	"github.com/bridge-dev/bridge/internal/kfile"
)

// card is one amdgpu DRM card as found under <sys>/class/drm.
type card struct {
	name     string // card1
	num      int    // 1
	dev      string // <sys>/class/drm/card1/device
	pci      string // 0000:03:00.0
	uniqueID string // unique_id (GFX9 and later); ""
	product  string // product_name; ""
	render   int    // the render node's minor (renderD128: 128); -1: none
	hwmon    string // its amdgpu hwmon directory; "" when it has none
}

// device is one GPU as ROCm lists it: a KFD topology node (without KFD, a
// card), on the card whose files describe it. A card in a compute
// partition mode (MI300's DPX, CPX) is several devices: the first is the
// card's own render node, each other one the render node of an amdgpu_xcp
// platform device, which has no PCI device and no driver of its own.
type device struct {
	card      *card
	render    int    // the render node's minor ROCm opens for it
	kfdNode   int    // its node in the KFD topology; -1: none
	gpuID     string // its KFD gpu_id; "" without KFD
	partition int    // its place among its card's devices; -1: the card is not partitioned
}

var cardName = regexp.MustCompile(`^card([0-9]+)$`)

// driverFiles reads the driver's files through the bounded reader, under ctx,
// and says once (at warn) when one that should hold a value is no regular
// file of one (a FIFO, /dev/zero): the value is then unknown.
type driverFiles struct {
	ctx context.Context
	log *slog.Logger
}

// findCards lists the DRM cards the amdgpu driver drives, in card-number
// order. A card whose device has no uevent, or another driver, is not
// one. (procfs's ClassDRMCardAMDGPUStats globs card[0-9] and would miss
// card10 and later: large nodes number their GPUs card1, card9, ...,
// card57.) It fails when ctx ends.
func (s driverFiles) findCards(sysRoot string) ([]*card, error) {
	dir := filepath.Join(sysRoot, "class/drm")
	names, err := kfile.ReadDirNames(s.ctx, dir, kfile.Entries)
	if err != nil {
		return nil, err
	}
	var out []*card
	for _, name := range names {
		m := cardName.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		c := &card{name: name, num: n, dev: filepath.Join(dir, name, "device"), render: -1}
		ue, err := s.keyValues(filepath.Join(c.dev, "uevent"), "=")
		if err != nil || ue["DRIVER"] != "amdgpu" {
			continue
		}
		c.pci = ue["PCI_SLOT_NAME"]
		c.uniqueID = s.firstLine(filepath.Join(c.dev, "unique_id"))
		c.product = s.firstLine(filepath.Join(c.dev, "product_name"))
		if rs := s.names(filepath.Join(c.dev, "drm"), "renderD", ""); len(rs) > 0 {
			if m, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(rs[0]), "renderD")); err == nil {
				c.render = m
			}
		}
		c.hwmon = s.findHwmon(c.dev)
		out = append(out, c)
	}
	if err := s.ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: reading %s: %w", kfile.ErrNoAnswer, dir, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].num < out[j].num })
	return out, nil
}

// names are the paths of the entries of dir whose name has prefix and
// suffix, in name order (filepath.Glob of dir/prefix*suffix); none when
// dir cannot be listed.
func (s driverFiles) names(dir, prefix, suffix string) []string {
	ents, err := kfile.ReadDirNames(s.ctx, dir, kfile.Entries)
	if err != nil && !kfile.IsAbsent(err) {
		s.log.Warn("cannot list an AMD GPU's sysfs directory", "path", dir, "err", err)
	}
	var out []string
	for _, n := range ents {
		if strings.HasPrefix(n, prefix) && strings.HasSuffix(n, suffix) && len(n) >= len(prefix)+len(suffix) {
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out
}

// findHwmon is the card's hwmon directory named amdgpu (its number is not
// stable: found by name).
func (s driverFiles) findHwmon(dev string) string {
	for _, d := range s.names(filepath.Join(dev, "hwmon"), "hwmon", "") {
		if s.firstLine(filepath.Join(d, "name")) == "amdgpu" {
			return d
		}
	}
	return ""
}

// kfdNode is one GPU node of the KFD topology.
type kfdNode struct {
	node        int
	gpuID       string
	renderMinor int
	// The PCI device of the card the node is on: domain, and location_id
	// (bus<<8 | device<<3 | function). A partition's node carries its
	// card's, with the partition's number ORed into the low bits (or, in
	// some kernels, bits 31:28): only bus and device are compared.
	domain, location int
	hasLocation      bool
}

// kfdTopology lists the GPU nodes of <sys>/class/kfd/kfd/topology/nodes
// in node order (a node with gpu_id 0 is a CPU). ok is false without KFD.
func (s driverFiles) kfdTopology(sysRoot string) (nodes []kfdNode, ok bool, err error) {
	dir := filepath.Join(sysRoot, "class/kfd/kfd/topology/nodes")
	names, err := kfile.ReadDirNames(s.ctx, dir, kfile.Entries)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	for _, name := range names {
		n, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		id := s.firstLine(filepath.Join(dir, name, "gpu_id"))
		if id == "" || id == "0" {
			continue
		}
		props, err := s.keyValues(filepath.Join(dir, name, "properties"), " ")
		if err != nil {
			return nil, true, fmt.Errorf("reading the KFD topology: %w", err)
		}
		minor, err := strconv.Atoi(props["drm_render_minor"])
		if err != nil {
			return nil, true, fmt.Errorf("reading the KFD topology: %s has no drm_render_minor", filepath.Join(dir, name, "properties"))
		}
		kn := kfdNode{node: n, gpuID: id, renderMinor: minor}
		dom, derr := strconv.Atoi(props["domain"])
		loc, lerr := strconv.ParseUint(props["location_id"], 10, 32)
		if derr == nil && lerr == nil {
			kn.domain, kn.location, kn.hasLocation = dom, int(loc), true
		}
		nodes = append(nodes, kn)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].node < nodes[j].node })
	return nodes, true, nil
}

// rocmOrder lists the devices ROCm numbers, in its order: the KFD
// topology's node order, which also leaves out cards KFD has no node for
// (no compute). A node whose render node is no card's is a compute
// partition of the card at its PCI location (amdgpu_xcp_drv.c registers a
// platform device, with no PCI parent and no driver, for each partition
// after the first; kfd_topology.c gives the partition's node the card's
// domain and location_id). Without KFD, the cards in card-number order.
// dropped says why a card or a node was left out.
func rocmOrder(cards []*card, nodes []kfdNode, haveKFD bool) (out []*device, dropped []string) {
	if !haveKFD {
		for _, c := range cards {
			out = append(out, &device{card: c, render: c.render, kfdNode: -1, partition: -1})
		}
		return out, nil
	}
	byMinor := map[int]*card{}
	for _, c := range cards {
		if c.render >= 0 {
			byMinor[c.render] = c
		}
	}
	perCard := map[*card]int{}
	for _, n := range nodes {
		c := byMinor[n.renderMinor]
		if c == nil {
			var why string
			c, why = parentCard(cards, n)
			if c == nil {
				dropped = append(dropped, fmt.Sprintf("KFD node %d (renderD%d): %s", n.node, n.renderMinor, why))
				continue
			}
		}
		out = append(out, &device{card: c, render: n.renderMinor, kfdNode: n.node, gpuID: n.gpuID, partition: perCard[c]})
		perCard[c]++
	}
	for _, d := range out {
		if perCard[d.card] == 1 {
			d.partition = -1
		}
	}
	for _, c := range cards {
		if perCard[c] == 0 {
			dropped = append(dropped, fmt.Sprintf("%s (%s): no KFD topology node (not a compute device ROCm lists)", c.name, c.pci))
		}
	}
	return out, dropped
}

// parentCard is the card whose PCI domain, bus and device node n's
// properties name; nil, and why, when none or more than one is.
func parentCard(cards []*card, n kfdNode) (*card, string) {
	if !n.hasLocation {
		return nil, "its render node is no amdgpu card's, and its properties give no domain and location_id to find its card by"
	}
	loc := n.location & 0xffff // bits 31:28 may hold the partition
	var found []*card
	for _, c := range cards {
		dom, bus, dev, ok := pciLocation(c.pci)
		if ok && dom == n.domain && bus == loc>>8 && dev == (loc>>3)&0x1f {
			found = append(found, c)
		}
	}
	switch len(found) {
	case 1:
		return found[0], ""
	case 0:
		return nil, fmt.Sprintf("its render node is no amdgpu card's, and no card is at its location (domain %d, location_id %d)", n.domain, n.location)
	}
	return nil, fmt.Sprintf("%d amdgpu cards at its location (domain %d, location_id %d)", len(found), n.domain, n.location)
}

// pciLocation parses a PCI slot name, DDDD:BB:DD.F (hexadecimal).
func pciLocation(slot string) (domain, bus, dev int, ok bool) {
	var fn int
	n, err := fmt.Sscanf(slot, "%x:%x:%x.%x", &domain, &bus, &dev, &fn)
	return domain, bus, dev, err == nil && n == 4
}

// openable keeps the cards whose render node is in devRoot/dri: ROCm lists
// only the GPUs it can open, and a container is given only its GPUs' device
// files while its /sys shows every GPU of the node.
func (s driverFiles) openable(devs []*device, devRoot string) (out []*device, dropped []string) {
	for _, d := range devs {
		node := filepath.Join(devRoot, "dri", "renderD"+strconv.Itoa(d.render))
		if d.render < 0 {
			dropped = append(dropped, fmt.Sprintf("%s: no render node", d))
			continue
		}
		if _, err := kfile.Stat(s.ctx, node); err != nil {
			dropped = append(dropped, fmt.Sprintf("%s: %s is not here (a container is given only its own GPUs)", d, node))
			continue
		}
		out = append(out, d)
	}
	return out, dropped
}

// String names d for notes: its card and PCI slot, and its partition.
func (d *device) String() string {
	s := d.card.name + " (" + d.card.pci + ")"
	if d.partition >= 0 {
		s += " partition " + strconv.Itoa(d.partition) + " (renderD" + strconv.Itoa(d.render) + ")"
	}
	return s
}

// keyValues reads a file of "key<sep>value" lines (uevent, KFD properties).
func (s driverFiles) keyValues(path, sep string) (map[string]string, error) {
	b, err := kfile.ReadFile(s.ctx, path, kfile.Table)
	if err != nil {
		s.warn(path, err)
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, sep)
		if ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out, nil
}

// firstLine is the file's first line, trimmed; "" when it cannot be read.
func (s driverFiles) firstLine(path string) string {
	b, err := kfile.ReadFile(s.ctx, path, kfile.Value)
	if err != nil {
		s.warn(path, err)
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}

// warn says that a file the driver should have filled with a value is no
// regular file of one, or did not answer; a file that is simply not there
// (an older GPU) is normal.
func (s driverFiles) warn(path string, err error) {
	if errors.Is(err, kfile.ErrNotRegular) || errors.Is(err, kfile.ErrTooLarge) || errors.Is(err, kfile.ErrNoAnswer) {
		s.log.Warn("an AMD GPU's sysfs file is unreadable; its value is unknown", "path", path, "err", err)
	}
}
