// Package memtrim gives back the pages of bridge's own program files (its
// executable, libc) that the kernel mapped in bulk, so that bridge's resident
// set is the code it runs rather than the whole file.
//
// Why: a fault on a file mapping reads ahead (read_ahead_kb, 8 MiB on some
// disks) into large page-cache folios, and Linux 6.18 maps a whole folio on
// a fault. A single touch then makes megabytes resident: the whole 13 MB
// executable within seconds. Those pages are charged to the container's
// memory cgroup and, being mapped and executable, kept in its working set,
// the figure bridge itself reports and the kubelet evicts on.
package memtrim

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/sys/unix"
)

// Mapping is one region of /proc/<pid>/smaps.
type Mapping struct {
	Start, End uintptr
	Perms      string // e.g. "r-xp"
	Path       string // "" for anonymous memory
	Anonymous  int64  // kB of private copies (copy-on-write) in memory, from "Anonymous:"
	Swap       int64  // kB of them swapped out, from "Swap:"
}

// Eligible reports whether dropping m's pages is safe and useful: a private,
// read-only mapping of a file, none of whose pages were ever copied on write.
// A copied page (the relocations ld.so writes before making them read-only,
// a debugger's breakpoint) exists only in memory: MADV_DONTNEED would
// replace it by the file's bytes.
func (m Mapping) Eligible() bool {
	return len(m.Perms) == 4 && m.Perms[1] == '-' && m.Perms[3] == 'p' &&
		m.Anonymous == 0 && m.Swap == 0 && m.Path != "" && m.Path[0] == '/' &&
		!strings.HasSuffix(m.Path, " (deleted)") && m.End > m.Start
}

// ParseSmaps reads the regions of an smaps file.
func ParseSmaps(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if m, ok := parseHeader(line); ok {
			out = append(out, m)
			continue
		}
		if len(out) == 0 {
			continue
		}
		last := &out[len(out)-1]
		var err error
		switch {
		case bytes.HasPrefix(line, []byte("Anonymous:")):
			last.Anonymous, err = kB(line, len("Anonymous:"))
		case bytes.HasPrefix(line, []byte("Swap:")):
			last.Swap, err = kB(line, len("Swap:"))
		}
		if err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading smaps: %w", err)
	}
	return out, nil
}

// kB reads the number after a field line's key ("Swap:   4 kB").
func kB(line []byte, key int) (int64, error) {
	f := bytes.Fields(line[key:])
	if len(f) == 0 {
		return 0, fmt.Errorf("smaps: bad line %q", line)
	}
	n, err := strconv.ParseInt(string(f[0]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("smaps: bad line %q: %w", line, err)
	}
	return n, nil
}

// parseHeader parses "start-end perms offset dev inode [path]"; the fields
// lines ("Rss:   12 kB") have no '-' range in their first word.
func parseHeader(line []byte) (Mapping, bool) {
	f := bytes.Fields(line)
	if len(f) < 5 {
		return Mapping{}, false
	}
	lo, hi, ok := bytes.Cut(f[0], []byte("-"))
	if !ok {
		return Mapping{}, false
	}
	start, err1 := strconv.ParseUint(string(lo), 16, 64)
	end, err2 := strconv.ParseUint(string(hi), 16, 64)
	if err1 != nil || err2 != nil || len(f[1]) != 4 {
		return Mapping{}, false
	}
	m := Mapping{Start: uintptr(start), End: uintptr(end), Perms: string(f[1])}
	if len(f) >= 6 {
		// A path may hold spaces: it is the rest of the line after the
		// fifth field (the inode).
		// Fields are split as bytes.Fields splits them.
		rest := line
		for range 5 {
			rest = bytes.TrimLeftFunc(rest, unicode.IsSpace)
			rest = rest[bytes.IndexFunc(rest, unicode.IsSpace):] // len(f) >= 6: found
		}
		m.Path = string(bytes.TrimSpace(rest))
	}
	return m, true
}

// Result says what Trim did.
type Result struct {
	Mappings int   // regions advised
	Bytes    int64 // their size
}

// WriteBack writes the executable's dirty pages to disk (fdatasync): only
// clean pages can be dropped, and a binary written moments ago (just built,
// or unpacked from an image) has dirty ones. Nothing is written where
// nothing is dirty. It may block as long as the disk does: call it where
// that cannot hold anything up.
func WriteBack() error {
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("writing back bridge's executable: %w", err)
	}
	defer exe.Close()
	if err := unix.Fdatasync(int(exe.Fd())); err != nil {
		return fmt.Errorf("writing back bridge's executable: fdatasync: %w", err)
	}
	return nil
}

// Trim advises every eligible mapping of this process MADV_RANDOM (later
// faults read the page they need, not a read-ahead window) and
// MADV_DONTNEED (its pages are unmapped; what the process touches again
// comes back page by page), then drops the executable's clean cached pages
// that no process maps (POSIX_FADV_DONTNEED), so that they are read again
// in small folios. Copies of bridge running beside it keep what they map.
// Call it after WriteBack and while little else runs: a page another
// goroutine faults back between the two advices maps its whole large folio
// again. Errors leave the process as it was: it only costs memory.
func Trim() (Result, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return Result{}, fmt.Errorf("trimming bridge's mapped files: %w", err)
	}
	maps, err := ParseSmaps(f)
	f.Close()
	if err != nil {
		return Result{}, fmt.Errorf("trimming bridge's mapped files: %w", err)
	}
	var res Result
	for _, m := range maps {
		if !m.Eligible() {
			continue
		}
		for _, advice := range []uintptr{unix.MADV_RANDOM, unix.MADV_DONTNEED} {
			// The raw call: the region is not Go memory, so no []byte for it.
			if _, _, e := unix.Syscall(unix.SYS_MADVISE, m.Start, m.End-m.Start, advice); e != 0 {
				return res, fmt.Errorf("trimming %s: madvise: %w", m.Path, e)
			}
		}
		res.Mappings++
		res.Bytes += int64(m.End - m.Start)
	}
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return res, fmt.Errorf("trimming bridge's executable: %w", err)
	}
	defer exe.Close()
	if err := unix.Fadvise(int(exe.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return res, fmt.Errorf("trimming bridge's executable: fadvise: %w", err)
	}
	return res, nil
}
