package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

// openTestStore runs a real redis-server (test/testenv's) on a free loopback port and
// opens a Store on it; inside TestStoreOnRedisCluster it opens one on that test's Redis
// Cluster instead, under a prefix of its own. Either way every script and transaction
// is checked to keep to one hash slot (slotCheck).
func openTestStore(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	opts := Options{Prefix: "t:"}
	if testCluster != nil {
		opts.URL, opts.Cluster, opts.Prefix = testCluster.URL, true, "t"+testenv.RandomHex(4)+":"
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	} else {
		r, err := testenv.StartRedis(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Stop)
		opts.URL = r.URL
	}
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	s.rdb.AddHook(slotCheck{t})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestSessions(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	key := &APIKey{ID: "k1", Tenant: "t1", Role: "member"}
	if err := s.PutKey(ctx, "secret-1", key); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	sess := &Session{KeyID: "k1", Tenant: "t1", Role: "member", CSRFToken: "c", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := s.PutSession(ctx, "cookie-1", sess); err != nil {
		t.Fatal(err)
	}
	got, k, err := s.GetSession(ctx, "cookie-1", "admin")
	if err != nil || got.KeyID != "k1" || got.CSRFToken != "c" || !got.ExpiresAt.Equal(sess.ExpiresAt) || k == nil || k.Role != "member" {
		t.Fatalf("GetSession = %+v, %+v, %v", got, k, err)
	}
	// Redis expires the session with it.
	if ttl := s.rdb.TTL(ctx, s.sessionKey("cookie-1")).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("session TTL = %v, want about an hour", ttl)
	}
	// Only the hash of the cookie value is a key.
	if n := s.rdb.Exists(ctx, s.Key("session", "cookie-1")).Val(); n != 0 {
		t.Fatal("the cookie value itself is a Redis key")
	}
	if _, _, err := s.GetSession(ctx, "cookie-2", "admin"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown cookie: %v", err)
	}

	// A revoked key: the session is still there, its key is not.
	if err := s.RevokeKey(ctx, "t1", "k1"); err != nil {
		t.Fatal(err)
	}
	if got, k, err := s.GetSession(ctx, "cookie-1", "admin"); err != nil || got == nil || k != nil {
		t.Fatalf("after revoke: %+v, %+v, %v", got, k, err)
	}

	// The platform key's sessions name no issued key.
	admin := &Session{KeyID: "admin", Tenant: "default", Role: "admin", Admin: true, KeyHash: "h", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := s.PutSession(ctx, "cookie-admin", admin); err != nil {
		t.Fatal(err)
	}
	if got, k, err := s.GetSession(ctx, "cookie-admin", "admin"); err != nil || got.KeyHash != "h" || k != nil {
		t.Fatalf("admin session: %+v, %+v, %v", got, k, err)
	}

	if err := s.DeleteSession(ctx, "cookie-admin"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetSession(ctx, "cookie-admin", "admin"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted session: %v", err)
	}
	if err := s.PutSession(ctx, "old", &Session{KeyID: "k", ExpiresAt: now.Add(-time.Second)}); err == nil {
		t.Fatal("an expired session was stored")
	}
}

func TestPolicyOverridesAndReloadNotice(t *testing.T) {
	s := openTestStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready, notices := make(chan struct{}), make(chan struct{}, 4)
	done := make(chan error, 1)
	go func() {
		done <- s.SubscribePolicy(ctx, func() { close(ready) }, func() { notices <- struct{}{} })
	}()
	<-ready
	mods := map[string]string{"a.rego": "package a", "b.rego": "package b"}
	if err := s.SetPolicyOverrides(ctx, mods); err != nil {
		t.Fatal(err)
	}
	select {
	case <-notices:
	case <-time.After(5 * time.Second):
		t.Fatal("no reload notice")
	}
	got, err := s.PolicyOverrides(ctx)
	if err != nil || len(got) != 2 || got["b.rego"] != "package b" {
		t.Fatalf("PolicyOverrides = %v, %v", got, err)
	}
	// Replacing drops what is not named any more; empty clears.
	if err := s.SetPolicyOverrides(ctx, map[string]string{"b.rego": "package c"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.PolicyOverrides(ctx); len(got) != 1 || got["b.rego"] != "package c" {
		t.Fatalf("after replace: %v", got)
	}
	if err := s.SetPolicyOverrides(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.PolicyOverrides(ctx); len(got) != 0 {
		t.Fatalf("after clear: %v", got)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("subscription ended with %v", err)
	}
}

// Every write of a sandbox record is announced, its creation included (the live list
// shows new sandboxes from it).
func TestSandboxWritesAnnounced(t *testing.T) {
	s := openTestStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready, ids := make(chan struct{}), make(chan string, 8)
	go func() { _ = s.SubscribeChangesReady(ctx, func() { close(ready) }, func(id string) { ids <- id }) }()
	<-ready
	sb := &Sandbox{ID: "sb-1", Tenant: "t1", State: "Pending", CreatedAt: time.Now()}
	if err := s.CreateSandbox(ctx, sb, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ModifySandbox(ctx, "sb-1", func(x *Sandbox) error { x.State = "Running"; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox(ctx, "sb-1"); err != nil {
		t.Fatal(err)
	}
	for i, what := range []string{"create", "update", "delete"} {
		select {
		case id := <-ids:
			if id != "sb-1" {
				t.Fatalf("notice %d = %q", i, id)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no notice for the %s", what)
		}
	}
}

func TestEventReads(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	for i := range 5 {
		if _, err := s.AppendEvent(ctx, Event{Type: fmt.Sprintf("e.%d", i), Tenant: "t1", Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	newest, err := s.ReadEventsBefore(ctx, "t1", "", 2)
	if err != nil || len(newest) != 2 || newest[0].Type != "e.4" || newest[1].Type != "e.3" {
		t.Fatalf("newest = %+v, %v", newest, err)
	}
	older, err := s.ReadEventsBefore(ctx, "t1", newest[1].ID, 10)
	if err != nil || len(older) != 3 || older[0].Type != "e.2" {
		t.Fatalf("older = %+v, %v", older, err)
	}
	last, err := s.LastEventID(ctx, "t1")
	if err != nil || last != newest[0].ID {
		t.Fatalf("LastEventID = %q, %v", last, err)
	}
	if last, _ := s.LastEventID(ctx, "nobody"); last != "0" {
		t.Fatalf("LastEventID of an empty stream = %q", last)
	}

	// A blocked reader wakes with an event written after it started waiting.
	got := make(chan []Event, 1)
	go func() {
		evs, err := s.WaitEvents(ctx, "t1", last, 10*time.Second, 10)
		if err != nil {
			t.Error(err)
		}
		got <- evs
	}()
	// Redis itself says when the reader is blocked: no guess of how long that takes.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(infoOf(ctx, s, s.eventStream("t1"), "clients"), "blocked_clients:1"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reader never blocked")
		}
	}
	if _, err := s.AppendEvent(ctx, Event{Type: "late", Tenant: "t1", Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	select {
	case evs := <-got:
		if len(evs) != 1 || evs[0].Type != "late" {
			t.Fatalf("WaitEvents = %+v", evs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the blocked reader did not wake")
	}
	// Nothing new: an empty answer after the wait.
	if evs, err := s.WaitEvents(ctx, "t1", "$", 100*time.Millisecond, 10); err != nil || len(evs) != 0 {
		t.Fatalf("idle WaitEvents = %+v, %v", evs, err)
	}
}
