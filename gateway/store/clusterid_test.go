package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClusterID(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	a, err := s.ClusterID(ctx)
	if err != nil || a == "" {
		t.Fatalf("cluster id: %q, %v", a, err)
	}
	if b, _ := s.ClusterID(ctx); b != a {
		t.Fatalf("cluster id changed: %q then %q", a, b)
	}

	// The embedded store keeps its id in its directory, so that a restart finds it again.
	dir := filepath.Join(t.TempDir(), "sub", "store")
	var ids []string
	for i := 0; i < 2; i++ {
		e, err := Open(ctx, Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		id, err := e.ClusterID(ctx)
		e.Close()
		if err != nil || id == "" {
			t.Fatalf("embedded cluster id: %q, %v", id, err)
		}
		ids = append(ids, id)
	}
	if ids[0] != ids[1] {
		t.Fatalf("embedded store restarted with another cluster id: %v", ids)
	}
	if ids[0] == a {
		t.Fatalf("two stores share cluster id %q", a)
	}
}

// openEmbedded opens an embedded store with opts and returns it with its cluster id.
func openEmbedded(t *testing.T, opts Options) (*Store, string) {
	t.Helper()
	e, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.ClusterID(context.Background())
	if err != nil || id == "" {
		e.Close()
		t.Fatalf("embedded cluster id: %q, %v", id, err)
	}
	return e, id
}

// TestEmbeddedStoresOfOneUser: embedded stores that run at once never share a cluster
// id, whoever runs them; one restarted alone gets its id back.
func TestEmbeddedStoresOfOneUser(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Run("two at once have two ids", func(t *testing.T) {
		a, idA := openEmbedded(t, Options{})
		defer a.Close()
		b, idB := openEmbedded(t, Options{})
		defer b.Close()
		if idA == idB {
			t.Fatalf("two embedded stores running at once share cluster id %q", idA)
		}
	})
	t.Run("one restarted keeps its id", func(t *testing.T) {
		a, idA := openEmbedded(t, Options{Prefix: "restart:"})
		a.Close()
		again, idAgain := openEmbedded(t, Options{Prefix: "restart:"})
		defer again.Close()
		if idAgain != idA {
			t.Fatalf("restarted embedded store has cluster id %q, want %q", idAgain, idA)
		}
	})
	t.Run("a named directory in use is refused", func(t *testing.T) {
		dir := t.TempDir()
		a, _ := openEmbedded(t, Options{Dir: dir})
		defer a.Close()
		b, err := Open(context.Background(), Options{Dir: dir})
		if err == nil {
			b.Close()
			t.Fatal("a second embedded store opened a directory in use")
		}
		if !errors.Is(err, errDirInUse) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("error = %v, want one naming %s in use", err, dir)
		}
	})
	t.Run("the per-user id moves into slot 0 once", func(t *testing.T) {
		perUser := perUserClusterFile("peruser:")
		if err := os.MkdirAll(filepath.Dir(perUser), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(perUser, []byte("old-id\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		a, idA := openEmbedded(t, Options{Prefix: "peruser:"})
		defer a.Close()
		if idA != "old-id" {
			t.Fatalf("first store after the upgrade has cluster id %q, want the per-user file's old-id", idA)
		}
		if _, err := os.Stat(perUser); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("per-user cluster file still there after its migration: %v", err)
		}
		b, idB := openEmbedded(t, Options{Prefix: "peruser:"})
		defer b.Close()
		if idB == "old-id" {
			t.Fatal("a second store running beside the first took the migrated id too")
		}
	})
}
