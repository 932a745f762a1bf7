package cgroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3"
	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/internal/kfile"
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

// hostRoot is where the host's cgroup filesystems are mounted, the only
// root containerd's mode detection looks at.
const hostRoot = "/sys/fs/cgroup"

// Layout is the cgroup layout under a root, found once (FindLayout): its
// mode, the cgroup filesystems mounted there (from the mountinfo of the
// process it was found for), and that process's cgroup
// in each. The cgroup collector reads the process's cgroups; the process
// collector looks for the child's tree in the child's. It is read-only
// once found: safe for concurrent use.
type Layout struct {
	mode     Mode
	procRoot string
	root     string              // the cgroup root, cleaned
	mounts   []*procfs.MountInfo // cgroup and cgroup2 mounts at or under root
	places   map[string]place    // controller (or ctlUnified) -> the process's cgroup
	notes    []string            // what was guessed, for debug logs
}

// Options say where to find a Layout. Zero values take the defaults shown.
type Options struct {
	// Context bounds the reads (a Build's deadline); nil: none but the
	// bounded reader's own.
	Context    context.Context
	ProcRoot   string // "/proc"
	CgroupRoot string // "/sys/fs/cgroup"; only cgroup mounts at or under it count
	PID        int    // os.Getpid(): the child shares bridge's cgroup
	// Mode is the layout under CgroupRoot. Zero: containerd's cgroups.Mode
	// (a statfs of /sys/fs/cgroup) when CgroupRoot is the host's
	// /sys/fs/cgroup; under another root (a sidecar's mount of the host's,
	// a fixture tree) containerd cannot look, so the same rule is applied
	// to the filesystems the process's mountinfo shows mounted there
	// (modeOfMounts).
	Mode Mode
	Log  *slog.Logger // slog.Default(); debug notes on what was guessed
}

// FindLayout finds the cgroup layout under opts.CgroupRoot and the cgroups
// of process opts.PID in it. It fails with ErrUnavailable when there is
// none to read; the caller then leaves the container scope out.
func FindLayout(opts Options) (*Layout, error) {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = hostRoot
	}
	if opts.PID == 0 {
		opts.PID = os.Getpid()
	}
	if opts.Mode == "" && filepath.Clean(opts.CgroupRoot) == hostRoot {
		opts.Mode = hostMode()
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	log := opts.Log.With("source", "cgroup")
	if err := checkMode(opts); err != nil {
		return nil, err
	}
	procDir := filepath.Join(opts.ProcRoot, strconv.Itoa(opts.PID))
	if st, err := kfile.Stat(opts.Context, procDir); err != nil || !st.IsDir() {
		if err == nil {
			err = fmt.Errorf("%s is not a directory", procDir)
		}
		return nil, fmt.Errorf("%w: process %d under %s: %w", ErrUnavailable, opts.PID, opts.ProcRoot, err)
	}
	cgs, err := readCgroups(opts.Context, opts.ProcRoot, opts.PID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	mounts, err := readMounts(opts.Context, opts.ProcRoot, opts.PID)
	if errors.Is(err, kfile.ErrNoAnswer) {
		return nil, err
	}
	if err != nil {
		// Without mountinfo the conventional layout under CgroupRoot is
		// still a good guess; resolve notes what it assumed.
		log.Debug("no mountinfo; assuming the usual mount points", "path", filepath.Join(procDir, "mountinfo"), "err", err)
	}
	l := &Layout{procRoot: opts.ProcRoot, root: filepath.Clean(opts.CgroupRoot)}
	for _, m := range mounts {
		if (m.FSType == "cgroup" || m.FSType == "cgroup2") && l.under(m.MountPoint) {
			l.mounts = append(l.mounts, m)
		}
	}
	if opts.Mode == "" {
		opts.Mode = modeOfMounts(l.mounts, l.root)
		if err := checkMode(opts); err != nil {
			return nil, fmt.Errorf("%w (in %s)", err, filepath.Join(procDir, "mountinfo"))
		}
	}
	l.mode = opts.Mode
	l.resolve(cgs)
	l.markRoots(opts.Context)
	for _, n := range l.notes {
		log.Debug(n)
	}
	if len(l.places) == 0 {
		return nil, fmt.Errorf("%w: %s lists no %s hierarchy", ErrUnavailable, filepath.Join(procDir, "cgroup"), l.mode)
	}
	return l, nil
}

// hostMode is containerd's cgroups.Mode: a statfs of /sys/fs/cgroup (and
// of its unified/), which cannot be pointed elsewhere.
func hostMode() Mode {
	switch cgroups.Mode() {
	case cgroups.Unified:
		return ModeV2
	case cgroups.Hybrid:
		return ModeHybrid
	case cgroups.Legacy:
		return ModeV1
	default:
		return ModeUnavailable
	}
}

// checkMode accepts a known layout; "" is not known yet.
func checkMode(opts Options) error {
	switch opts.Mode {
	case "", ModeV1, ModeV2, ModeHybrid:
		return nil
	case ModeUnavailable:
		return fmt.Errorf("%w: no cgroup filesystem at %s", ErrUnavailable, opts.CgroupRoot)
	default:
		return fmt.Errorf("cgroup mode %q: want v1, v2 or hybrid", opts.Mode)
	}
}

// Mode is the layout's mode.
func (l *Layout) Mode() Mode { return l.mode }

// Paths maps a controller (memory, cpu, cpuacct, cpuset, pids, unified)
// to the directory of the process's cgroup for it.
func (l *Layout) Paths() map[string]string {
	out := make(map[string]string, len(l.places))
	for name, p := range l.places {
		out[name] = p.dir
	}
	return out
}

// ProcsDir is the directory of pid's cgroup that narrows a search for the
// processes of pid's tree most: of pid's hierarchies (<proc>/<pid>/cgroup)
// mounted in this layout, the deepest cgroup with a cgroup.procs file. ""
// when pid sits at the top of every hierarchy this view shows (the search
// gains nothing over a scan), or nothing is found.
func (l *Layout) ProcsDir(ctx context.Context, pid int) string {
	cgs, err := readCgroups(ctx, l.procRoot, pid)
	if err != nil {
		return ""
	}
	best, bestDepth := "", 0
	for _, cg := range cgs {
		m := l.mountOf(cg)
		if m == nil {
			continue
		}
		rel, inside := stripRoot(cg.Path, m.Root)
		depth := strings.Count(rel, "/")
		if !inside || rel == "/" || depth <= bestDepth {
			continue
		}
		dir := filepath.Join(m.MountPoint, rel)
		if kfile.Exists(ctx, filepath.Join(dir, "cgroup.procs")) {
			best, bestDepth = dir, depth
		}
	}
	return best
}

// under reports whether mount point mp is the root or inside it.
func (l *Layout) under(mp string) bool {
	mp = filepath.Clean(mp)
	return mp == l.root || strings.HasPrefix(mp, l.root+"/")
}

// mountOf is the mount of the hierarchy of one /proc/<pid>/cgroup line:
// the cgroup2 mount for the unified line, else the v1 mount of one of its
// controllers (or of its name=, as systemd's); nil when none is mounted
// under the root.
func (l *Layout) mountOf(cg procfs.Cgroup) *procfs.MountInfo {
	if cg.HierarchyID == 0 && len(cg.Controllers) == 0 {
		return l.v2Mount()
	}
	for _, name := range cg.Controllers {
		if m := l.v1Mount(name); m != nil {
			return m
		}
	}
	return nil
}

// v1Mount is the v1 mount of controller name ("name=systemd" for a named
// hierarchy); nil when none is mounted under the root.
func (l *Layout) v1Mount(name string) *procfs.MountInfo {
	for _, m := range l.mounts {
		if m.FSType != "cgroup" {
			continue
		}
		if named, ok := strings.CutPrefix(name, "name="); ok {
			if v, has := m.SuperOptions["name"]; has && v == named {
				return m
			}
			continue
		}
		if _, has := m.SuperOptions[name]; has {
			return m
		}
	}
	return nil
}

// v2Mount is the first cgroup2 mount under the root; nil when none is.
func (l *Layout) v2Mount() *procfs.MountInfo {
	for _, m := range l.mounts {
		if m.FSType == "cgroup2" {
			return m
		}
	}
	return nil
}

// place is where one controller's files for the process are.
type place struct {
	dir string // absolute leaf directory
	top string // mount point: the highest ancestor this view can see
	rel string // dir relative to top, starting with "/"
	v1  bool
	// root: dir is the root cgroup of its hierarchy (isRootCgroup), whose
	// files count the whole host: no container's.
	root bool
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

// resolve finds the process's leaf cgroup per controller from its
// /proc/<pid>/cgroup lines and the mounts. A mount whose root is not "/" is
// a bind-mounted subtree (Docker on v1, some Kubernetes set-ups): its root
// is stripped from the cgroup path. A path of "/" inside a cgroup namespace
// is the namespace's root, which is what the mount shows. Controllers bound
// to v1 are read from v1 even on hybrid hosts; the rest come from the
// unified (v2) leaf.
func (l *Layout) resolve(cgroups []procfs.Cgroup) {
	l.places = map[string]place{}
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

	if l.mode == ModeV1 || l.mode == ModeHybrid {
		for _, name := range v1Controllers {
			path, ok := v1Paths[name]
			if !ok {
				continue
			}
			m := l.v1Mount(name)
			if m == nil {
				top := filepath.Join(l.root, name)
				l.notes = append(l.notes, "no "+name+" mount under "+l.root+" in mountinfo; assuming "+top)
				l.places[name] = l.makePlace(top, "/", path, true)
				continue
			}
			l.places[name] = l.makePlace(filepath.Clean(m.MountPoint), m.Root, path, true)
		}
	}

	if (l.mode == ModeV2 || l.mode == ModeHybrid) && haveUnified {
		var u place
		if m := l.v2Mount(); m == nil {
			top := l.root
			if l.mode == ModeHybrid {
				top = filepath.Join(l.root, ctlUnified)
			}
			l.notes = append(l.notes, "no cgroup2 mount under "+l.root+" in mountinfo; assuming "+top)
			u = l.makePlace(top, "/", unifiedPath, false)
		} else {
			u = l.makePlace(filepath.Clean(m.MountPoint), m.Root, unifiedPath, false)
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
}

// markRoots marks the places that are the root cgroup of their hierarchy.
func (l *Layout) markRoots(ctx context.Context) {
	for name, p := range l.places {
		if isRootCgroup(ctx, p.dir, p.v1) {
			p.root = true
			l.places[name] = p
		}
	}
}

// isRootCgroup reports whether dir is the root cgroup of its hierarchy,
// by the files the kernel shows only there or everywhere else: v1 shows
// cgroup.sane_behavior and release_agent only at the root; v2 shows
// cgroup.events in every cgroup but the root. A cgroup namespace's root
// or a bind-mounted container cgroup is no root: it has the files of any
// other cgroup, whatever path /proc/<pid>/cgroup gives ("/").
func isRootCgroup(ctx context.Context, dir string, v1 bool) bool {
	exists := func(name string) bool { return kfile.Exists(ctx, filepath.Join(dir, name)) }
	if v1 {
		return exists("cgroup.sane_behavior") || exists("release_agent")
	}
	return exists("cgroup.controllers") && !exists("cgroup.events")
}

// AtRoot are the controllers (memory, cpu, cpuacct, cpuset, pids, unified)
// whose cgroup for the process is the root of its hierarchy, sorted: their
// files are the host's, not a container's (a process on a host outside any
// container, a v1 host whose cpu cgroup is "/").
func (l *Layout) AtRoot() []string {
	var out []string
	for name, p := range l.places {
		if p.root {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// modeOfMounts is containerd's rule (cgroups.Mode) for a root other than
// /sys/fs/cgroup, read from the cgroup mounts at or under root rather than
// statfs: cgroup2 mounted at root is v2, else cgroup2 at root/unified is
// hybrid, else cgroup v1 mounted at or under root is v1. Nothing of the
// kind: unavailable.
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
func (l *Layout) makePlace(mountPoint, mountRoot, cgPath string, v1 bool) place {
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
