package cgroup

import (
	"path/filepath"
	"strings"

	"github.com/prometheus/procfs"
)

// Controllers this collector reads, by their v1 names.
const (
	ctlMemory  = "memory"
	ctlCPU     = "cpu"
	ctlCPUAcct = "cpuacct"
	ctlCPUSet  = "cpuset"
	ctlPids    = "pids"
	ctlUnified = "unified" // the v2 leaf (all v2 controllers, and PSI)
)

var v1Controllers = []string{ctlMemory, ctlCPU, ctlCPUAcct, ctlCPUSet, ctlPids}

// place is where one controller's files for the process are.
type place struct {
	dir string // absolute leaf directory
	top string // mount point: the highest ancestor this view can see
	rel string // dir relative to top, starting with "/"
	v1  bool
}

func (p place) ok() bool { return p.dir != "" }

// ancestors returns the leaf and every visible ancestor up to the mount
// point, leaf first.
func (p place) ancestors() []string {
	if !p.ok() {
		return nil
	}
	var out []string
	for d := p.dir; ; d = filepath.Dir(d) {
		out = append(out, d)
		if d == p.top || !strings.HasPrefix(d, p.top+"/") {
			return out
		}
	}
}

// layout is where every controller of the process is.
type layout struct {
	places map[string]place // controller (or ctlUnified) -> place
	notes  []string         // what was guessed, for debug logs
}

// resolve finds the process's leaf cgroup per controller from its
// /proc/<pid>/cgroup lines and mountinfo. Only cgroup mounts at or under
// cgroupRoot count, so fixture trees can carry their own mountinfo. A mount
// whose root is not "/" is a bind-mounted subtree (Docker on v1, some
// Kubernetes set-ups): its root is stripped from the cgroup path. A path of "/"
// inside a cgroup namespace is the namespace's root, which is what the mount
// shows. Controllers bound to v1 are read from v1 even on hybrid hosts; the
// rest come from the unified (v2) leaf.
func resolve(mode Mode, cgroups []procfs.Cgroup, mounts []*procfs.MountInfo, cgroupRoot string) layout {
	l := layout{places: map[string]place{}}
	cgroupRoot = filepath.Clean(cgroupRoot)

	var unifiedPath string
	haveUnified := false
	v1Paths := map[string]string{}
	for _, cg := range cgroups {
		if cg.HierarchyID == 0 && len(cg.Controllers) == 0 {
			unifiedPath, haveUnified = cg.Path, true
			continue
		}
		for _, name := range cg.Controllers {
			v1Paths[name] = cg.Path
		}
	}

	under := func(mp string) bool {
		mp = filepath.Clean(mp)
		return mp == cgroupRoot || strings.HasPrefix(mp, cgroupRoot+"/")
	}

	if mode == ModeV1 || mode == ModeHybrid {
		for _, name := range v1Controllers {
			path, ok := v1Paths[name]
			if !ok {
				continue
			}
			var m *procfs.MountInfo
			for _, mi := range mounts {
				if mi.FSType != "cgroup" || !under(mi.MountPoint) {
					continue
				}
				if _, has := mi.SuperOptions[name]; has {
					m = mi
					break
				}
			}
			if m == nil {
				top := filepath.Join(cgroupRoot, name)
				l.notes = append(l.notes, "no "+name+" mount under "+cgroupRoot+" in mountinfo; assuming "+top)
				l.places[name] = makePlace(top, "/", path, true, &l)
				continue
			}
			l.places[name] = makePlace(filepath.Clean(m.MountPoint), m.Root, path, true, &l)
		}
	}

	if (mode == ModeV2 || mode == ModeHybrid) && haveUnified {
		var m *procfs.MountInfo
		for _, mi := range mounts {
			if mi.FSType == "cgroup2" && under(mi.MountPoint) {
				m = mi
				break
			}
		}
		var u place
		if m == nil {
			top := cgroupRoot
			if mode == ModeHybrid {
				top = filepath.Join(cgroupRoot, ctlUnified)
			}
			l.notes = append(l.notes, "no cgroup2 mount under "+cgroupRoot+" in mountinfo; assuming "+top)
			u = makePlace(top, "/", unifiedPath, false, &l)
		} else {
			u = makePlace(filepath.Clean(m.MountPoint), m.Root, unifiedPath, false, &l)
		}
		l.places[ctlUnified] = u
		// On v2 every controller lives in the one leaf; on hybrid only those
		// not bound to a v1 hierarchy (their files exist only if enabled).
		for _, name := range []string{ctlMemory, ctlCPU, ctlCPUSet, ctlPids} {
			if _, bound := l.places[name]; !bound {
				l.places[name] = u
			}
		}
	}
	return l
}

// modeOfMounts is containerd's rule (cgroups.Mode) for a root other than
// /sys/fs/cgroup, read from mountinfo rather than statfs: cgroup2 mounted
// at root is v2, else cgroup2 at root/unified is hybrid, else cgroup v1
// mounted at or under root is v1. Nothing of the kind: unavailable.
func modeOfMounts(mounts []*procfs.MountInfo, root string) Mode {
	root = filepath.Clean(root)
	mounted := func(fsType string, at func(mp string) bool) bool {
		for _, m := range mounts {
			if m.FSType == fsType && at(filepath.Clean(m.MountPoint)) {
				return true
			}
		}
		return false
	}
	switch {
	case mounted("cgroup2", func(mp string) bool { return mp == root }):
		return ModeV2
	case mounted("cgroup2", func(mp string) bool { return mp == filepath.Join(root, ctlUnified) }):
		return ModeHybrid
	case mounted("cgroup", func(mp string) bool { return mp == root || strings.HasPrefix(mp, root+"/") }):
		return ModeV1
	}
	return ModeUnavailable
}

// makePlace joins a cgroup path (as /proc/<pid>/cgroup shows it) onto the
// mount point, stripping the mount's root.
func makePlace(mountPoint, mountRoot, cgPath string, v1 bool, l *layout) place {
	rel, ok := stripRoot(cgPath, mountRoot)
	if !ok {
		l.notes = append(l.notes, "cgroup "+cgPath+" is outside the mount of "+mountRoot+" at "+mountPoint+"; reading the mount's top")
	}
	return place{dir: filepath.Join(mountPoint, rel), top: mountPoint, rel: rel, v1: v1}
}

// stripRoot returns cgPath relative to mountRoot ("/" based), and false when
// cgPath is not inside mountRoot (then "/"): a path outside a cgroup
// namespace shows as "/../x", and a bind mount of another subtree does not
// contain the process's cgroup at all.
func stripRoot(cgPath, mountRoot string) (string, bool) {
	if strings.HasPrefix(cgPath, "/..") || !strings.HasPrefix(cgPath, "/") {
		return "/", false
	}
	p := filepath.Clean(cgPath)
	r := filepath.Clean(mountRoot)
	if r == "/" {
		return p, true
	}
	if p == r {
		return "/", true
	}
	if strings.HasPrefix(p, r+"/") {
		return p[len(r):], true
	}
	return "/", false
}
