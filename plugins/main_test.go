package plugins_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/sandgate/sandgate/plugins"
)

// cacheDir is one compilation cache for the whole test binary: compiling a
// Go-built module takes a while, and every test would otherwise pay it.
var cacheDir string

func TestMain(m *testing.M) {
	if err := buildExamples(); err != nil {
		fmt.Fprintln(os.Stderr, "building example plugins:", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "sandgate-plugins-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cacheDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildExamples builds each plugin under examples/ whose .wasm is missing
// or older than its sources, so `go test ./plugins/...` works alone.
func buildExamples() error {
	guestSrc, _ := filepath.Glob("guest/*.go")
	dirs, err := filepath.Glob("examples/*/main.go")
	if err != nil {
		return err
	}
	for _, mainGo := range dirs {
		dir := filepath.Dir(mainGo)
		name := filepath.Base(dir)
		out := filepath.Join(dir, name+".wasm")
		if !stale(out, append([]string{mainGo}, guestSrc...)) {
			continue
		}
		cmd := exec.Command(goTool(), "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./"+dir)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", dir, err, b)
		}
	}
	return nil
}

func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func stale(out string, sources []string) bool {
	o, err := os.Stat(out)
	if err != nil {
		return true
	}
	for _, src := range sources {
		if s, err := os.Stat(src); err == nil && s.ModTime().After(o.ModTime()) {
			return true
		}
	}
	return false
}

// wasm returns the built module of example name.
func wasm(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("examples", name, name+".wasm"))
	if err != nil {
		t.Fatalf("read example %s: %v", name, err)
	}
	return b
}

// newHost starts a host sharing the test binary's compilation cache and
// closes it when the test ends.
func newHost(t testing.TB, opts plugins.HostOptions) *plugins.Host {
	t.Helper()
	opts.CacheDir = cacheDir
	h, err := plugins.NewHost(context.Background(), opts)
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}
