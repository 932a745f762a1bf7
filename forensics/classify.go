package forensics

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/supervisor"
)

// Reasons, the values of the bridge.exit_reason tag.
const (
	ReasonSuccess        = "success"
	ReasonAppError       = "app_error"
	ReasonCgroupOOMKill  = "cgroup_oom_kill"
	ReasonNodeOOMKill    = "node_oom_kill"
	ReasonKilledBySignal = "killed_by_signal"
	ReasonGPUError       = "gpu_error"
	ReasonUnknown        = "unknown"
)

// plainSuccess is the summary of a success with nothing to note.
const plainSuccess = "the command exited with code 0"

// Verdict is how the run ended and the facts that say so.
type Verdict struct {
	Reason   string            // one of the Reason constants
	Summary  string            // one sentence for a person
	Rule     string            // the rule that decided, e.g. "oom_kill_rose+oom_rose"
	Evidence map[string]string // the facts it rests on, e.g. "oom_kill": "0 -> 1"
}

// Thresholds tune the rules that weigh memory against a limit.
type Thresholds struct {
	// NearLimitPercent: a working set at or above this share of the limit in
	// the last samples is near it; below it is far from it.
	NearLimitPercent float64
	// The node is low on memory when its lowest MemAvailable in the last
	// samples is below NodeLowPercent of MemTotal or below NodeLowMB.
	NodeLowPercent float64
	NodeLowMB      float64
}

// DefaultThresholds are what Classify uses.
var DefaultThresholds = Thresholds{NearLimitPercent: 80, NodeLowPercent: 5, NodeLowMB: 256}

// Classify applies the rules with DefaultThresholds.
func Classify(e Evidence) Verdict { return ClassifyWith(e, DefaultThresholds) }

// terminating are the forwarded signals whose default action ends a process.
var terminating = map[syscall.Signal]bool{
	syscall.SIGTERM: true, syscall.SIGINT: true, syscall.SIGHUP: true, syscall.SIGQUIT: true,
}

// crash signals are raised by the process against itself (a fault, abort()).
var crash = map[syscall.Signal]bool{
	syscall.SIGSEGV: true, syscall.SIGABRT: true, syscall.SIGBUS: true, syscall.SIGFPE: true, syscall.SIGILL: true,
}

// ClassifyWith applies the rules, first match wins:
//
//  1. exit 0 -> success (an OOM kill or Xid during the job is noted).
//  2. SIGKILL and oom_kill rose -> cgroup_oom_kill or node_oom_kill
//     (oomVerdict): memory.events oom rose -> cgroup; oom known steady (v2)
//     -> node if the node was low and the cgroup far from its limit, else a
//     limit above the cgroup; no oom counter (v1): near the limit -> cgroup,
//     node low -> node, usage high-water mark at the limit -> cgroup, else
//     cgroup with the domain "not seen".
//  3. died of a signal bridge forwarded, or exited non-zero after bridge
//     forwarded a terminating one (SIGTERM, SIGINT, SIGHUP, SIGQUIT) ->
//     killed_by_signal, forwarded.
//  4. oom_kill rose and the command exited non-zero (a worker killed, the
//     parent failing on it) -> cgroup_oom_kill or node_oom_kill, "a process in
//     the cgroup".
//  5. a GPU Xid was reported -> gpu_error (before app_error: a GPU fault
//     surfaces as a CUDA error and a non-zero exit).
//  6. SIGKILL without an oom_kill rise (sigkillVerdict): far from the limit
//     with the node low -> node_oom_kill; oom_kill known steady -> killed_by_
//     signal; counter unknown and near the limit -> cgroup_oom_kill
//     (inferred); far from the limit, node fine -> killed_by_signal; else
//     unknown.
//  7. any other signal -> killed_by_signal.
//  8. non-zero exit -> app_error.
//
// An exit code 129..192 without a signal is read as 128+N reported by a
// wrapper (sh -c, a launcher) whose own child died of signal N.
func ClassifyWith(e Evidence, th Thresholds) Verdict {
	c := &classifier{e: e, th: th, facts: baseFacts(e)}
	return c.classify()
}

type classifier struct {
	e     Evidence
	th    Thresholds
	facts map[string]string
}

func (c *classifier) verdict(reason, rule, summary string) Verdict {
	c.facts["rule"] = rule
	return Verdict{Reason: reason, Rule: rule, Summary: summary, Evidence: c.facts}
}

func (c *classifier) classify() Verdict {
	e := c.e
	sig, inferred := effectiveSignal(e)
	if inferred {
		c.facts["signal"] = supervisor.SignalName(sig)
		c.facts["signal_inferred_from_exit_code"] = "true"
	}
	if e.ExitCode == 0 && e.Signal == 0 {
		s := plainSuccess
		var notes []string
		if e.OOMKill.Rose() {
			what := "a process in the cgroup was"
			if len(e.Killed) > 0 {
				what = victimsText(e.Killed) + " was"
				c.noteVictims(e.Killed)
			}
			notes = append(notes, fmt.Sprintf("%s OOM-killed during the job (oom_kill %s)", what, counterText(e.OOMKill)))
		}
		if len(e.Xids) > 0 {
			notes = append(notes, "GPU Xid errors were reported ("+xidText(e.Xids)+")")
		}
		if len(notes) > 0 {
			s += "; note: " + strings.Join(notes, "; ")
		}
		return c.verdict(ReasonSuccess, "exit_0", s)
	}

	if sig == syscall.SIGKILL && e.OOMKill.Rose() {
		return c.oomVerdict(true, inferred)
	}

	if sig == syscall.SIGKILL && e.KilledAfter > 0 {
		c.facts["forwarded"] = "true"
		c.facts["kill_after"] = e.KilledAfter.String()
		s := fmt.Sprintf("killed by SIGKILL, which bridge sent because the command was still running %s (--kill-after) after bridge forwarded a terminating signal to it", e.KilledAfter)
		if fwd, ok := lastTerminating(e.Forwarded); ok {
			s = fmt.Sprintf("killed by SIGKILL, which bridge sent because the command was still running %s (--kill-after) after bridge forwarded %s to it", e.KilledAfter, supervisor.SignalName(fwd.Signal))
		}
		return c.verdict(ReasonKilledBySignal, "kill_after", s)
	}
	if fwd, ok := forwardedSignal(e, sig); ok {
		c.facts["forwarded"] = "true"
		c.facts["forwarded_signal"] = supervisor.SignalName(fwd.Signal)
		s := fmt.Sprintf("killed by %s, which bridge forwarded to the command (%s before the exit)",
			supervisor.SignalName(sig), duration(e.ExitTime.Sub(fwd.Time)))
		if inferred {
			s = fmt.Sprintf("exited with code %d (128+%s) after bridge forwarded %s to it %s before the exit",
				e.ExitCode, supervisor.SignalName(sig), supervisor.SignalName(fwd.Signal), duration(e.ExitTime.Sub(fwd.Time)))
		}
		return c.verdict(ReasonKilledBySignal, "forwarded_signal", s+
			": bridge itself was signalled (kubelet on eviction, preemption or pod deletion; docker stop; Ctrl-C)")
	}
	if fwd, ok := lastTerminating(e.Forwarded); ok && sig == 0 {
		c.facts["forwarded"] = "true"
		c.facts["forwarded_signal"] = supervisor.SignalName(fwd.Signal)
		return c.verdict(ReasonKilledBySignal, "exit_after_forwarded_signal", fmt.Sprintf(
			"exited with code %d, %s after bridge forwarded %s to it: bridge itself was signalled "+
				"(kubelet on eviction, preemption or pod deletion; docker stop; Ctrl-C)",
			e.ExitCode, duration(e.ExitTime.Sub(fwd.Time)), supervisor.SignalName(fwd.Signal)))
	}

	if e.OOMKill.Rose() {
		return c.oomVerdict(false, inferred)
	}

	if len(e.Xids) > 0 {
		how := fmt.Sprintf("exited with code %d", e.ExitCode)
		if sig != 0 {
			how = "died of " + supervisor.SignalName(sig)
		}
		return c.verdict(ReasonGPUError, "xid", fmt.Sprintf("the GPU driver reported %s during the job and the command %s",
			xidText(e.Xids), how))
	}

	if sig == syscall.SIGKILL {
		return c.sigkillVerdict(inferred)
	}
	if sig != 0 {
		c.facts["forwarded"] = "false"
		who := "not forwarded by bridge: sent to the process directly"
		if crash[sig] {
			who = "raised by the process itself (a crash in native code, an abort, a failed assertion)"
		}
		s := fmt.Sprintf("killed by %s, %s", supervisor.SignalName(sig), who)
		if inferred {
			s = fmt.Sprintf("exited with code %d: a process under the command died of %s, %s", e.ExitCode, supervisor.SignalName(sig), who)
		}
		return c.verdict(ReasonKilledBySignal, "signal", s)
	}
	if e.ExitCode != 0 {
		s := fmt.Sprintf("the command exited with code %d", e.ExitCode)
		if c.nearLimit() {
			s += fmt.Sprintf(" while its working set was near the limit (a failed allocation may be the cause): %s", c.memText())
		}
		return c.verdict(ReasonAppError, "exit_nonzero", s)
	}
	return c.verdict(ReasonUnknown, "none", "no rule fits: "+c.seen())
}

// oomVerdict is for an oom_kill rise: which OOM domain killed. main says the
// command itself died of SIGKILL (or reported it).
func (c *classifier) oomVerdict(main, inferred bool) Verdict {
	e := c.e
	facts := fmt.Sprintf("oom_kill %s", counterText(e.OOMKill))
	if e.OOM.Known {
		facts += fmt.Sprintf(", oom %s", counterText(e.OOM))
	}
	if e.OOMGroupKill.Rose() {
		facts += fmt.Sprintf(", oom_group_kill %s", counterText(e.OOMGroupKill))
	}
	if e.Memory.Known {
		facts += ", " + c.memText()
	}
	named := ""
	if vs := c.victims(main && !inferred); len(vs) > 0 {
		c.noteVictims(vs)
		named = "; it killed " + victimsText(vs)
	}
	say := func(domain string) string {
		switch {
		case !main:
			return fmt.Sprintf("a process other than the command itself (a worker, most likely) was killed by the kernel's OOM killer %s, and the command then %s%s: %s",
				domain, c.how(), named, facts)
		case inferred:
			return fmt.Sprintf("the command exited with code %d (128+SIGKILL): a process under it was killed by the kernel's OOM killer %s%s: %s",
				e.ExitCode, domain, named, facts)
		default:
			return fmt.Sprintf("killed by the kernel's OOM killer %s%s: %s", domain, named, facts)
		}
	}
	switch {
	case e.OOM.Rose():
		// memory.events oom rises only in the cgroup that reached its limit
		// (and its ancestors), so this cgroup's own limit was hit.
		return c.verdict(ReasonCgroupOOMKill, "oom_kill_rose+oom_rose",
			say("in the container's cgroup, which reached its memory limit"))
	case e.OOM.Steady():
		// v2: oom_kill counts the victim's cgroup whatever the domain, oom
		// only the one at its limit: the domain was above this cgroup.
		if c.nodeLow() && !c.nearLimit() {
			return c.verdict(ReasonNodeOOMKill, "oom_kill_rose+oom_steady+node_low",
				say("because the node ran out of memory (the cgroup did not reach its own limit)")+", "+c.nodeText())
		}
		c.facts["oom_domain"] = "ancestor cgroup or node"
		return c.verdict(ReasonCgroupOOMKill, "oom_kill_rose+oom_steady",
			say("for a limit above the container's cgroup (a pod or slice limit shared with siblings, or the node)"))
	case c.nearLimit():
		return c.verdict(ReasonCgroupOOMKill, "oom_kill_rose+near_limit",
			say("in the container's cgroup, near its memory limit"))
	case c.peakAtLimit():
		// Allocations faster than the sampling interval: the samples miss
		// the end, the kernel's high-water mark does not. It comes before
		// the node's memory: with oom_kill risen and usage at the cgroup's
		// limit, that limit is the likelier domain.
		return c.verdict(ReasonCgroupOOMKill, "oom_kill_rose+peak_at_limit",
			say(fmt.Sprintf("in the container's cgroup, whose usage reached its memory limit (kernel high-water mark %.1f MB)",
				e.Memory.PeakUsageMB.Value)))
	case c.nodeLow():
		return c.verdict(ReasonNodeOOMKill, "oom_kill_rose+far_from_limit+node_low",
			say("while the node was out of memory and the cgroup far from its limit")+", "+c.nodeText())
	default:
		c.facts["oom_domain"] = "not seen"
		return c.verdict(ReasonCgroupOOMKill, "oom_kill_rose",
			say("although the last samples show neither the limit nor the node near exhaustion (a spike between samples, or an ancestor's limit)"))
	}
}

// sigkillVerdict is for a SIGKILL without an oom_kill rise.
func (c *classifier) sigkillVerdict(inferred bool) Verdict {
	e := c.e
	c.facts["forwarded"] = "false"
	what := "killed by SIGKILL"
	if inferred {
		what = fmt.Sprintf("exited with code %d (128+SIGKILL: a process under the command was killed)", e.ExitCode)
	}
	far := c.farFromLimit()
	if far && c.nodeLow() {
		by := "the kernel's counter did not record it in this cgroup: a user-space OOM killer (systemd-oomd, earlyoom) or a kubelet hard eviction"
		if !e.OOMKill.Known {
			by = "no OOM-kill counter to confirm it"
		}
		return c.verdict(ReasonNodeOOMKill, "sigkill+far_from_limit+node_low",
			fmt.Sprintf("%s while the node was out of memory and the cgroup far from its limit: %s, %s; %s",
				what, c.nodeText(), c.memText(), by))
	}
	if e.OOMKill.Steady() {
		s := fmt.Sprintf("%s, not by the kernel's OOM killer (oom_kill %s): someone else sent it (kill -9, a kubelet or runtime after a grace period, a failed liveness probe)",
			what, counterText(e.OOMKill))
		if fwd, ok := lastTerminating(e.Forwarded); ok {
			s = fmt.Sprintf("%s %s after bridge forwarded %s: the grace period ran out (oom_kill %s)",
				what, duration(e.ExitTime.Sub(fwd.Time)), supervisor.SignalName(fwd.Signal), counterText(e.OOMKill))
		}
		if c.nearLimit() {
			s += fmt.Sprintf("; the working set was near the limit, where reclaim can stall a health check: %s", c.memText())
		}
		return c.verdict(ReasonKilledBySignal, "sigkill+oom_kill_steady", s)
	}
	if !e.OOMKill.Known && c.nearLimit() {
		c.facts["inferred"] = "true"
		return c.verdict(ReasonCgroupOOMKill, "sigkill+no_counter+near_limit",
			fmt.Sprintf("%s near the memory limit, most likely by the kernel's OOM killer, but no OOM-kill counter was readable to confirm it: %s", what, c.memText()))
	}
	if far && e.Node.Known {
		return c.verdict(ReasonKilledBySignal, "sigkill+far_from_limit+node_ok",
			fmt.Sprintf("%s by someone else, with the cgroup far from its limit and memory left on the node: %s, %s", what, c.memText(), c.nodeText()))
	}
	return c.verdict(ReasonUnknown, "sigkill+unexplained",
		fmt.Sprintf("%s, and what bridge measured cannot say by whom: %s", what, c.seen()))
}

// victims are the processes an OOM kill took: those the kernel's log
// names, else the largest of the child's processes in the last sample
// (the OOM killer takes the largest), the command itself left out unless
// root says the kill ended it.
func (c *classifier) victims(root bool) []Victim {
	if len(c.e.Killed) > 0 {
		return c.e.Killed
	}
	if v, ok := largest(c.e.Processes, !root); ok {
		return []Victim{v}
	}
	return nil
}

// noteVictims adds the victims to the facts: the first's name, pid, RSS
// and what names it, and how many there were.
func (c *classifier) noteVictims(vs []Victim) {
	v := vs[0]
	c.facts["killed_process"] = v.Name
	c.facts["killed_pid"] = strconv.Itoa(v.PID)
	c.facts["killed_rss_megabytes"] = mb(v.RSSMB)
	c.facts["killed_named_by"] = "kernel log"
	if !v.Logged {
		c.facts["killed_named_by"] = "largest process in the last sample"
	}
	if len(vs) > 1 {
		c.facts["killed_processes"] = strconv.Itoa(len(vs))
	}
	if c.e.KilledWhy != "" {
		c.facts["kernel_log"] = c.e.KilledWhy
	}
}

// victimsText names the victims: "python3 (pid 12576, RSS 206.3 MB)",
// several joined by "and".
func victimsText(vs []Victim) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.Text()
	}
	return strings.Join(parts, " and ")
}

func (c *classifier) nearLimit() bool {
	m := c.e.Memory
	return m.Known && m.LimitMB > 0 && m.RecentSharePercent >= c.th.NearLimitPercent
}

// peakAtLimit: the kernel's usage high-water mark (page cache included)
// reached the limit at some point. Alone it is no sign of an OOM (the page
// cache fills a cgroup to its limit), only a hint at which limit killed.
func (c *classifier) peakAtLimit() bool {
	m := c.e.Memory
	return m.Known && m.LimitMB > 0 && m.PeakUsageMB.Known && m.PeakUsageMB.Value >= summary.AtLimit*m.LimitMB
}

func (c *classifier) farFromLimit() bool {
	m := c.e.Memory
	return m.Known && (m.LimitMB == 0 || m.RecentSharePercent < c.th.NearLimitPercent)
}

func (c *classifier) nodeLow() bool {
	n := c.e.Node
	if !n.Known {
		return false
	}
	return n.MinAvailableMB < c.th.NodeLowMB || (n.TotalMB > 0 && n.MinAvailablePercent < c.th.NodeLowPercent)
}

func (c *classifier) how() string {
	if sig, _ := effectiveSignal(c.e); sig != 0 {
		return "died of " + supervisor.SignalName(sig)
	}
	return fmt.Sprintf("exited with code %d", c.e.ExitCode)
}

// memText is the working set of the last samples: "sampled", since a
// job that dies between two samples shows little of what it reached.
func (c *classifier) memText() string {
	m := c.e.Memory
	if !m.Known {
		return "working set not sampled"
	}
	if m.LimitMB == 0 {
		return fmt.Sprintf("sampled working set %.1f MB, no memory limit", m.RecentWorkingSetMB)
	}
	return fmt.Sprintf("sampled working set %.1f MB of limit %.1f MB (%.1f%%)", m.RecentWorkingSetMB, m.LimitMB, m.RecentSharePercent)
}

func (c *classifier) nodeText() string {
	n := c.e.Node
	if !n.Known {
		return "node memory not measured"
	}
	if n.TotalMB > 0 {
		return fmt.Sprintf("node MemAvailable %.0f MB of %.0f MB (%.1f%%)", n.MinAvailableMB, n.TotalMB, n.MinAvailablePercent)
	}
	return fmt.Sprintf("node MemAvailable %.0f MB", n.MinAvailableMB)
}

// seen lists what was measured, for verdicts no rule explains.
func (c *classifier) seen() string {
	e := c.e
	parts := []string{fmt.Sprintf("exit code %d", e.ExitCode)}
	if e.Signal != 0 {
		parts = append(parts, "signal "+supervisor.SignalName(e.Signal))
	}
	if e.OOMKill.Known {
		parts = append(parts, "oom_kill "+counterText(e.OOMKill))
	} else {
		parts = append(parts, "no OOM-kill counter")
	}
	parts = append(parts, c.memText(), c.nodeText())
	return strings.Join(parts, ", ")
}

// baseFacts are the facts every verdict carries.
func baseFacts(e Evidence) map[string]string {
	f := map[string]string{"exit_code": strconv.Itoa(e.ExitCode)}
	if e.Signal != 0 {
		f["signal"] = supervisor.SignalName(e.Signal)
	}
	if len(e.Forwarded) > 0 {
		var s []string
		for _, r := range e.Forwarded {
			s = append(s, supervisor.SignalName(r.Signal)+"@"+r.Time.UTC().Format(time.RFC3339Nano))
		}
		f["forwarded_signals"] = strings.Join(s, " ")
	}
	if e.CgroupVersion != "" {
		f["cgroup_version"] = e.CgroupVersion
	}
	for name, c := range map[string]Counter{"oom_kill": e.OOMKill, "oom": e.OOM, "oom_group_kill": e.OOMGroupKill} {
		if c.Known {
			f[name] = counterText(c)
		}
	}
	if m := e.Memory; m.Known {
		f["recent_working_set_megabytes"] = mb(m.RecentWorkingSetMB)
		// The samples' peak, named so: bridge.peak_working_set_megabytes
		// is the kernel's mark at an OOM kill (PeakWorkingSet), and the
		// gap between them is what the samples missed.
		f["sampled_peak_working_set_megabytes"] = mb(m.PeakWorkingSetMB)
		if m.LimitMB > 0 {
			f["memory_limit_megabytes"] = mb(m.LimitMB)
			f["recent_working_set_share_of_limit_percentage"] = mb(m.RecentSharePercent)
		} else {
			f["memory_limit_megabytes"] = "no limit"
		}
		if m.PeakUsageMB.Known {
			f["peak_usage_megabytes"] = mb(m.PeakUsageMB.Value)
			if m.LimitMB > 0 {
				f["peak_usage_share_of_limit_percentage"] = mb(100 * m.PeakUsageMB.Value / m.LimitMB)
			}
		}
	}
	if n := e.Node; n.Known {
		f["node_min_available_megabytes"] = mb(n.MinAvailableMB)
		if n.TotalMB > 0 {
			f["node_total_megabytes"] = mb(n.TotalMB)
		}
	}
	if e.PeakMemoryPressureSome.Known {
		f["peak_memory_pressure_some_percentage"] = mb(e.PeakMemoryPressureSome.Value)
	}
	if e.PeakMemoryPressureFull.Known {
		f["peak_memory_pressure_full_percentage"] = mb(e.PeakMemoryPressureFull.Value)
	}
	if len(e.Xids) > 0 {
		f["xid"] = xidText(e.Xids)
	}
	f["samples"] = strconv.Itoa(e.Samples)
	return f
}

// effectiveSignal is the signal that ended the command, or the one a wrapper
// reported as 128+N.
func effectiveSignal(e Evidence) (syscall.Signal, bool) {
	if e.Signal != 0 {
		return e.Signal, false
	}
	if e.ExitCode > 128 && e.ExitCode <= 128+64 {
		return syscall.Signal(e.ExitCode - 128), true
	}
	return 0, false
}

// forwardedSignal is the last forwarded record of sig.
func forwardedSignal(e Evidence, sig syscall.Signal) (supervisor.SignalRecord, bool) {
	if sig == 0 {
		return supervisor.SignalRecord{}, false
	}
	for i := len(e.Forwarded) - 1; i >= 0; i-- {
		if e.Forwarded[i].Signal == sig {
			return e.Forwarded[i], true
		}
	}
	return supervisor.SignalRecord{}, false
}

func lastTerminating(recs []supervisor.SignalRecord) (supervisor.SignalRecord, bool) {
	for i := len(recs) - 1; i >= 0; i-- {
		if terminating[recs[i].Signal] {
			return recs[i], true
		}
	}
	return supervisor.SignalRecord{}, false
}

func counterText(c Counter) string {
	s := fmt.Sprintf("%.0f -> %.0f", c.First, c.Last)
	if !c.AtExit {
		s += " (not read after the exit)"
	}
	return s
}

func xidText(xids []metrics.XidEvent) string {
	seen := map[string]bool{}
	var parts []string
	for _, x := range xids {
		s := fmt.Sprintf("Xid %d on GPU %d", x.Xid, x.GPU)
		if !seen[s] {
			seen[s] = true
			parts = append(parts, s)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func mb(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// duration renders a gap for a sentence: "2.0 s", "45 s", "3 min", "2.5 h".
func duration(d time.Duration) string {
	switch {
	case d < 0:
		return "0 s"
	case d < 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < 2*time.Minute:
		return fmt.Sprintf("%.0f s", d.Seconds())
	case d < 2*time.Hour:
		return fmt.Sprintf("%.0f min", d.Minutes())
	default:
		return fmt.Sprintf("%.1f h", d.Hours())
	}
}
