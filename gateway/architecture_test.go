package gateway

import (
	"go/ast"
	"go/parser"
	"go/token"
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

// maxServiceMethods bounds the methods of Service (exported or not, declared in the
// core's non-test files). Service keeps the sandbox lifecycle; a feature lives in a
// package of its own behind a Host (featurePackages). The bound only comes down: lower
// it when a feature leaves the core, never raise it to let one grow back in.
const maxServiceMethods = 76

// TestServiceMethodCount fails when Service has more methods than maxServiceMethods, and
// says so when it has fewer, so that the bound follows the count down.
func TestServiceMethodCount(t *testing.T) {
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, f := range pkgs["gateway"].Files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil {
				continue
			}
			recv := fd.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			if id, ok := recv.(*ast.Ident); ok && id.Name == "Service" {
				count++
			}
		}
	}
	switch {
	case count > maxServiceMethods:
		t.Errorf("Service has %d methods, more than %d: put the new behaviour in a feature package with a Host, not on the core", count, maxServiceMethods)
	case count < maxServiceMethods:
		t.Logf("Service has %d methods, fewer than %d: lower maxServiceMethods to %d", count, maxServiceMethods, count)
	}
}

// TestFeaturePackageDocsNameTheirFiles: the package doc of each feature package names
// every non-test file of the package but the one that holds the doc, as the core's
// package doc does for its files.
func TestFeaturePackageDocsNameTheirFiles(t *testing.T) {
	fileName := regexp.MustCompile(`[a-z0-9_]+\.go`)
	for _, pkg := range featurePackages {
		t.Run(pkg, func(t *testing.T) {
			dir := filepath.Join("..", filepath.FromSlash(pkg))
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var files []string
			docFile, named := "", map[string]bool{}
			for _, e := range entries {
				name := e.Name()
				if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
					continue
				}
				files = append(files, name)
				f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
				if err != nil {
					t.Fatal(err)
				}
				if f.Doc != nil {
					docFile = name
					for _, n := range fileName.FindAllString(f.Doc.Text(), -1) {
						named[n] = true
					}
				}
			}
			if docFile == "" {
				t.Fatalf("%s has no package doc", pkg)
			}
			for _, name := range files {
				if name != docFile && !named[name] {
					t.Errorf("the package doc of %s (in %s) does not name %s", pkg, docFile, name)
				}
			}
		})
	}
}
