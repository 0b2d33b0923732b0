package gateway

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The import direction of the repository (docs/ARCHITECTURE.md, "Import direction"),
// checked on the source of every non-test file:
//
//   - nothing outside caddy/ imports Caddy;
//   - the core (gateway/ and its packages but gateway/api) imports net/http only for the
//     agent client: choosing HTTP statuses and serving requests is gateway/api's job;
//   - gateway/api reaches the runtime and the store only through the core;
//   - the core never imports its HTTP layer, and sandbox-agent (which ships inside
//     sandboxes) imports none of the gateway;
//   - a feature package (featurePackages) imports neither the core's package gateway,
//     gateway/api nor another feature: it reaches the core only through the Host
//     interface it declares;
//   - the leaves the core shares with its features (sharedLeaves) import nothing of
//     sandgate, so that any feature may use them.
//
// Where today's code breaks a rule, the file is listed below as an exception. The lists
// only shrink: a listed file that no longer breaks its rule fails the test too, so that
// whoever fixes it also strikes it off.

// coreHTTPExceptions are the core's files that import net/http for something else than
// the agent client. There are none: the core's errors carry a kind that gateway/api maps
// to a status, its calls to agents and enforcers go through sandbox-agent/agentclient's
// typed methods, and the tracing middleware is the top-level package tracing. Keep it so.
var coreHTTPExceptions = []string{}

// apiBelowCoreExceptions are gateway/api's files that import runtimes or gateway/store
// directly instead of asking the core.
var apiBelowCoreExceptions = []string{}

const module = "github.com/sandgate/sandgate/"

// featurePackages are the core's features that live in packages of their own, each
// given a Host by package gateway (but gateway/tenantplugins, which needs nothing of the
// core).
var featurePackages = []string{"gateway/pool", "gateway/access", "gateway/egress", "gateway/state", "gateway/usage", "gateway/policyadmin", "gateway/tenancy", "gateway/batch", "gateway/tenantplugins", "gateway/eventlog", "gateway/recovery", "gateway/admission", "gateway/changefeed"}

// sharedLeaves are the packages of the core's vocabulary (its errors, its callers, a
// create's body) that package gateway re-exports and its features use.
var sharedLeaves = []string{"gateway/fault", "gateway/principal", "gateway/createreq"}

// inPackage says whether file lies directly in one of pkgs.
func inPackage(file string, pkgs []string) bool {
	return slices.Contains(pkgs, filepath.ToSlash(filepath.Dir(file)))
}

// agentClientFile says whether a core file is the agent client, the one user of net/http
// the core is meant to have (a file or a package of its own, by its name).
func agentClientFile(path string) bool {
	return strings.Contains(filepath.Base(path), "agentclient") || strings.Contains(filepath.Dir(path), "agentclient")
}

func TestImportDirection(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string][]string{} // repo-relative file -> imports
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			imports[rel] = append(imports[rel], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(imports) < 100 {
		t.Fatalf("read only %d files from %s", len(imports), root)
	}

	breaks := func(file string, bad func(string) bool) bool { return slices.ContainsFunc(imports[file], bad) }
	inCore := func(file string) bool {
		return strings.HasPrefix(file, "gateway/") && !strings.HasPrefix(file, "gateway/api/")
	}
	rules := []struct {
		name       string
		applies    func(file string) bool
		bad        func(imp string) bool
		exceptions []string
	}{
		{"only caddy/ imports Caddy",
			func(f string) bool { return !strings.HasPrefix(f, "caddy/") },
			func(imp string) bool { return strings.HasPrefix(imp, "github.com/caddyserver/") }, nil},
		{"the core imports net/http only for the agent client",
			func(f string) bool { return inCore(f) && !agentClientFile(f) },
			func(imp string) bool { return imp == "net/http" || strings.HasPrefix(imp, "net/http/") }, coreHTTPExceptions},
		{"gateway/api reaches runtimes and the store only through the core",
			func(f string) bool { return strings.HasPrefix(f, "gateway/api/") },
			func(imp string) bool {
				return imp == module+"gateway/store" || imp == module+"runtimes" || strings.HasPrefix(imp, module+"runtimes/")
			}, apiBelowCoreExceptions},
		{"the core never imports its HTTP layer or Caddy glue",
			inCore,
			func(imp string) bool {
				return imp == module+"gateway/api" || strings.HasPrefix(imp, module+"caddy")
			}, nil},
		{"a feature package imports neither gateway nor gateway/api",
			func(f string) bool { return inPackage(f, featurePackages) },
			func(imp string) bool { return imp == module+"gateway" || imp == module+"gateway/api" }, nil},
		{"no feature package imports another",
			func(f string) bool { return inPackage(f, featurePackages) },
			func(imp string) bool {
				return strings.HasPrefix(imp, module) && slices.Contains(featurePackages, strings.TrimPrefix(imp, module))
			}, nil},
		{"the shared leaves import nothing of sandgate",
			func(f string) bool { return inPackage(f, sharedLeaves) },
			func(imp string) bool { return strings.HasPrefix(imp, module) }, nil},
		{"sandbox-agent imports none of the gateway",
			func(f string) bool { return strings.HasPrefix(f, "sandbox-agent/") },
			func(imp string) bool {
				for _, p := range []string{"gateway", "runtimes", "policy", "plugins", "caddy"} {
					if imp == module+p || strings.HasPrefix(imp, module+p+"/") {
						return true
					}
				}
				return false
			}, nil},
	}
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			for file := range imports {
				if r.applies(file) && breaks(file, r.bad) && !slices.Contains(r.exceptions, file) {
					t.Errorf("%s breaks the rule (imports %v)", file, slices.DeleteFunc(slices.Clone(imports[file]), func(i string) bool { return !r.bad(i) }))
				}
			}
			for _, file := range r.exceptions {
				if _, ok := imports[file]; !ok || !breaks(file, r.bad) {
					t.Errorf("%s is listed as an exception but no longer breaks the rule: strike it off the list", file)
				}
			}
		})
	}
}
