// Command gendocs writes the generated parts of bridge's docs (package
// docgen): go generate ./docgen.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/bridge-dev/bridge/docgen"
	"github.com/bridge-dev/bridge/pipeline"
)

func main() {
	root := flag.String("root", ".", "the module's root")
	flag.Parse()
	files, err := docgen.Files(*root, pipeline.Collectors(), pipeline.Choices())
	if err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := os.WriteFile(filepath.Join(*root, p), files[p], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gendocs:", err)
			os.Exit(1)
		}
	}
}
