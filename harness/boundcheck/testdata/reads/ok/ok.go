// Package ok reads through the bounded reader, and opens one file of its
// own that the test allowlists.
package ok

import (
	"io"
	"os"
	"strings"

	"github.com/bridge-dev/bridge/internal/kfile"
)

func bounded(buf []byte) ([]byte, error) {
	r := kfile.NewPathReader(kfile.Options{})
	defer r.Close()
	return r.Read("/sys/class/powercap/intel-rapl:0/energy_uj", buf)
}

func ownLockFile() (*os.File, error) {
	return os.OpenFile("/run/ok.lock", os.O_RDWR|os.O_CREATE, 0o600)
}

func notAFile() ([]byte, error) { return io.ReadAll(strings.NewReader("x")) }
