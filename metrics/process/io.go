package process

import (
	"bytes"
	"strconv"

	"github.com/bridge-dev/bridge/internal/kfile"
)

// ioFiles reads /proc/<pid>/io, kept open as the stat files are
// (statFiles): one pread a process a sample. Its read_bytes and
// write_bytes are what the process made the storage layer fetch and send
// (page-cache hits, pipes and sockets not counted), its own and, once it
// reaped them, its children's (the kernel adds a reaped child's counters
// to its parent's, as it does cutime and cstime).
type ioFiles struct {
	procRoot string
	files    *kfile.Reader[int]
	buf      []byte
}

func newIOFiles(procRoot string) *ioFiles {
	f := &ioFiles{procRoot: procRoot}
	f.files = kfile.NewReader(f.path, kfile.Options{Size: 512, MaxKept: maxOpenStats})
	return f
}

func (f *ioFiles) path(pid int) string { return f.procRoot + "/" + strconv.Itoa(pid) + "/io" }

// read returns pid's storage bytes read and written; ok is false when the
// file cannot be read (the process exited, or bridge may not read it: a
// process of another user) or says nothing of them.
func (f *ioFiles) read(pid int) (read, written uint64, ok bool) {
	var err error
	f.buf, err = f.files.Read(pid, f.buf)
	if err != nil {
		return 0, 0, false
	}
	return parseIO(f.buf)
}

// parseIO reads read_bytes and write_bytes from a /proc/<pid>/io file.
func parseIO(b []byte) (read, written uint64, ok bool) {
	var haveR, haveW bool
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		key, val, found := bytes.Cut(line, []byte(": "))
		if !found {
			continue
		}
		switch string(key) {
		case "read_bytes":
			read, haveR = atou(bytes.TrimSpace(val))
		case "write_bytes":
			written, haveW = atou(bytes.TrimSpace(val))
		}
	}
	return read, written, haveR && haveW
}

func (f *ioFiles) sweep() { f.files.Sweep() }
func (f *ioFiles) close() { f.files.Close() }
