// Command skipcheck reads `go test -json` on stdin, prints what a plain
// `go test` prints (package results, the output of failed tests) plus every
// skipped test with its reason, and exits 1 when a test failed or a test
// skipped that is not on the allow-list: CI must not pass by skipping.
//
//	go test -json ./... | go run ./harness/testbin/skipcheck -allow .ci/allowed-skips
//
// An allow-list line is "PACKAGE_REGEXP TEST_REGEXP" (both anchored), then
// an optional "# why"; blank lines and lines starting with # are ignored.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output events
}

type rule struct {
	pkg, test *regexp.Regexp
}

func main() {
	allow := flag.String("allow", "", "allow-list file of skips that are legitimate here (e.g. GPU-only tests)")
	flag.Parse()
	rules, err := readRules(*allow)
	if err != nil {
		fmt.Fprintf(os.Stderr, "skipcheck: -allow %s: %v\n", *allow, err)
		os.Exit(2)
	}
	os.Exit(check(os.Stdin, os.Stdout, rules))
}

func readRules(path string) ([]rule, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rules []rule
	for i, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want PACKAGE_REGEXP TEST_REGEXP, got %q", i+1, line)
		}
		p, err := regexp.Compile("^(?:" + f[0] + ")$")
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		t, err := regexp.Compile("^(?:" + f[1] + ")$")
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		rules = append(rules, rule{p, t})
	}
	return rules, nil
}

func allowed(rules []rule, pkg, test string) bool {
	for _, r := range rules {
		if r.pkg.MatchString(pkg) && r.test.MatchString(test) {
			return true
		}
	}
	return false
}

type skip struct {
	pkg, test, why string
	allowed        bool
}

func check(in io.Reader, out io.Writer, rules []rule) int {
	buf := map[string]*strings.Builder{} // package + test -> its output so far
	var skips []skip
	failed := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(out, sc.Text()) // not JSON: go vet or a build message
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch {
		case e.Action == "build-output":
			fmt.Fprint(out, e.Output)
		case e.Action == "build-fail":
			failed = true
		case e.Test == "":
			if e.Action == "output" {
				fmt.Fprint(out, e.Output)
			}
			if e.Action == "fail" {
				failed = true
				// A package that failed without its tests' fail events
				// (a timeout's panic, a crash, a SIGQUIT dump): what its
				// running tests printed is the only clue, so print it.
				for k, b := range buf {
					if strings.HasPrefix(k, e.Package+"\x00") {
						fmt.Fprint(out, b.String())
						delete(buf, k)
					}
				}
			}
		case e.Action == "output":
			if buf[key] == nil {
				buf[key] = &strings.Builder{}
			}
			buf[key].WriteString(e.Output)
		case e.Action == "fail":
			failed = true
			if b := buf[key]; b != nil {
				fmt.Fprint(out, b.String())
			}
			delete(buf, key)
		case e.Action == "skip":
			skips = append(skips, skip{e.Package, e.Test, reason(buf[key]), allowed(rules, e.Package, e.Test)})
			delete(buf, key)
		case e.Action == "pass":
			delete(buf, key)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(out, "skipcheck: reading go test -json: %v\n", err)
		return 1
	}
	sort.Slice(skips, func(i, j int) bool {
		return skips[i].pkg+" "+skips[i].test < skips[j].pkg+" "+skips[j].test
	})
	bad := 0
	for _, s := range skips {
		tag := "SKIPPED (not allowed)"
		if s.allowed {
			tag = "skipped (allowed)"
		} else {
			bad++
		}
		fmt.Fprintf(out, "%s: %s %s: %s\n", tag, s.pkg, s.test, s.why)
	}
	if bad > 0 {
		fmt.Fprintf(out, "FAIL: %d test(s) skipped that CI must run: give them what they need (scripts/test.sh installs it) or, when the skip is legitimate on this machine (no GPU), add \"PACKAGE TEST\" to .ci/allowed-skips\n", bad)
		return 1
	}
	if failed {
		return 1
	}
	return 0
}

// reason is the skip message: the test's output without the framework's
// own lines.
func reason(b *strings.Builder) string {
	if b == nil {
		return "(no reason given)"
	}
	var lines []string
	for _, l := range strings.Split(b.String(), "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		lines = append(lines, t)
	}
	if len(lines) == 0 {
		return "(no reason given)"
	}
	return strings.Join(lines, " | ")
}
