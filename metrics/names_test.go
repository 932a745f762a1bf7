package metrics_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/metrics"
)

// The collectors under these directories produce the series; every other
// package of the module only reads them.
var producers = []string{"cgroup", "node", "process", "gpu", "scrape"}

// declared parses names.go: each name-declaring identifier and, for a var
// set from a function call (ContainerPressureMemorySome =
// ContainerPressure("memory", "some")), the function that spells it.
//
// deps lists, per function, the names its body uses (GPUPrefix spells
// GPUNamePrefix): a producer calling the function produces them too.
func declared(t *testing.T) (names, values map[string]string, deps map[string][]string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "names.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	names, values, deps = map[string]string{}, map[string]string{}, map[string][]string{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			names[d.Name.Name] = d.Name.Name
			ast.Inspect(d.Body, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok {
					deps[d.Name.Name] = append(deps[d.Name.Name], id.Name)
				}
				return true
			})
		case *ast.GenDecl:
			for _, s := range d.Specs {
				vs, ok := s.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for i, id := range vs.Names {
					names[id.Name] = id.Name
					if i >= len(vs.Values) {
						continue
					}
					switch v := vs.Values[i].(type) {
					case *ast.BasicLit:
						values[id.Name], _ = strconv.Unquote(v.Value)
					case *ast.CallExpr:
						if fn, ok := v.Fun.(*ast.Ident); ok {
							names[id.Name] = fn.Name
						}
					}
				}
			}
		}
	}
	return names, values, deps
}

// goFiles walks the module's non-test Go files, calling fn with the path
// relative to the module root.
func goFiles(t *testing.T, fn func(rel string, f *ast.File)) {
	t.Helper()
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		fn(filepath.ToSlash(rel), f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A rename in names.go reaches producer and consumers alike; what can still
// break is a collector that stops producing a series a consumer reads (the
// summary, forensics, fast sampling near the limit): that fails here.
func TestConsumedNamesAreProduced(t *testing.T) {
	names, _, deps := declared(t)
	produced := map[string]bool{}
	consumed := map[string][]string{}
	goFiles(t, func(rel string, f *ast.File) {
		dir := filepath.Dir(rel)
		isProducer := false
		for _, p := range producers {
			isProducer = isProducer || dir == "metrics/"+p
		}
		if dir == "metrics" {
			return
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "metrics" {
				return true
			}
			if _, ok := names[sel.Sel.Name]; !ok {
				return true
			}
			if isProducer {
				produced[sel.Sel.Name] = true
			} else {
				consumed[sel.Sel.Name] = append(consumed[sel.Sel.Name], rel)
			}
			return true
		})
	})
	for fn := range produced {
		for _, id := range deps[fn] {
			produced[id] = true
		}
	}
	if len(consumed) == 0 || len(produced) == 0 {
		t.Fatalf("found %d consumed and %d produced names: the scan is broken", len(consumed), len(produced))
	}
	for name, where := range consumed {
		if !produced[name] && !produced[names[name]] {
			t.Errorf("metrics.%s is read by %v but no collector (metrics/{%s}) produces it", name, where, strings.Join(producers, ","))
		}
	}
}

// Every series name is spelled once: no other non-test file holds one as a
// string literal. (GPU name suffixes are left out: "memory_total_megabytes"
// is also a key of `bridge sample`'s detected GPU.)
func TestNamesSpelledOnce(t *testing.T) {
	_, values, _ := declared(t)
	byValue := map[string]string{}
	for id, v := range values {
		for _, scope := range []string{"container_", "node_", "rootfs_", "netns_", "process_"} {
			if strings.HasPrefix(v, scope) {
				byValue[v] = id
			}
		}
	}
	if len(byValue) < 30 {
		t.Fatalf("only %d names found in names.go: the scan is broken", len(byValue))
	}
	goFiles(t, func(rel string, f *ast.File) {
		if rel == "metrics/names.go" {
			return
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if id, ok := byValue[s]; ok {
				t.Errorf("%s spells %q: use metrics.%s", rel, s, id)
			}
			return true
		})
	})
}

func TestDigits(t *testing.T) {
	for s, want := range map[string]bool{"0": true, "17": true, "": false, "1a": false, "-1": false, "٣": false, " 1": false} {
		if got := metrics.Digits(s); got != want {
			t.Errorf("Digits(%q) = %v, want %v", s, got, want)
		}
	}
}
