package gateway

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestArchitectureNamesEveryFileAndPackage keeps docs/ARCHITECTURE.md, the map of the
// code, in step with the code: every Go package directory of the repository (but
// testdata, node_modules and web/, the console) must be named there by its path
// from the repository's root, and every non-test Go file under gateway/ by its path, or
// by its name in the first column of a table that follows a line naming its directory
// ("The store, `gateway/store/`:" then "| `events.go` | …"). A new package or core file
// without a line on the map fails here, and so does a core file missing from the list in
// the core's package doc (gateway/gateway.go).
func TestArchitectureNamesEveryFileAndPackage(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := namesInBackquotes(string(doc))

	packages := map[string]bool{}
	var coreFiles []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
		if d.IsDir() {
			switch d.Name() {
			case "testdata", "node_modules", ".git":
				return filepath.SkipDir
			}
			if rel == "web" || strings.HasPrefix(rel, "web/") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		if dir := filepath.ToSlash(filepath.Dir(rel)); dir != "." {
			packages[dir] = true
		}
		if strings.HasPrefix(rel, "gateway/") && !strings.HasSuffix(rel, "_test.go") {
			coreFiles = append(coreFiles, strings.TrimPrefix(rel, "gateway/"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var missing []string
	for dir := range packages {
		if !named[dir] && !named[dir+"/"] {
			missing = append(missing, "package "+dir)
		}
	}
	for _, file := range coreFiles {
		if !named["gateway/"+file] {
			missing = append(missing, "file gateway/"+file)
		}
	}
	// The core's package doc keeps its own list of the core's files.
	src, err := os.ReadFile(filepath.Join(root, "gateway", "gateway.go"))
	if err != nil {
		t.Fatal(err)
	}
	pkgDoc, _, _ := strings.Cut(string(src), "\npackage gateway")
	listed := map[string]bool{}
	for _, w := range strings.Fields(pkgDoc) {
		listed[w] = true
	}
	for _, file := range coreFiles {
		if !strings.Contains(file, "/") && !listed[file] {
			missing = append(missing, "file gateway/"+file+" (in the package doc of gateway/gateway.go)")
		}
	}
	slices.Sort(missing)
	for _, m := range missing {
		t.Errorf("the map of the code does not name %s", m)
	}
}

var backquoted = regexp.MustCompile("`([^`\n]+)`")

// namesInBackquotes returns the paths a Markdown text names between backquotes: each
// name as written (`gateway/store`, `gateway/store/`), and each name in the first column
// of a table joined to the directory named last before the table (a backquoted name
// ending in a slash, "The store, `gateway/store/`:").
func namesInBackquotes(text string) map[string]bool {
	names := map[string]bool{}
	dir := ""
	for _, line := range strings.Split(text, "\n") {
		for _, m := range backquoted.FindAllStringSubmatch(line, -1) {
			names[m[1]] = true
		}
		if cells := strings.Split(line, "|"); strings.HasPrefix(line, "|") && len(cells) > 2 {
			for _, m := range backquoted.FindAllStringSubmatch(cells[1], -1) {
				names[dir+m[1]] = true
			}
			continue
		}
		for _, m := range backquoted.FindAllStringSubmatch(line, -1) {
			if strings.HasSuffix(m[1], "/") {
				dir = m[1]
			}
		}
	}
	return names
}
