package forensics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/bridge-dev/bridge/internal/kfile"
)

// KernelLogPath is where the kernel's log is read: the OOM killer names
// there the process it killed, with its RSS.
const KernelLogPath = "/dev/kmsg"

// maxLogRecords bounds the records read at a job's end: a kernel that
// logged more during the job (a flood of messages) is read that far.
const maxLogRecords = 100_000

// KernelLog is the kernel's log from the job's start on (OpenKernelLog),
// read at its end for the OOM killer's reports (Kills).
type KernelLog struct {
	log *kfile.Log
	// why says why the log is not read ("" when it is).
	why string
}

// OpenKernelLog opens the kernel's log at path within ctx, at its end: the
// records after it are the job's. It always returns a KernelLog: one that
// could not be opened (absent in a container, reserved to CAP_SYSLOG by
// kernel.dmesg_restrict) says why when read.
func OpenKernelLog(ctx context.Context, path string) *KernelLog {
	l, err := kfile.OpenLog(ctx, path)
	if err != nil {
		return &KernelLog{why: logWhy(path, err)}
	}
	return &KernelLog{log: l}
}

// logWhy words why the kernel's log at path cannot be read.
func logWhy(path string, err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return path + " is not there (a container without the kernel's log)"
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return path + " is not readable here (kernel.dmesg_restrict reserves it to CAP_SYSLOG)"
	}
	return err.Error()
}

// Kills reads the OOM kills the kernel logged since the open, within ctx:
// why is "" when the log was read to its end, else why it was not (read
// whole or not at all).
func (k *KernelLog) Kills(ctx context.Context) (kills []OOMKill, why string) {
	if k == nil {
		return nil, "the kernel's log was not opened"
	}
	if k.log == nil {
		return nil, k.why
	}
	recs, r, err := k.log.Records(ctx, maxLogRecords, func(b []byte) bool {
		return bytes.Contains(b, []byte("Killed process ")) || bytes.Contains(b, []byte("oom-kill:"))
	})
	kills = ParseOOMKills(recs)
	switch {
	case err != nil:
		return kills, fmt.Sprintf("reading %s: %v", KernelLogPath, err)
	case r.More:
		return kills, fmt.Sprintf("%s logged more than %d records during the job; the first were read", KernelLogPath, maxLogRecords)
	}
	return kills, ""
}

// Close closes the log; nil-safe.
func (k *KernelLog) Close() {
	if k != nil && k.log != nil {
		k.log.Close()
	}
}

// OOMKill is one kill of the kernel's OOM killer, as its log reports it.
type OOMKill struct {
	PID  int    // in the kernel's (the initial) pid namespace
	Name string // the process's comm
	// AnonKB, FileKB and ShmemKB are its resident memory when killed
	// (anon-rss, file-rss, shmem-rss).
	AnonKB, FileKB, ShmemKB uint64
	// Memcg is the cgroup of the killed task as the kernel names it
	// (task_memcg), "" on a kernel that does not log it (before 4.19).
	Memcg string
	// Constraint is CONSTRAINT_MEMCG (a cgroup's limit), CONSTRAINT_NONE
	// (the node), ...; "" when not logged.
	Constraint string
}

// RSSMB is the killed process's resident memory, in MB.
func (k OOMKill) RSSMB() float64 { return float64(k.AnonKB+k.FileKB+k.ShmemKB) * 1024 / 1e6 }

// ParseOOMKills reads the OOM killer's reports from records of the
// kernel's log (/dev/kmsg's "prio,seq,usec,flags;text", or the text
// alone), in order:
//
//	oom-kill:constraint=CONSTRAINT_MEMCG,...,task_memcg=/a/b,task=python3,pid=12576,uid=0
//	Memory cgroup out of memory: Killed process 12576 (python3) total-vm:211940kB, anon-rss:199680kB, file-rss:6600kB, shmem-rss:0kB, ...
//
// The "Killed process" line makes a kill; the oom-kill line before it, of
// the same pid, adds its cgroup. Anything else is skipped.
func ParseOOMKills(records []string) []OOMKill {
	var kills []OOMKill
	ctx := map[int]OOMKill{} // from oom-kill lines, by pid
	for _, rec := range records {
		text := rec
		if i := strings.IndexByte(text, ';'); i >= 0 && strings.Count(text[:i], ",") >= 3 {
			text = text[i+1:]
		}
		text, _, _ = strings.Cut(text, "\n")
		if k, ok := parseOOMKillLine(text); ok {
			ctx[k.PID] = k
			continue
		}
		if k, ok := parseKilledLine(text); ok {
			if c, seen := ctx[k.PID]; seen {
				k.Memcg, k.Constraint = c.Memcg, c.Constraint
				delete(ctx, k.PID)
			}
			kills = append(kills, k)
		}
	}
	return kills
}

// parseOOMKillLine reads "oom-kill:k=v,k=v,...". A cgroup path may hold a
// comma: the keys are found by name, the path running to the next key.
func parseOOMKillLine(s string) (OOMKill, bool) {
	rest, ok := strings.CutPrefix(s, "oom-kill:")
	if !ok {
		return OOMKill{}, false
	}
	field := func(key string, next ...string) string {
		i := strings.Index(rest, key+"=")
		if i < 0 || (i > 0 && rest[i-1] != ',') {
			return ""
		}
		v := rest[i+len(key)+1:]
		end := len(v)
		for _, n := range next {
			if j := strings.Index(v, ","+n+"="); j >= 0 && j < end {
				end = j
			}
		}
		if len(next) == 0 {
			if j := strings.IndexByte(v, ','); j >= 0 {
				end = j
			}
		}
		return v[:end]
	}
	pid, err := strconv.Atoi(field("pid"))
	if err != nil || pid <= 0 {
		return OOMKill{}, false
	}
	return OOMKill{PID: pid, Name: field("task", "pid"), Memcg: field("task_memcg", "task"), Constraint: field("constraint")}, true
}

// parseKilledLine reads "...Killed process N (comm) total-vm:XkB,
// anon-rss:YkB, file-rss:ZkB, shmem-rss:WkB, ...". comm may hold spaces
// and parentheses: it ends at the last ") total-vm:".
func parseKilledLine(s string) (OOMKill, bool) {
	_, rest, ok := strings.Cut(s, "Killed process ")
	if !ok {
		return OOMKill{}, false
	}
	pidText, rest, ok := strings.Cut(rest, " (")
	pid, err := strconv.Atoi(pidText)
	if !ok || err != nil || pid <= 0 {
		return OOMKill{}, false
	}
	end := strings.LastIndex(rest, ") total-vm:")
	if end < 0 {
		return OOMKill{}, false
	}
	k := OOMKill{PID: pid, Name: rest[:end]}
	stats := rest[end+2:]
	kb := func(key string) uint64 {
		_, v, ok := strings.Cut(stats, key+":")
		if !ok {
			return 0
		}
		v, _, _ = strings.Cut(v, "kB")
		n, _ := strconv.ParseUint(v, 10, 64)
		return n
	}
	k.AnonKB, k.FileKB, k.ShmemKB = kb("anon-rss"), kb("file-rss"), kb("shmem-rss")
	return k, true
}
