// Package typecheck loads Go packages from source, type-checked against
// their dependencies' export data (go list -export), for the tests that
// read the module's code: which package produces a series
// (pipeline/series_test.go), and the bounds every product package keeps
// (harness/boundcheck). It needs only the go command: no golang.org/x/tools.
package typecheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Package is one package type-checked from its non-test source.
type Package struct {
	Path  string      // its import path
	Files []*ast.File // its .go files but the tests, parsed with comments
	Names []string    // the files' paths, relative to the module root
	Fset  *token.FileSet
	Info  *types.Info // Defs, Uses, Types and Selections filled
	Types *types.Package
}

// Module is every package of the module at root (the directory holding
// go.mod), type-checked once per process and root.
func Module(root string) ([]*Package, error) {
	modules.mu.Lock()
	defer modules.mu.Unlock()
	if m, ok := modules.by[root]; ok {
		return m.pkgs, m.err
	}
	pkgs, err := loadModule(root)
	modules.by[root] = loaded{pkgs, err}
	return pkgs, err
}

var modules = struct {
	mu sync.Mutex
	by map[string]loaded
}{by: map[string]loaded{}}

type loaded struct {
	pkgs []*Package
	err  error
}

// Root is the root of the module the go command finds from the working
// directory (a test's: its package's directory).
func Root() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside a module (go env GOMOD says %q)", mod)
	}
	return filepath.Dir(mod), nil
}

// listed is what go list says of one package.
type listed struct {
	ImportPath, Export, Dir string
	GoFiles                 []string
	Module                  *struct{ Main bool }
}

// list runs go list -deps -export in dir over patterns.
func list(dir string, patterns ...string) ([]listed, error) {
	args := append([]string{"list", "-deps", "-export", "-json=ImportPath,Export,Dir,GoFiles,Module"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w\n%s", err, stderr.Bytes())
	}
	var ps []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// importerOf imports from the export data go list found.
func importerOf(fset *token.FileSet, ps []listed) types.Importer {
	exports := map[string]string{}
	for _, p := range ps {
		exports[p.ImportPath] = p.Export
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
}

func loadModule(root string) ([]*Package, error) {
	ps, err := list(root, "./...")
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	imp := importerOf(fset, ps)
	var pkgs []*Package
	for _, l := range ps {
		if l.Module == nil || !l.Module.Main {
			continue
		}
		var files []string
		for _, f := range l.GoFiles {
			files = append(files, filepath.Join(l.Dir, f))
		}
		p, err := check(fset, imp, root, l.ImportPath, files)
		if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		return nil, fmt.Errorf("%d packages in the module at %s: the listing is broken", len(pkgs), root)
	}
	return pkgs, nil
}

// Dir type-checks the .go files of dir (a testdata package, which go list
// does not see) as the package path, against the export data of what they
// import, resolved from the module at root: a planted example may import
// the module's own packages, internal ones included.
func Dir(root, dir, path string) (*Package, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(names) == 0 {
		return nil, fmt.Errorf("no .go files in %s: %v", dir, err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return strings.HasSuffix(n, "_test.go") })
	fset := token.NewFileSet()
	imports := map[string]bool{}
	for _, n := range names {
		f, err := parser.ParseFile(fset, n, nil, parser.ImportsOnly)
		if err != nil {
			return nil, err
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			imports[p] = true
		}
	}
	var ps []listed
	if len(imports) > 0 {
		if ps, err = list(root, slices.Sorted(maps.Keys(imports))...); err != nil {
			return nil, err
		}
	}
	return check(fset, importerOf(fset, ps), root, path, names)
}

// check parses and type-checks files as package path.
func check(fset *token.FileSet, imp types.Importer, root, path string, files []string) (*Package, error) {
	p := &Package{Path: path, Fset: fset, Info: &types.Info{
		Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{},
		Types: map[ast.Expr]types.TypeAndValue{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}}
	for _, name := range files {
		a, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, name)
		if err != nil {
			rel = name
		}
		p.Files, p.Names = append(p.Files, a), append(p.Names, filepath.ToSlash(rel))
	}
	conf := types.Config{Importer: imp}
	var err error
	if p.Types, err = conf.Check(path, fset, p.Files, p.Info); err != nil {
		return nil, fmt.Errorf("type-checking %s: %w", path, err)
	}
	return p, nil
}
