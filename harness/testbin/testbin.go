// Package testbin builds the real bridge binary once per test process, so that
// end-to-end tests run what users run.
package testbin

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// build is one build of the binary, made once per test process.
type build struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

var asTests, plain build

// Bridge returns the path of a freshly built bridge binary (built with -race
// when the tests are). The binary lives in a temp dir removed at process exit
// by the OS's tmp cleaning; it is shared by all tests of the package.
func Bridge(t testing.TB) string {
	t.Helper()
	return asTests.get(t, raceEnabled)
}

// BridgePlain is Bridge built without -race, whatever the tests are built
// with: for tests that hold bridge to a memory bound (a memory cgroup), as
// the race detector multiplies its memory and its time.
func BridgePlain(t testing.TB) string {
	t.Helper()
	if !raceEnabled {
		return Bridge(t)
	}
	return plain.get(t, false)
}

func (b *build) get(t testing.TB, race bool) string {
	t.Helper()
	b.once.Do(func() {
		dir, e := os.MkdirTemp("", "bridge-testbin-")
		if e != nil {
			b.err = e
			return
		}
		b.path = filepath.Join(dir, "bridge")
		args := []string{"build", "-o", b.path}
		if race {
			args = append(args, "-race")
		}
		args = append(args, "github.com/bridge-dev/bridge/cmd/bridge")
		// go test puts its own GOROOT/bin first on the test's PATH.
		cmd := exec.Command("go", args...)
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("building bridge: %v\n%s", b.err, b.out)
	}
	return b.path
}

// CleanEnv is the test process's environment without MLflow, W&B or bridge
// variables (a developer's shell must not leak into a test) nor a
// launcher's (tests run under Slurm or in a pod would otherwise be jobs of
// their own: package jobkey), with the Python clients' telemetry off
// (tests reach only 127.0.0.1), plus extra.
func CleanEnv(extra ...string) []string {
	env := []string{"MLFLOW_DISABLE_TELEMETRY=true", "DO_NOT_TRACK=true", "WANDB_ERROR_REPORTING=false"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if slices.ContainsFunc(dropPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }) || slices.Contains(dropNames, k) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

var (
	dropPrefixes = []string{"MLFLOW_", "WANDB_", "BRIDGE_", "SLURM_", "TORCHELASTIC_", "PET_", "OMPI_COMM_WORLD_", "PMI_", "JOBSET_"}
	dropNames    = []string{"JOB_COMPLETION_INDEX", "JOB_UID", "JOB_NAME", "JOB_GLOBAL_INDEX", "GROUP_RANK", "GROUP_WORLD_SIZE",
		"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MPI_LOCALRANKID"}
)

// ExitCode is the exit status of a finished command; any error other than a
// non-zero exit fails the test.
func ExitCode(t testing.TB, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("running bridge: %v", err)
	}
	return ee.ExitCode()
}
