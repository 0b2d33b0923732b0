package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sandgate/sandgate/plugins"
)

// startRedis runs a real redis-server on a free loopback port for the test.
func startRedis(t *testing.T) *redis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	t.Cleanup(func() { rdb.Close() })
	for deadline := time.Now().Add(5 * time.Second); ; {
		if err := rdb.Ping(context.Background()).Err(); err == nil {
			return rdb
		} else if time.Now().After(deadline) {
			t.Fatalf("redis-server on port %d never answered: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStore(t *testing.T) {
	ctx := context.Background()
	rdb := startRedis(t)
	store := plugins.NewStore(rdb, "test:")
	audit := plugins.Plugin{Tenant: "acme corp/1", Name: "audit", Version: "v1", Module: wasm(t, "audit-jsonl"),
		Config: plugins.Config{Hooks: []string{plugins.HookOnEvent}, Settings: json.RawMessage(`{"omitData":true}`)}}
	ttl := plugins.Plugin{Tenant: "acme corp/1", Name: "ttl", Module: wasm(t, "ttl-on-activity"),
		Config: plugins.Config{Hooks: []string{plugins.HookDecideTTL}, Limits: plugins.Limits{TimeoutMs: 500}}}

	changes := make(chan plugins.Change, 16)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	go func() { watchDone <- store.Watch(watchCtx, func(c plugins.Change) { changes <- c }) }()
	t.Cleanup(func() {
		stopWatch()
		if err := <-watchDone; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch: %v", err)
		}
	})
	time.Sleep(100 * time.Millisecond) // let the subscription start before the first write

	rev1, err := store.Put(ctx, audit)
	if err != nil {
		t.Fatal(err)
	}
	rev2, err := store.Put(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if rev2 <= rev1 {
		t.Errorf("revisions %d then %d, want increasing", rev1, rev2)
	}
	for _, want := range []plugins.Change{{Tenant: audit.Tenant, Name: "audit", Revision: rev1}, {Tenant: ttl.Tenant, Name: "ttl", Revision: rev2}} {
		select {
		case got := <-changes:
			if got != want {
				t.Errorf("change %+v, want %+v", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no change announced for %s", want.Name)
		}
	}

	got, err := store.Get(ctx, audit.Tenant, "audit")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != "v1" || string(got.Module) != string(audit.Module) || string(got.Config.Settings) != `{"omitData":true}` || got.Revision != rev1 {
		t.Errorf("Get = version %q, %d module bytes, settings %s, revision %d", got.Version, len(got.Module), got.Config.Settings, got.Revision)
	}
	list, err := store.List(ctx, audit.Tenant)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "audit" || list[1].Name != "ttl" || list[1].Module != nil || list[1].Version != list[1].Hash {
		t.Errorf("List = %+v", list)
	}

	// A replica syncs from the store into its host.
	h := newHost(t, plugins.HostOptions{})
	rev, err := store.Sync(ctx, h)
	if err != nil || rev != rev2 {
		t.Fatalf("Sync = %d, %v; want %d", rev, err, rev2)
	}
	if infos := h.List(audit.Tenant); len(infos) != 2 || infos[0].Version != "v1" {
		t.Fatalf("host after Sync: %+v", infos)
	}
	now := time.Now()
	if _, changed, err := h.DecideTTL(ctx, ttl.Tenant, plugins.TTLInput{Reason: plugins.ReasonActivity, Now: now, CurrentExpiresAt: now}); err != nil || !changed {
		t.Errorf("DecideTTL after Sync: changed=%v err=%v", changed, err)
	}
	before := h.List(audit.Tenant)[0]
	if err := store.Apply(ctx, h, audit.Tenant, "audit"); err != nil {
		t.Fatal(err)
	}
	if after := h.List(audit.Tenant)[0]; !after.LoadedAt.Equal(before.LoadedAt) {
		t.Errorf("Apply reloaded an unchanged plugin")
	}

	// Delete propagates through Apply.
	if _, err := store.Delete(ctx, audit.Tenant, "audit"); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-changes:
		if !c.Deleted || c.Name != "audit" {
			t.Errorf("change %+v, want a deletion of audit", c)
		}
		if err := store.Apply(ctx, h, c.Tenant, c.Name); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no change announced for the deletion")
	}
	if infos := h.List(audit.Tenant); len(infos) != 1 || infos[0].Name != "ttl" {
		t.Errorf("host after deletion: %+v", infos)
	}
	if _, err := store.Get(ctx, audit.Tenant, "audit"); !errors.Is(err, plugins.ErrNotFound) {
		t.Errorf("Get after Delete: %v", err)
	}
	if _, err := store.Delete(ctx, audit.Tenant, "audit"); !errors.Is(err, plugins.ErrNotFound) {
		t.Errorf("second Delete: %v", err)
	}
	if _, err := store.Delete(ctx, ttl.Tenant, "ttl"); err != nil {
		t.Fatal(err)
	}
	if tenants, _ := store.Tenants(ctx); len(tenants) != 0 {
		t.Errorf("tenants after deleting everything: %q", tenants)
	}
}
