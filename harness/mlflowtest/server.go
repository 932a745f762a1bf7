// Package mlflowtest runs a real `mlflow server` for tests and reads runs
// back through its REST API, independently of the sink under test.
//
// The server is the Python package in BRIDGE_TEST_PYTHON (a python with
// mlflow installed); tests skip when it is unset. BRIDGE_TEST_MLFLOW_URI
// points Shared at a server started once for the whole suite (.ci/run).
package mlflowtest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Environment variables the package reads.
const (
	EnvPython    = "BRIDGE_TEST_PYTHON"     // python with mlflow installed
	EnvMLflowURI = "BRIDGE_TEST_MLFLOW_URI" // an already running server for Shared
)

// How long a server may take to answer /health. On two busy cores a cold
// `mlflow server` import takes 10-20 s, and a restart under a load of 6
// (CI beside other builds) passed 60 s once; MLflow's own tests wait 30 s.
const startTimeout = 120 * time.Second

// Server is one running (or stopped) `mlflow server`.
type Server struct {
	URL string // http://127.0.0.1:PORT, no trailing slash
	Dir string // backend store and artifacts; empty for an external server

	python  string
	port    int
	logPath string
	logName string   // the log's name in Dir; "" for mlflow-server.log
	backend string   // --backend-store-uri; "" for sqlite in Dir
	env     []string // extra environment for the server

	mu    sync.Mutex
	cmd   *exec.Cmd
	stdin io.WriteCloser // closing it makes the wrapper kill the group
	done  chan struct{}  // closed when cmd has been waited for
	owner bool           // false for BRIDGE_TEST_MLFLOW_URI: never stopped here
	// noWait: launch returns once the server is started, before it
	// answers (Launch).
	noWait bool
}

// Python returns BRIDGE_TEST_PYTHON, or skips the test when it is unset.
func Python(t testing.TB) string {
	t.Helper()
	py := os.Getenv(EnvPython)
	if py == "" {
		t.Skipf("%s is not set: set it to a python with mlflow installed (e.g. .venv/bin/python) to run tests against a real MLflow server; scripts/test.sh, the README's test command, creates .venv and sets it", EnvPython)
	}
	return py
}

// Start starts a server of the test's own (sqlite backend in a temp dir,
// one worker) and stops it when the test ends. Use it for tests that stop or
// restart the server; others should use Shared.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := start(Python(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	return s
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared returns the suite's server: BRIDGE_TEST_MLFLOW_URI when set (it is
// checked to answer), otherwise one server per test process, started on
// first use and stopped by StopShared (call it from TestMain) or, at the
// latest, when the test process exits (the server watches its stdin pipe).
func Shared(t testing.TB) *Server {
	t.Helper()
	if uri := strings.TrimRight(os.Getenv(EnvMLflowURI), "/"); uri != "" {
		s := &Server{URL: uri}
		if err := s.health(); err != nil {
			t.Fatalf("%s=%s does not answer GET /health: %v", EnvMLflowURI, uri, err)
		}
		return s
	}
	py := Python(t)
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "mlflowtest-")
		if err != nil {
			shared.err = err
			return
		}
		shared.srv, shared.err = start(py, dir)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv
}

// StopShared stops the per-process shared server, if one was started, and
// removes its directory. Call it from TestMain after m.Run.
func StopShared() {
	if shared.srv != nil {
		shared.srv.kill()
		os.RemoveAll(shared.srv.Dir)
	}
	stopPostgres()
}

// Main is a TestMain body for packages that use Shared:
//
//	func TestMain(m *testing.M) { os.Exit(mlflowtest.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	StopShared()
	return code
}

func start(python, dir string) (*Server, error) {
	return startWith(&Server{python: python, Dir: dir})
}

// Launch starts a server of the test's own, as Start does, and returns at
// once, before it answers: a server started a second before a job (a cold
// one, whose first answers take seconds). It is stopped when the test
// ends.
func Launch(t testing.TB) *Server {
	t.Helper()
	s := &Server{python: Python(t), Dir: t.TempDir(), noWait: true}
	if _, err := startWith(s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	return s
}

// StartAnother starts a second server process on s's backend store and
// artifact root, as a site runs several behind a load balancer: a run
// written through one is read through the other. It is stopped when the
// test ends. s must have been started by this package.
func (s *Server) StartAnother(t testing.TB) *Server {
	t.Helper()
	if !s.owner {
		t.Fatalf("the MLflow server at %s was not started by this test: its store is not known here", s.URL)
	}
	o, err := startWith(&Server{python: s.python, Dir: s.Dir, backend: s.backend, env: s.env,
		logName: fmt.Sprintf("mlflow-server-%d.log", another.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.kill)
	return o
}

// another numbers the logs of StartAnother's servers.
var another atomic.Int64

// startWith fills in and launches s (python, Dir, and optionally backend
// and env set by the caller).
func startWith(s *Server) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, log := s.Dir, s.logName
	if log == "" {
		log = "mlflow-server.log"
	}
	s.URL, s.port, s.logPath, s.owner = "http://127.0.0.1:"+strconv.Itoa(port), port, filepath.Join(dir, log), true
	if err := os.MkdirAll(filepath.Join(dir, "artifacts"), 0o755); err != nil {
		return nil, err
	}
	if err := s.launch(); err != nil {
		return nil, err
	}
	return s, nil
}

// wrapper runs the server in the background and ends the whole process
// group (mlflow's CLI, uvicorn and its workers; postgres and its backends)
// when its stdin closes, which happens on Stop and also when the test
// process dies without cleaning up: SIGTERM, then SIGKILL once the server
// has exited or 10 s have passed, since a server with clients still
// connected (postgres's smart shutdown waits for them) may never end on
// SIGTERM alone. The wrapper and its watcher ignore SIGTERM (set after the
// server started, so the server does not inherit it): the wrapper stays to
// reap the server, which tells the watcher it is gone. kill's pid 0 is the
// caller's process group (dash's kill takes no "--" before a group).
const wrapper = `exec 3<&0
"$@" </dev/null &
srv=$!
trap '' TERM
( read -r _ <&3; kill -TERM 0
  i=0; while kill -0 "$srv" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL 0 ) &
wait "$srv"`

func (s *Server) launch() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("mlflow server log: %w", err)
	}
	defer logf.Close()
	backend := s.backend
	if backend == "" {
		backend = "sqlite:///" + filepath.Join(s.Dir, "mlflow.db")
	}
	args := []string{"-c", wrapper, "sh", s.python, "-m", "mlflow", "server",
		"--host", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--backend-store-uri", backend,
		"--default-artifact-root", filepath.Join(s.Dir, "artifacts"),
		// The artifact proxy (on by default) stores here what clients
		// upload to an experiment whose location is mlflow-artifacts:/...
		"--artifacts-destination", filepath.Join(s.Dir, "mlartifacts"),
		"--workers", "1"}
	cmd := exec.Command("/bin/sh", args...)
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(serverEnv(os.Environ()), s.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s -m mlflow server: %w", s.python, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()

	s.mu.Lock()
	s.cmd, s.stdin, s.done = cmd, stdin, done
	s.mu.Unlock()

	if s.noWait {
		return nil
	}
	deadline := time.Now().Add(startTimeout)
	for {
		if s.health() == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("mlflow server exited before answering %s/health (%s):\n%s", s.URL, cmd.ProcessState, s.LogTail(40))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("mlflow server did not answer %s/health within %s; log %s:\n%s", s.URL, startTimeout, s.logPath, s.LogTail(40))
		}
	}
}

// serverEnv drops the client variables a developer may have exported (the
// server must not track into itself or elsewhere), turns off MLflow's job
// runner (its seven huey workers double the start time on two cores and no
// test uses jobs) and its telemetry (tests reach only 127.0.0.1).
func serverEnv(env []string) []string {
	out := []string{"MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false", "MLFLOW_DISABLE_TELEMETRY=true", "DO_NOT_TRACK=true"}
	for _, kv := range env {
		if strings.HasPrefix(kv, "MLFLOW_TRACKING_") || strings.HasPrefix(kv, "MLFLOW_RUN_ID=") ||
			strings.HasPrefix(kv, "MLFLOW_EXPERIMENT_") || strings.HasPrefix(kv, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=") ||
			strings.HasPrefix(kv, "MLFLOW_DISABLE_TELEMETRY=") || strings.HasPrefix(kv, "DO_NOT_TRACK=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func (s *Server) health() error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(s.URL + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /health: %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// Stop stops the server (the sqlite store stays). The test fails if the
// server was not started by this package.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if !s.owner {
		t.Fatalf("the MLflow server at %s was not started by this test: use mlflowtest.Start to stop or restart one", s.URL)
	}
	s.kill()
}

// Restart starts the server again on the same port with the same store
// (for outage tests), stopping it first if it runs.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	if err := s.launch(); err != nil {
		t.Fatalf("restarting mlflow server: %v", err)
	}
}

// kill ends the process group and waits until the shell is reaped, the port
// refuses connections (so Restart can bind it again) and no live member of
// the group is left (zombies are ignored: where PID 1 reaps nothing,
// orphans stay zombies).
func (s *Server) kill() {
	s.mu.Lock()
	cmd, stdin, done := s.cmd, s.stdin, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	pgid := cmd.Process.Pid
	stdin.Close()
	syscall.Kill(-pgid, syscall.SIGTERM)
	grace := time.After(10 * time.Second)
	giveUp := time.Now().Add(30 * time.Second) // the port may have been taken by someone else
	for {
		select {
		case <-done:
			if (!s.listening() && !groupAlive(pgid)) || time.Now().After(giveUp) {
				return
			}
		default:
		}
		select {
		case <-grace:
			syscall.Kill(-pgid, syscall.SIGKILL)
			grace = nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// groupAlive reports whether a process of group pgid is alive, reading
// /proc/<pid>/stat (field 3 is the state, field 5 the process group).
func groupAlive(pgid int) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name (field 2) is in parentheses and may hold spaces.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}

func (s *Server) listening() bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// LogTail returns the last n lines of the server's log.
func (s *Server) LogTail(n int) string {
	if s.logPath == "" {
		return "(external server: no log)"
	}
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
