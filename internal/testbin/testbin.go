// Package testbin builds the real bridge binary once per test process, so that
// end-to-end tests run what users run.
package testbin

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
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
