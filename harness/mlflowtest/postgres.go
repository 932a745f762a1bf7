package mlflowtest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// EnvPostgresURI points StartPostgres at a running PostgreSQL server
// (postgresql://USER@HOST:PORT, a user that may create databases) instead
// of a cluster of the test process's own.
const EnvPostgresURI = "BRIDGE_TEST_POSTGRES_URI"

// pgCluster is one PostgreSQL server the tests make databases on.
type pgCluster struct {
	uri   string // postgresql://USER@HOST:PORT, no database
	dir   string // data directory of a cluster started here; "" for an external one
	cmd   *exec.Cmd
	stdin interface{ Close() error } // closing it makes the wrapper stop the server
	done  chan struct{}
	dbs   atomic.Int64
}

var pg struct {
	once sync.Once
	c    *pgCluster
	err  error
	skip string
}

// StartPostgres starts an MLflow server of the test's own backed by
// PostgreSQL, as production servers are (the row locks and isolation that
// concurrent bridges meet are PostgreSQL's, not sqlite's one writer), on a
// fresh database, and stops it when the test ends. The cluster is started
// once per test process (Main stops it) from Debian's postgresql, or is the
// one in BRIDGE_TEST_POSTGRES_URI; BRIDGE_TEST_PYTHON must import psycopg2.
// The test skips, saying what is missing, otherwise.
func StartPostgres(t testing.TB) *Server {
	t.Helper()
	s, skip, err := newPostgresServer(t.TempDir())
	switch {
	case skip != "":
		t.Skip(skip)
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	return s
}

var sharedPG struct {
	once sync.Once
	srv  *Server
	skip string
	err  error
	dir  string
}

// SharedPostgres is one StartPostgres server for every test of the process
// that asks for it (tests tell their runs apart by experiment); Main stops
// it.
func SharedPostgres(t testing.TB) *Server {
	t.Helper()
	sharedPG.once.Do(func() {
		if sharedPG.dir, sharedPG.err = os.MkdirTemp("", "mlflowtest-pg-server-"); sharedPG.err == nil {
			sharedPG.srv, sharedPG.skip, sharedPG.err = newPostgresServer(sharedPG.dir)
		}
	})
	switch {
	case sharedPG.skip != "":
		t.Skip(sharedPG.skip)
	case sharedPG.err != nil:
		t.Fatal(sharedPG.err)
	}
	return sharedPG.srv
}

// newPostgresServer starts an MLflow server with its files in dir on a new
// database of the process's cluster. skip says what is missing here.
func newPostgresServer(dir string) (s *Server, skip string, err error) {
	py := os.Getenv(EnvPython)
	if py == "" {
		return nil, EnvPython + " is not set: set it to a python with mlflow and psycopg2 installed (scripts/test.sh creates .venv and sets it) to run tests against MLflow on PostgreSQL", nil
	}
	if out, err := exec.Command(py, "-c", "import psycopg2").CombinedOutput(); err != nil {
		return nil, fmt.Sprintf("%s=%s cannot import psycopg2, which MLflow needs for PostgreSQL (%v: %s): pip install psycopg2-binary into it (scripts/test.sh does)", EnvPython, py, err, out), nil
	}
	pg.once.Do(func() { pg.c, pg.skip, pg.err = startCluster() })
	if pg.skip != "" || pg.err != nil {
		return nil, pg.skip, pg.err
	}
	db := fmt.Sprintf("mlflow_%d_%d", os.Getpid(), pg.c.dbs.Add(1))
	if err := pg.c.createDB(py, db); err != nil {
		return nil, "", err
	}
	// SQLAlchemy 2.1 takes postgresql:// for psycopg 3: name the driver.
	backend := "postgresql+psycopg2://" + strings.TrimPrefix(pg.c.uri, "postgresql://") + "/" + db
	s, err = startWith(&Server{python: py, Dir: dir, backend: backend,
		// A log-batch holds two pooled connections: more than the worker's
		// 40 threads keeps many bridges from deadlocking the pool
		// (docs/mlflow.md).
		env: []string{"MLFLOW_SQLALCHEMYSTORE_POOL_SIZE=20", "MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW=21"}})
	return s, "", err
}

// startCluster starts a throwaway cluster (initdb in a temp dir, no fsync),
// or returns the external one. skip says why PostgreSQL cannot run here.
func startCluster() (c *pgCluster, skip string, err error) {
	if uri := os.Getenv(EnvPostgresURI); uri != "" {
		return &pgCluster{uri: uri}, "", nil
	}
	bin := postgresBin()
	if bin == "" {
		return nil, "PostgreSQL is not installed (no initdb under /usr/lib/postgresql/*/bin or in PATH): apt-get install postgresql (scripts/test.sh does), or set " + EnvPostgresURI, nil
	}
	dir, err := os.MkdirTemp("", "mlflowtest-pg-")
	if err != nil {
		return nil, "", err
	}
	// PostgreSQL refuses to run as root: as root, run it as Debian's
	// postgres user.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, "running as root and there is no postgres user to run PostgreSQL as (Debian's postgresql package creates it)", nil
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, "", err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "bridge", "-A", "trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("initdb: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	// Durability is not under test: no fsync. Room for many MLflow workers.
	cmd := exec.Command("/bin/sh", "-c", wrapper, "sh", filepath.Join(bin, "postgres"), "-D", data,
		"-p", strconv.Itoa(port), "-h", "127.0.0.1", "-k", dir, "-F",
		"-c", "max_connections=300", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, "", err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting postgres: %w", err)
	}
	c = &pgCluster{uri: fmt.Sprintf("postgresql://bridge@127.0.0.1:%d", port), dir: dir, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() { cmd.Wait(); close(c.done) }()
	deadline := time.Now().Add(startTimeout)
	for {
		ready := exec.Command(filepath.Join(bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(port))
		if ready.Run() == nil {
			return c, "", nil
		}
		select {
		case <-c.done:
			b, _ := os.ReadFile(logf.Name())
			return nil, "", fmt.Errorf("postgres exited before it was ready:\n%s", b)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, "", fmt.Errorf("postgres was not ready within %s (log %s)", startTimeout, logf.Name())
		}
	}
}

// postgresBin is the directory of Debian's newest PostgreSQL programs, or
// of initdb in PATH; "" when there is none.
func postgresBin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		b, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return a > b
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

// createDB makes a database through python's psycopg2, which also works on
// an external server without PostgreSQL's own programs here.
func (c *pgCluster) createDB(python, name string) error {
	const script = `import sys, psycopg2
c = psycopg2.connect(sys.argv[1] + "/postgres")
c.autocommit = True
c.cursor().execute("CREATE DATABASE " + sys.argv[2])`
	out, err := exec.Command(python, "-c", script, c.uri, name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("creating database %s on %s: %v\n%s", name, c.uri, err, out)
	}
	return nil
}

// stop ends a cluster started here and removes its files.
func (c *pgCluster) stop() {
	if c == nil || c.cmd == nil {
		return
	}
	c.stdin.Close()
	syscall.Kill(-c.cmd.Process.Pid, syscall.SIGINT) // fast shutdown
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
	os.RemoveAll(c.dir)
}

func stopPostgres() {
	if sharedPG.srv != nil {
		sharedPG.srv.kill()
		os.RemoveAll(sharedPG.dir)
	}
	if pg.c != nil {
		pg.c.stop()
	}
}
