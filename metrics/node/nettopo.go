package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/prometheus/procfs"

	kfileio "github.com/bridge-dev/bridge/internal/kfile"
)

// A stacked interface carries bytes that the interfaces under it carry
// too: a bond's are its members', a bridge's its ports', a VLAN's or a
// macvlan's its parent's. /proc/net/dev counts each of them, so summing
// every interface counts those bytes twice. sysfs tells the stacking:
// <sys>/class/net/<if>/lower_<x> (an upper device over x: bonds, bridges,
// teams, VLANs, macvlans), master (a bond's or a bridge's port names it),
// brif/ (a bridge's ports, on kernels without the lower_ links). The
// interfaces counted are those nothing is stacked under: physical NICs
// (a device link) and leaf virtual ones (veths, tun/tap), each once.

// netTopology is which interfaces of the namespace are counted, as read
// from sysfs for one set of interface names.
type netTopology struct {
	known   bool              // sysfs is the namespace's and was read
	note    string            // why not, when !known
	names   map[string]bool   // the interfaces it was read for (net/dev's, but lo)
	stacked map[string]string // interface -> what it is stacked over
	phys    map[string]bool   // interfaces with a device (a NIC)
}

// counts reports whether the bytes of interface name are added.
func (t *netTopology) counts(name string) bool {
	return name != "lo" && (!t.known || t.stacked[name] == "")
}

// sameNames reports whether nd has the interfaces t was read for.
func (t *netTopology) sameNames(nd procfs.NetDev) bool {
	if t.names == nil {
		return false
	}
	n := 0
	for name := range nd {
		if name == "lo" {
			continue
		}
		if !t.names[name] {
			return false
		}
		n++
	}
	return n == len(t.names)
}

// readNetTopology reads the stacking of the interfaces of nd under
// classNet (<sys>/class/net). sysfs shows the network namespace that
// mounted it: when an interface of nd is not there, it is another
// namespace's (or the interface was just made or removed), and the
// topology is not known: every interface but lo is counted. It reads one
// directory listing an interface, and a link for each port.
func readNetTopology(ctx context.Context, classNet string, nd procfs.NetDev) netTopology {
	t := netTopology{names: map[string]bool{}, stacked: map[string]string{}, phys: map[string]bool{}}
	for name := range nd {
		if name != "lo" {
			t.names[name] = true
		}
	}
	present, err := kfileio.ReadDirNames(ctx, classNet, kfileio.Entries)
	if kfileio.IsAbsent(err) {
		t.note = fmt.Sprintf("no %s: every interface but lo is counted", classNet)
		return t
	}
	if err != nil {
		t.note = fmt.Sprintf("%s cannot be listed (%v): every interface but lo is counted", classNet, err)
		return t
	}
	inSys := make(map[string]bool, len(present))
	for _, name := range present {
		inSys[name] = true
	}
	var missing []string
	for name := range t.names {
		if !inSys[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		t.note = fmt.Sprintf("%s has no %s: it is not the sysfs of bridge's network namespace; every interface but lo is counted",
			classNet, strings.Join(missing, ", "))
		return t
	}
	ports := map[string][]string{} // master -> its ports, from their master links
	kind := map[string]string{}
	lowers := map[string][]string{}
	for name := range t.names {
		dir := filepath.Join(classNet, name)
		ents, err := kfileio.ReadDirNames(ctx, dir, kfileio.Entries)
		if errors.Is(err, kfileio.ErrNoAnswer) {
			t.note = fmt.Sprintf("listing %s: %v; every interface but lo is counted", dir, err)
			return t
		}
		if err != nil {
			continue // gone meanwhile: it is counted until the next reading
		}
		for _, e := range ents {
			switch {
			case strings.HasPrefix(e, "lower_"):
				lowers[name] = append(lowers[name], strings.TrimPrefix(e, "lower_"))
			case e == "device":
				t.phys[name] = true
			case e == "bonding":
				kind[name] = "a bond"
			case e == "bridge":
				kind[name] = "a bridge"
			case e == "master":
				if m, err := kfileio.Readlink(ctx, filepath.Join(dir, "master")); err == nil {
					ports[filepath.Base(m)] = append(ports[filepath.Base(m)], name)
				}
			case e == "brif":
				if p, err := kfileio.ReadDirNames(ctx, filepath.Join(dir, "brif"), kfileio.Entries); err == nil {
					ports[name] = append(ports[name], p...)
				}
			}
		}
	}
	for name := range t.names {
		under := slices.Concat(lowers[name], ports[name])
		if len(under) == 0 {
			continue
		}
		slices.Sort(under)
		under = slices.Compact(under)
		k := kind[name]
		if k == "" {
			k = "stacked"
		}
		t.stacked[name] = k + " over " + strings.Join(under, ", ")
	}
	t.known = true
	return t
}

// describe says which interfaces are counted and which are left out, and
// why, each list sorted.
func (t *netTopology) describe() (counted, leftOut []string) {
	for name := range t.names {
		switch {
		case t.stacked[name] != "":
			leftOut = append(leftOut, name+": "+t.stacked[name])
		case t.phys[name]:
			counted = append(counted, name+" (physical)")
		default:
			counted = append(counted, name)
		}
	}
	slices.Sort(counted)
	slices.Sort(leftOut)
	return counted, leftOut
}
