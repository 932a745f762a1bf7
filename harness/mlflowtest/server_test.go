package mlflowtest

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestStartStopRestart(t *testing.T) {
	s := Start(t)
	exp := s.CreateExperiment(t, "restart-check")
	run := s.CreateRun(t, exp, "r")

	s.Stop(t)
	if _, err := http.Get(s.URL + "/health"); err == nil {
		t.Fatalf("server at %s still answers after Stop", s.URL)
	}
	url := s.URL
	s.Restart(t)
	if s.URL != url {
		t.Errorf("URL changed from %s to %s", url, s.URL)
	}
	// Same store: what was written before the outage is still there.
	if got := s.ExperimentID(t, "restart-check"); got != exp {
		t.Errorf("experiment id after restart %q, want %q", got, exp)
	}
	if r := s.GetRun(t, run); r.Info.Status != "RUNNING" || r.Info.RunName != "r" {
		t.Errorf("run after restart: %+v", r.Info)
	}
	if tail := s.LogTail(5); !strings.Contains(tail, "GET") {
		t.Errorf("log tail has no request lines:\n%s", tail)
	}
}

func TestSharedExternalCannotStop(t *testing.T) {
	s := &Server{URL: "http://127.0.0.1:1"}
	ft := &fakeT{TB: t}
	func() {
		defer func() { recover() }()
		s.Stop(ft)
	}()
	if !strings.Contains(ft.msg, "mlflowtest.Start") {
		t.Errorf("Stop on a server not started here: %q, want a message pointing to Start", ft.msg)
	}
}

// fakeT records Fatalf instead of ending the test.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}

// TestPostgres: a server on PostgreSQL stores runs, and PostgreSQL holds
// them (read back with psycopg2, past MLflow); a second server on the same
// database (StartAnother) reads them and writes to them.
func TestPostgres(t *testing.T) {
	s := StartPostgres(t)
	exp := s.CreateExperiment(t, "pg-check")
	run := s.CreateRun(t, exp, "r")
	if r := s.GetRun(t, run); r.Info.Status != "RUNNING" || r.Info.ExperimentID != exp {
		t.Errorf("run on PostgreSQL: %+v", r.Info)
	}
	uri := "postgresql://" + strings.TrimPrefix(s.backend, "postgresql+psycopg2://")
	const q = `import sys, psycopg2
c = psycopg2.connect(sys.argv[1]).cursor()
c.execute("SELECT name FROM runs WHERE run_uuid = %s", (sys.argv[2],))
print(c.fetchone()[0])`
	out, err := exec.Command(Python(t), "-c", q, uri, run).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "r" {
		t.Errorf("the run in PostgreSQL at %s: %v %s", uri, err, out)
	}

	o := s.StartAnother(t)
	if o.URL == s.URL || o.logPath == s.logPath {
		t.Errorf("the second server shares %s, log %s with the first", o.URL, o.logPath)
	}
	o.LogBatch(t, run, map[string]string{"via": "second"}, nil)
	if r := s.GetRun(t, run); r.Tags["via"] != "second" || o.GetRun(t, run).Info.ExperimentID != exp {
		t.Errorf("a tag written through the second server, read through the first: %v", r.Tags)
	}
}

func TestMain(m *testing.M) { os.Exit(Main(m)) }
