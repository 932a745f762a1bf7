package tracker_test

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/bridge-dev/bridge/"

// goList runs `go list` from the module's root with args.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// Layers point one way: a tracker adapter translates bridge's records to
// one wire protocol and knows nothing of collectors, forensics, reports or
// the pipeline (what is built from a run lives above it, in jobrun). What
// each may import of bridge, besides its own subpackages, is the list
// below: at most six packages, none with cgo (NVML's came in through the
// job report once).
func TestTrackersImportLittle(t *testing.T) {
	// metrics reads through internal/kfile (the Sampler's bounded reads);
	// the adapters read their users' files (CA bundles, credentials, the
	// netrc) through it too.
	base := []string{"metrics", "config/option", "redact", "internal/printable", "internal/kfile"}
	for _, tc := range []struct {
		pkg     string
		allowed []string
	}{
		{"tracker", base},
		{"tracker/mlflow", append([]string{"tracker"}, base...)},
		{"tracker/wandb", append([]string{"tracker"}, base...)},
	} {
		if len(tc.allowed) > 6 {
			t.Fatalf("%s: %d bridge packages allowed, the bound is 6", tc.pkg, len(tc.allowed))
		}
		deps := goList(t, "-deps", "-f", "{{.ImportPath}} {{len .CgoFiles}}", "./"+tc.pkg)
		if len(deps) < 5 {
			t.Fatalf("%s: go list gave %q", tc.pkg, deps)
		}
		for _, line := range deps {
			path, cgo, _ := strings.Cut(line, " ")
			rel, ours := strings.CutPrefix(path, module)
			if strings.Contains(path, "go-nvml") || (ours && cgo != "0") {
				t.Errorf("%s imports cgo through %s", tc.pkg, path)
			}
			if !ours || rel == tc.pkg || strings.HasPrefix(rel, tc.pkg+"/") {
				continue
			}
			if !slices.Contains(tc.allowed, rel) {
				t.Errorf("%s imports %s: a tracker adapter imports only %v (and its own subpackages)", tc.pkg, rel, tc.allowed)
			}
		}
	}
}

// No product file outside tracker/ names a tracker adapter but the one
// list of trackers (pipeline/trackers.go): everything else goes through
// the registrations. Test support (harness/, mocks/, e2e/, bench/) and
// tests may.
func TestOneTrackerList(t *testing.T) {
	const list = "pipeline/trackers.go"
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	apart := func(rel string) bool {
		return slices.ContainsFunc([]string{"tracker/", "harness/", "mocks/", "e2e/", "bench/"}, func(p string) bool { return strings.HasPrefix(rel, p) })
	}
	seen := false
	for _, line := range goList(t, "-f", "{{.Dir}}|{{join .GoFiles \",\"}}", "./...") {
		dir, files, _ := strings.Cut(line, "|")
		for _, f := range strings.Split(files, ",") {
			path := filepath.Join(dir, f)
			rel, err := filepath.Rel(root, path)
			if f == "" || err != nil || apart(filepath.ToSlash(rel)) {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range file.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if !strings.HasPrefix(p, module+"tracker/") {
					continue
				}
				if rel != list {
					t.Errorf("%s imports %s: only %s names a tracker", rel, p, list)
				}
				seen = true
			}
		}
	}
	if !seen {
		t.Errorf("%s names no tracker: the check looked at the wrong files", list)
	}
}
