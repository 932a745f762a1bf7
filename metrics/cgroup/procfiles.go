package cgroup

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/internal/kfile"
)

// A process's cgroup and mountinfo files are read through the bounded
// reader and parsed here into procfs's types, as procfs parses them:
// procfs reads them with no time bound, and mountinfo with no size bound
// (a node with many mounts), and its parsers are not exported.

// readCgroups reads <procRoot>/<pid>/cgroup.
func readCgroups(ctx context.Context, procRoot string, pid int) ([]procfs.Cgroup, error) {
	path := filepath.Join(procRoot, strconv.Itoa(pid), "cgroup")
	b, err := kfile.ReadFile(ctx, path, kfile.Table)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	cgs, err := parseCgroups(string(b))
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return cgs, nil
}

// parseCgroups parses a /proc/<pid>/cgroup file: one
// "hierarchy-ID:controller-list:cgroup-path" a line.
func parseCgroups(s string) ([]procfs.Cgroup, error) {
	var out []procfs.Cgroup
	for line := range strings.Lines(s) {
		line = strings.TrimRight(line, "\n")
		if line == "" {
			continue
		}
		fields := strings.SplitN(line, ":", 3)
		if len(fields) != 3 {
			return nil, fmt.Errorf("line %q: want hierarchy-ID:controllers:path", line)
		}
		id, err := strconv.Atoi(fields[0])
		if err != nil {
			return nil, fmt.Errorf("line %q: hierarchy ID %q is not a number", line, fields[0])
		}
		cg := procfs.Cgroup{HierarchyID: id, Path: fields[2]}
		if fields[1] != "" {
			cg.Controllers = strings.Split(fields[1], ",")
		}
		out = append(out, cg)
	}
	return out, nil
}

// readMounts reads <procRoot>/<pid>/mountinfo.
func readMounts(ctx context.Context, procRoot string, pid int) ([]*procfs.MountInfo, error) {
	path := filepath.Join(procRoot, strconv.Itoa(pid), "mountinfo")
	b, err := kfile.ReadFile(ctx, path, kfile.Table)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	ms, err := parseMountInfo(string(b))
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return ms, nil
}

// parseMountInfo parses a mountinfo file (proc_pid_mountinfo(5)): the
// fields this package uses, Root, MountPoint, FSType, Source and the
// superblock options, and the rest as procfs fills them.
func parseMountInfo(s string) ([]*procfs.MountInfo, error) {
	var out []*procfs.MountInfo
	for line := range strings.Lines(s) {
		line = strings.TrimRight(line, "\n")
		if line == "" {
			continue
		}
		before, after, ok := strings.Cut(line, " - ")
		f := strings.Split(before, " ")
		if !ok || len(f) < 6 {
			return nil, fmt.Errorf("line %q: want at least 6 fields, then \" - \"", line)
		}
		m := &procfs.MountInfo{MajorMinorVer: f[2], Root: f[3], MountPoint: f[4], Options: options(f[5]), OptionalFields: map[string]string{}}
		var err error
		if m.MountID, err = strconv.Atoi(f[0]); err != nil {
			return nil, fmt.Errorf("line %q: mount ID %q is not a number", line, f[0])
		}
		if m.ParentID, err = strconv.Atoi(f[1]); err != nil {
			return nil, fmt.Errorf("line %q: parent ID %q is not a number", line, f[1])
		}
		for _, o := range f[6:] {
			k, v, _ := strings.Cut(o, ":")
			switch k {
			case "shared", "master", "propagate_from", "unbindable":
				m.OptionalFields[k] = v
			}
		}
		g := strings.SplitN(after, " ", 3)
		if len(g) != 3 {
			return nil, fmt.Errorf("line %q: want the filesystem type, the source and the superblock options after \" - \"", line)
		}
		m.FSType, m.Source, m.SuperOptions = g[0], g[1], options(g[2])
		out = append(out, m)
	}
	return out, nil
}

// options parses a comma-separated list of options, each "key" or
// "key=value".
func options(s string) map[string]string {
	out := map[string]string{}
	for o := range strings.SplitSeq(s, ",") {
		k, v, _ := strings.Cut(o, "=")
		out[k] = v
	}
	return out
}
