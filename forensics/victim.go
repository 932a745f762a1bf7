package forensics

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
)

// Victim is a process the OOM killer took during the job.
type Victim struct {
	PID   int    // as the kernel's log names it, else in --proc-root's namespace
	Name  string // its comm
	RSSMB float64
	// Logged: the kernel's log names it, with its RSS when killed.
	// Otherwise it is a guess: the largest process of the job's tree in
	// the last sample before the kill (the OOM killer takes the largest),
	// its RSS then, at At.
	Logged bool
	At     time.Time
}

// Text is the victim for a sentence: "python3 (pid 12576, RSS 206.3 MB)",
// and for a guess what it rests on.
func (v Victim) Text() string {
	s := fmt.Sprintf("%s (pid %d, RSS %.1f MB)", v.Name, v.PID, v.RSSMB)
	if !v.Logged {
		s = fmt.Sprintf("most likely %s (pid %d), the largest of the job's processes in the last sample, RSS %.1f MB at %s UTC",
			v.Name, v.PID, v.RSSMB, v.At.UTC().Format("15:04:05"))
	}
	return s
}

// logged are the job's processes the kernel's log names as OOM-killed
// during the job; why says why it names none, "" when it does.
func logged(r Run) (vs []Victim, why string) {
	for _, k := range r.Kills {
		if ours(k, r) {
			vs = append(vs, Victim{PID: k.PID, Name: k.Name, RSSMB: k.RSSMB(), Logged: true})
		}
	}
	switch {
	case len(vs) > 0:
	case r.KillsWhy != "":
		why = "the kernel's log could not be read: " + r.KillsWhy
	case len(r.Kills) > 0:
		why = fmt.Sprintf("the kernel's log names %d OOM kills during the job, none of a process bridge can tell is this job's (another cgroup's, or a pid namespace bridge cannot map)", len(r.Kills))
	default:
		why = "the kernel's log names no OOM kill during the job"
	}
	return vs, why
}

// ours reports whether kill k took one of the job's processes: one of
// its last sample's, by pid and name (bridge in the kernel's pid
// namespace), or one in bridge's memory cgroup or below it (the cgroup as
// /proc/self/cgroup names it: never the root of a cgroup namespace, which
// the kernel names otherwise).
func ours(k OOMKill, r Run) bool {
	for _, p := range r.Processes.Procs {
		if p.PID == k.PID && p.Name == k.Name {
			return true
		}
	}
	cg := r.Cgroup
	return cg != "" && cg != "/" && k.Memcg != "" && (k.Memcg == cg || strings.HasPrefix(k.Memcg, cg+"/"))
}

// largest is the process of l with the largest RSS, the root (the first)
// left out when butRoot: the command that outlived the kill was not its
// victim.
func largest(l metrics.ProcessList, butRoot bool) (Victim, bool) {
	ps := l.Procs
	if butRoot && len(ps) > 0 {
		ps = ps[1:]
	}
	if len(ps) == 0 {
		return Victim{}, false
	}
	ps = append([]metrics.ProcessInfo(nil), ps...)
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].RSSBytes > ps[j].RSSBytes })
	p := ps[0]
	return Victim{PID: p.PID, Name: p.Name, RSSMB: metrics.MB(float64(p.RSSBytes)), At: l.At}, true
}

// OwnCgroup is bridge's memory cgroup as the kernel's log names a killed
// task's (task_memcg): the memory controller's line of
// <procRoot>/self/cgroup on cgroup v1, the unified one on v2; "" when it
// cannot be read within ctx.
func OwnCgroup(ctx context.Context, procRoot string) string {
	b, err := kfile.ReadFile(ctx, filepath.Join(procRoot, "self", "cgroup"), kfile.Table)
	if err != nil {
		return ""
	}
	return memoryCgroup(string(b))
}

// memoryCgroup reads the memory cgroup from /proc/<pid>/cgroup's lines
// "id:controllers:path": the v1 memory controller's, else v2's "0::".
func memoryCgroup(text string) string {
	unified := ""
	for _, l := range strings.Split(text, "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				return parts[2]
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
		}
	}
	return unified
}
