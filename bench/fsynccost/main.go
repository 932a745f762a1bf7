// Command fsynccost measures what making one appended spool line durable
// costs the process that asks for it: CPU (all threads, schedstat) and
// context switches per line, one line of 1.5 kB per interval, for one way of
// asking (-mode). bench/fsync.sh runs every mode side by side. It separates
// the kernel's share of a spool fsync from the Go runtime's (a raw syscall
// skips the scheduler's hand-off) and from the file system's metadata (an
// overwrite of blocks written and fsynced before needs no journal commit).
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

func usage() (cpu time.Duration, switches uint64, err error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, 0, err
	}
	threads, err := fs.AllThreads(os.Getpid())
	if err != nil {
		return 0, 0, err
	}
	for _, t := range threads {
		ss, err := t.Schedstat()
		if err != nil {
			return 0, 0, err
		}
		st, err := t.NewStatus()
		if err != nil {
			return 0, 0, err
		}
		cpu += time.Duration(ss.RunningNanoseconds)
		switches += st.VoluntaryCtxtSwitches + st.NonVoluntaryCtxtSwitches
	}
	return cpu, switches, nil
}

func main() {
	mode := flag.String("mode", "fsync", "none | fsync | fdatasync | raw (fsync without the Go scheduler) | overwrite (pwrite into blocks written and fsynced before, then fdatasync)")
	n := flag.Int("n", 40, "lines")
	interval := flag.Duration("interval", time.Second, "time between lines")
	path := flag.String("file", "", "file to write (created, truncated)")
	flag.Parse()
	if *path == "" {
		fmt.Fprintln(os.Stderr, "fsynccost: -file is required")
		os.Exit(2)
	}
	if err := run(*mode, *n, *interval, *path); err != nil {
		fmt.Fprintln(os.Stderr, "fsynccost:", err)
		os.Exit(1)
	}
}

func run(mode string, n int, interval time.Duration, path string) error {
	runtime.GOMAXPROCS(1) // as bridge runs
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	line := []byte(strings.Repeat("x", 1499) + "\n")
	if mode == "overwrite" {
		if _, err := f.Write(make([]byte, n*len(line))); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
	}
	time.Sleep(interval)
	cpu0, sw0, err := usage()
	if err != nil {
		return err
	}
	var off int64
	for i := 0; i < n; i++ {
		time.Sleep(interval)
		if _, err := f.WriteAt(line, off); err != nil {
			return err
		}
		off += int64(len(line))
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
		default:
			return fmt.Errorf("unknown -mode %q", mode)
		}
		if err != nil {
			return err
		}
	}
	cpu1, sw1, err := usage()
	if err != nil {
		return err
	}
	fmt.Printf("%-9s %6.3f ms CPU a line, %5.1f context switches a line (%d lines, %v apart)\n",
		mode, float64(cpu1-cpu0)/1e6/float64(n), float64(sw1-sw0)/float64(n), n, interval)
	return nil
}
