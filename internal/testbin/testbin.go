// Package testbin builds the real bridge binary once per test process, so that
// end-to-end tests run what users run.
package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	once sync.Once
	path string
	err  error
	out  []byte
)

// Bridge returns the path of a freshly built bridge binary (built with -race
// when the tests are). The binary lives in a temp dir removed at process exit
// by the OS's tmp cleaning; it is shared by all tests of the package.
func Bridge(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		dir, e := os.MkdirTemp("", "bridge-testbin-")
		if e != nil {
			err = e
			return
		}
		path = filepath.Join(dir, "bridge")
		args := []string{"build", "-o", path}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "github.com/bridge-dev/bridge/cmd/bridge")
		cmd := exec.Command(runtime.GOROOT()+"/bin/go", args...)
		out, err = cmd.CombinedOutput()
	})
	if err != nil {
		t.Fatalf("building bridge: %v\n%s", err, out)
	}
	return path
}
