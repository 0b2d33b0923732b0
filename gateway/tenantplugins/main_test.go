package tenantplugins

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// examplesDir holds the example plugins of package plugins, which these tests load.
var examplesDir = filepath.Join("..", "..", "plugins", "examples")

// cacheDir is one compilation cache for the whole test binary: compiling a Go-built
// module takes seconds, and every test would otherwise pay it.
var cacheDir string

func TestMain(m *testing.M) {
	for _, name := range []string{"noop", "audit-jsonl", "ttl-on-activity", "bad-misbehave"} {
		if err := buildExample(name); err != nil {
			fmt.Fprintln(os.Stderr, "building example plugin:", err)
			os.Exit(1)
		}
	}
	dir, err := os.MkdirTemp("", "sandgate-tenantplugins-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cacheDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildExample builds plugins/examples/<name>/<name>.wasm when it is missing or older
// than its source, as `make plugins` does, so that `go test` works alone.
func buildExample(name string) error {
	src := filepath.Join(examplesDir, name, "main.go")
	out := filepath.Join(examplesDir, name, name+".wasm")
	if o, err := os.Stat(out); err == nil {
		if s, err := os.Stat(src); err == nil && !s.ModTime().After(o.ModTime()) {
			return nil
		}
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	cmd := exec.Command(goTool, "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./"+filepath.ToSlash(filepath.Join(examplesDir, name)))
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", name, err, b)
	}
	return nil
}

func example(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(examplesDir, name, name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
