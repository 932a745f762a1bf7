package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const stream = `{"Action":"run","Package":"p/a","Test":"TestOK"}
{"Action":"output","Package":"p/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"p/a","Test":"TestOK"}
{"Action":"run","Package":"p/a","Test":"TestE2E"}
{"Action":"output","Package":"p/a","Test":"TestE2E","Output":"    e2e_test.go:9: BRIDGE_TEST_PYTHON is unset\n"}
{"Action":"output","Package":"p/a","Test":"TestE2E","Output":"--- SKIP: TestE2E (0.00s)\n"}
{"Action":"skip","Package":"p/a","Test":"TestE2E"}
{"Action":"run","Package":"p/gpu","Test":"TestNVML"}
{"Action":"output","Package":"p/gpu","Test":"TestNVML","Output":"    nvml_test.go:3: no GPU\n"}
{"Action":"skip","Package":"p/gpu","Test":"TestNVML"}
{"Action":"output","Package":"p/a","Output":"ok  \tp/a\t0.1s\n"}
{"Action":"pass","Package":"p/a"}
`

func rules(t *testing.T, text string) []rule {
	t.Helper()
	p := filepath.Join(t.TempDir(), "allow")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := readRules(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestUnexpectedSkipFails(t *testing.T) {
	var out bytes.Buffer
	code := check(strings.NewReader(stream), &out, rules(t, "# GPU-only\np/gpu TestNVML # no GPU here\n"))
	if code != 1 {
		t.Errorf("exit %d, want 1 for the skipped end-to-end test", code)
	}
	for _, want := range []string{
		"SKIPPED (not allowed): p/a TestE2E: e2e_test.go:9: BRIDGE_TEST_PYTHON is unset",
		"skipped (allowed): p/gpu TestNVML: nvml_test.go:3: no GPU",
		"ok  \tp/a\t0.1s",
		"FAIL: 1 test(s) skipped",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "=== RUN   TestOK") {
		t.Errorf("a passing test's output was printed:\n%s", out.String())
	}
}

func TestAllowedSkipsPass(t *testing.T) {
	var out bytes.Buffer
	if code := check(strings.NewReader(stream), &out, rules(t, "p/.* Test(E2E|NVML)\n")); code != 0 {
		t.Errorf("exit %d, want 0 when every skip is allowed:\n%s", code, out.String())
	}
}

func TestFailurePrintedAndFails(t *testing.T) {
	in := `{"Action":"output","Package":"p","Test":"TestX","Output":"    x_test.go:1: boom\n"}
{"Action":"fail","Package":"p","Test":"TestX"}
`
	var out bytes.Buffer
	if code := check(strings.NewReader(in), &out, nil); code != 1 || !strings.Contains(out.String(), "boom") {
		t.Errorf("exit %d, output %q: want 1 and the failure's output", code, out.String())
	}
}

func TestBadAllowList(t *testing.T) {
	p := filepath.Join(t.TempDir(), "allow")
	os.WriteFile(p, []byte("only-one-field\n"), 0o644)
	if _, err := readRules(p); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("err = %v, want one naming line 1", err)
	}
}

// A package that dies with a test still running (a timeout's panic, a
// SIGQUIT dump) has no fail event for that test: its output must still be
// printed, or the dump that says where it hung is lost.
func TestPackageFailPrintsRunningTests(t *testing.T) {
	const died = `{"Action":"run","Package":"p/m","Test":"TestHangs"}
{"Action":"output","Package":"p/m","Test":"TestHangs","Output":"goroutine 7 [chan receive]:\n"}
{"Action":"run","Package":"p/n","Test":"TestOther"}
{"Action":"output","Package":"p/n","Test":"TestOther","Output":"other package's output\n"}
{"Action":"output","Package":"p/m","Output":"FAIL\tp/m\t462.7s\n"}
{"Action":"fail","Package":"p/m","Elapsed":462.7}
{"Action":"pass","Package":"p/n","Test":"TestOther"}
{"Action":"pass","Package":"p/n"}
`
	var out bytes.Buffer
	if code := check(strings.NewReader(died), &out, nil); code == 0 {
		t.Errorf("exit code 0 for a failed package")
	}
	if !strings.Contains(out.String(), "goroutine 7 [chan receive]") {
		t.Errorf("the running test's output was not printed:\n%s", out.String())
	}
	if strings.Contains(out.String(), "other package's output") {
		t.Errorf("a passing test of another package was printed:\n%s", out.String())
	}
}
