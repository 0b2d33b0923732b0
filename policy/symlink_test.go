package policy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchKubernetesConfigMapLayout: a ConfigMap volume holds symlinks
// (access.rego -> ..data/access.rego, ..data -> ..<timestamp>) and is
// updated by swapping the ..data link. The watcher must follow that.
func TestWatchKubernetesConfigMapLayout(t *testing.T) {
	dir := t.TempDir()
	publish := func(generation string, files map[string]string) {
		t.Helper()
		gen := filepath.Join(dir, "..gen-"+generation)
		writeFiles(t, gen, files)
		tmpLink := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(gen), tmpLink); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmpLink, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		for name := range files {
			link := filepath.Join(dir, name)
			if _, err := os.Lstat(link); err == nil {
				continue
			}
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish("1", map[string]string{"ops.rego": "package sandgate.access\n\npermitted if input.principal.id == \"nobody\"\n"})
	e := newTestEngine(t, Options{Dir: dir, PollInterval: 100 * time.Millisecond})
	startWatch(t, e)
	ctx := context.Background()
	if d := e.Access(ctx, memberCreate); !d.Allow {
		t.Fatalf("initial: %+v", d)
	}
	for _, m := range e.Modules() {
		if m.Origin == OriginOperator && m.Name != "ops.rego" {
			t.Errorf("operator module %q loaded; the hidden ..data copies must be skipped", m.Name)
		}
	}
	time.Sleep(300 * time.Millisecond) // let the watcher take its first look
	publish("2", map[string]string{"ops.rego": freezeModule})
	waitFor(t, 2*time.Second, "ConfigMap update in force", func() bool { return e.Access(ctx, memberCreate).Code == "OPS::FREEZE" })
}
