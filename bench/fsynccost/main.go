// Command fsynccost appends one 1.5 kB line per interval to a file and makes
// it durable in one way (-mode), until killed: bench/fsync.sh runs every
// mode side by side and measures each process with bench/measure.py. It
// separates the kernel's share of a spool fsync from the Go runtime's (a raw
// syscall skips the scheduler's hand-off) and from the file system's
// metadata (an overwrite of blocks written and fsynced before needs no
// journal commit).
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// overwriteSize is how much the overwrite mode writes and fsyncs first
// (room for 5,000 lines; then it wraps): small enough to be done within
// the warm-up.
const overwriteSize = 8 << 20

func main() {
	mode := flag.String("mode", "fsync", "none | fsync | fdatasync | raw (fsync without the Go scheduler) | overwrite (pwrite into blocks written and fsynced before, then fdatasync)")
	interval := flag.Duration("interval", time.Second, "time between lines")
	path := flag.String("file", "", "file to write (created, truncated)")
	flag.Parse()
	switch *mode {
	case "none", "fsync", "fdatasync", "raw", "overwrite":
	default:
		fmt.Fprintf(os.Stderr, "fsynccost: unknown -mode %q\n", *mode)
		os.Exit(2)
	}
	if *path == "" {
		fmt.Fprintln(os.Stderr, "fsynccost: -file is required")
		os.Exit(2)
	}
	if err := run(*mode, *interval, *path); err != nil {
		fmt.Fprintln(os.Stderr, "fsynccost:", err)
		os.Exit(1)
	}
}

func run(mode string, interval time.Duration, path string) error {
	runtime.GOMAXPROCS(1) // as bridge runs
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	line := []byte(strings.Repeat("x", 1499) + "\n")
	if mode == "overwrite" {
		if _, err := f.Write(make([]byte, overwriteSize)); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
	}
	for off := int64(0); ; off = (off + int64(len(line))) % overwriteSize {
		time.Sleep(interval)
		if _, err := f.WriteAt(line, off); err != nil {
			return err
		}
		switch mode {
		case "none":
		case "fsync":
			err = f.Sync()
		case "fdatasync", "overwrite":
			err = syscall.Fdatasync(int(f.Fd()))
		case "raw":
			if _, _, e := syscall.RawSyscall(syscall.SYS_FSYNC, f.Fd(), 0, 0); e != 0 {
				err = e
			}
		}
		if err != nil {
			return err
		}
	}
}
