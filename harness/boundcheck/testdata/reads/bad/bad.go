// Package bad goes around the bounded reader in every way the reads rule
// knows; each function is one way.
package bad

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/prometheus/procfs"
	"github.com/prometheus/procfs/sysfs"

	"github.com/bridge-dev/bridge/internal/kfile"
)

func readFile() ([]byte, error) { return os.ReadFile("/sys/class/powercap/intel-rapl:0/energy_uj") }

func openThenRead() error {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Seek(0, 0)
	return err
}

func fileRead(f *os.File) (int, error) { return f.Read(make([]byte, 8)) }

func readAll(f *os.File) ([]byte, error) { return io.ReadAll(f) }

func scan(f *os.File) bool { return bufio.NewScanner(f).Scan() }

func readDir() ([]os.DirEntry, error) { return os.ReadDir("/sys/class/infiniband") }

func stat() (os.FileInfo, error) { return os.Stat("/sys/class/drm") }

func glob() ([]string, error) { return filepath.Glob("/sys/class/drm/card*") }

func rawOpen() (int, error) { return syscall.Open("/proc/meminfo", syscall.O_RDONLY, 0) }

func procfsRead() error {
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		return err
	}
	_, err = fs.Meminfo()
	return err
}

func sysfsRead() error {
	fs, err := sysfs.NewFS("/sys")
	if err != nil {
		return err
	}
	_, err = sysfs.GetRaplZones(fs)
	return err
}

func readlink() (string, error) { return os.Readlink("/proc/self") }

// readerOutsideCollector reads on its caller's goroutine, which nothing
// outside a collector bounds.
func readerOutsideCollector() ([]byte, error) {
	r := kfile.NewPathReader(kfile.Options{})
	defer r.Close()
	return r.Read("/proc/loadavg", nil)
}

// notARead reads bytes already in memory: not a file.
func notARead() ([]byte, error) { return io.ReadAll(bytes.NewReader([]byte("x"))) }
