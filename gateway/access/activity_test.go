package access

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
)

// TestRecordAccess: every proxied request queues its access event; a sandbox without
// renew-on-access has its activity noted at most once per activityThrottle and written
// at the next flush.
func TestRecordAccess(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	sb := s.putSandbox(t, "t1", nil, nil)
	rec := AccessRecord{Port: 8000, Method: "GET", Path: "/a", Status: 200, Bytes: 5, Duration: 1500 * time.Microsecond, Credential: "cookie"}
	s.m.RecordAccess(sb, rec)
	s.m.RecordAccess(sb, rec)

	s.host.mu.Lock()
	queued := slices.Clone(s.host.queued)
	s.host.mu.Unlock()
	if len(queued) != 2 {
		t.Fatalf("%d events queued, want 2", len(queued))
	}
	want := store.AccessData{Port: 8000, Method: "GET", Path: "/a", Status: 200, Bytes: 5, DurationMs: 1.5, Credential: "cookie"}
	if ev := queued[0]; ev.Type != plugins.EventPreviewAccessed || ev.SandboxID != sb.ID || ev.Tenant != "t1" || ev.Access == nil || *ev.Access != want {
		t.Fatalf("queued %+v (access %+v), want %+v", ev, ev.Access, want)
	}
	touches := s.m.takeTouches()
	if len(touches) != 1 {
		t.Fatalf("activity due for %d sandboxes after two accesses within the throttle, want 1", len(touches))
	}
	if s.m.takeTouches() != nil {
		t.Fatal("activity handed over twice")
	}

	s.host.offset.Add(int64(2 * activityThrottle))
	s.m.RecordAccess(sb, rec)
	s.m.FlushActivity()
	last, err := s.d.Store.LastActivity(ctx, sb.ID)
	if err != nil || last.IsZero() {
		t.Fatalf("last activity = %v, %v: not written by the flush", last, err)
	}
}

// TestRenewOnAccess: an access to a sandbox with renew-on-access moves its expiry, once
// per cooldown, emits sandbox.renewed, and counts each decision by its outcome.
func TestRenewOnAccess(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	exp := time.Now().Add(5 * time.Minute).UTC().Truncate(time.Second)
	sb := s.putSandbox(t, "t1", map[string]string{ExtensionRenewExtend: "600"}, &exp)
	rec := AccessRecord{Port: 8000, Method: "GET", Path: "/", Status: 200}

	s.m.RecordAccess(sb, rec)
	waitFor(t, "the renewal", func() bool { return s.renewCount(t, metrics.RenewRenewed) == 1 })
	got, err := s.d.Store.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := got.ExpiresAt.Sub(time.Now()); d < 590*time.Second || d > 610*time.Second {
		t.Fatalf("expiry %v from now after the renewal, want 600 s", d)
	}
	if types := s.host.emittedTypes(); !slices.Contains(types, "sandbox.renewed") {
		t.Errorf("events emitted %v, want sandbox.renewed", types)
	}

	s.host.offset.Add(int64(2 * activityThrottle))
	s.m.RecordAccess(sb, rec)
	waitFor(t, "the cooldown", func() bool { return s.renewCount(t, metrics.RenewCooldown) == 1 })

	// Once stopped, the Manager starts no renewal.
	s.m.Stop()
	s.host.offset.Add(int64(2 * time.Minute))
	s.m.RecordAccess(sb, rec)
	if n := s.renewCount(t, metrics.RenewRenewed) + s.renewCount(t, metrics.RenewCooldown); n != 2 {
		t.Fatalf("%v decisions after Stop, want the 2 before it", n)
	}
}

// TestDecideTTL: the built-in rule and a TTLDecider's say over it.
func TestDecideTTL(t *testing.T) {
	s := startManager(t, Config{MaxTimeout: time.Hour})
	at := time.Now().UTC().Truncate(time.Second)
	cur := at.Add(10 * time.Minute)
	errPlugin := errors.New("plugin trapped")
	tests := []struct {
		name    string
		extend  string
		current time.Time
		decider TTLDecider
		want    time.Time // zero: no change
	}{
		{"built-in: now + extend", "1800", cur, nil, at.Add(30 * time.Minute)},
		{"built-in: capped by MaxTimeout", "86400", cur, nil, at.Add(time.Hour)},
		{"built-in: never shortens", "300", cur, nil, time.Time{}},
		{"no extension", "", cur, nil, time.Time{}},
		{"bad extension", "soon", cur, nil, time.Time{}},
		{"decider moves it", "1800", cur, func(context.Context, *store.Sandbox, TTLActivity, time.Time, time.Time) (time.Time, bool, error) {
			return at.Add(20 * time.Minute), true, nil
		}, at.Add(20 * time.Minute)},
		{"decider capped by MaxTimeout", "1800", cur, func(context.Context, *store.Sandbox, TTLActivity, time.Time, time.Time) (time.Time, bool, error) {
			return at.Add(48 * time.Hour), true, nil
		}, at.Add(time.Hour)},
		{"decider refuses", "1800", cur, func(context.Context, *store.Sandbox, TTLActivity, time.Time, time.Time) (time.Time, bool, error) {
			return time.Time{}, false, nil
		}, time.Time{}},
		{"decider fails: built-in", "1800", cur, func(context.Context, *store.Sandbox, TTLActivity, time.Time, time.Time) (time.Time, bool, error) {
			return time.Time{}, false, errPlugin
		}, at.Add(30 * time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.m.SetTTLDecider(tt.decider)
			if s.m.TTLDecider() == nil != (tt.decider == nil) {
				t.Fatal("TTLDecider is not the decider set")
			}
			current := tt.current
			sb := &store.Sandbox{ID: "sb1", ExpiresAt: &current, Extensions: map[string]string{ExtensionRenewExtend: tt.extend}}
			got, changed := s.m.decideTTL(context.Background(), sb, TTLActivity{Port: 8000, At: at})
			if tt.want.IsZero() {
				if changed {
					t.Fatalf("changed to %v, want no change", got)
				}
				return
			}
			if !changed || !got.Equal(tt.want) {
				t.Fatalf("decideTTL = %v, %v; want %v", got, changed, tt.want)
			}
		})
	}
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
