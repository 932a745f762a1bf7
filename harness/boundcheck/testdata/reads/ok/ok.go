// Package ok reads through the bounded reader, and opens one file of its
// own that the test allowlists.
package ok

import (
	"context"
	"io"
	"os"
	"strings"

	"github.com/bridge-dev/bridge/internal/kfile"
)

func bounded(ctx context.Context) ([]byte, error) {
	return kfile.ReadFile(ctx, "/sys/devices/system/clocksource/clocksource0/current_clocksource", kfile.Value)
}

func boundedDir(ctx context.Context) ([]string, error) {
	return kfile.ReadDirNames(ctx, "/sys/class/infiniband", kfile.Entries)
}

func ownLockFile() (*os.File, error) {
	return os.OpenFile("/run/ok.lock", os.O_RDWR|os.O_CREATE, 0o600)
}

func notAFile() ([]byte, error) { return io.ReadAll(strings.NewReader("x")) }
