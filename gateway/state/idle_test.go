package state

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// idleSandbox is a Running sandbox with an idle period of one second.
func (s started) idleSandbox(t *testing.T) *store.Sandbox {
	t.Helper()
	return s.runningSandbox(t, "alice", map[string]string{ExtensionIdlePause: "1"})
}

// record is the sandbox's record as the store keeps it.
func (s started) record(t *testing.T, id string) *store.Sandbox {
	t.Helper()
	sb, err := s.d.Store.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// runtimeState is the sandbox's state on the in-process runtime.
func (s started) runtimeState(t *testing.T, id string) runtimes.State {
	t.Helper()
	inst, err := s.d.Runtime.Inspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return inst.State
}

// TestValidateIdlePause: an idle period is whole seconds within the gateway's timeouts.
func TestValidateIdlePause(t *testing.T) {
	m := New(testConfig, nil, nil, nil, nil)
	for _, tt := range []struct {
		v  string
		ok bool
	}{{"1", true}, {"3600", true}, {"0", false}, {"3601", false}, {"1.5", false}, {"soon", false}} {
		err := m.ValidateIdlePause(tt.v)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateIdlePause(%q) = %v, want ok %v", tt.v, err, tt.ok)
		}
		if err != nil {
			wantCode(t, err, fault.KindInvalid, fault.CodeInvalidParameter)
		}
	}
	for _, v := range []string{"", "x", "-3"} {
		if d := idlePauseOf(&store.Sandbox{Extensions: map[string]string{ExtensionIdlePause: v}}); d != 0 {
			t.Errorf("idlePauseOf(%q) = %v, want none", v, d)
		}
	}
}

// TestIdlePauseAndWake: the lease holder pauses a sandbox whose idle time has come, and
// the next request resumes it before it is served; a request in flight keeps its
// sandbox awake; sandboxes without an idle period are left alone.
func TestIdlePauseAndWake(t *testing.T) {
	s := startManager(t, false)
	ctx := context.Background()
	sb := s.idleSandbox(t)
	plain := s.runningSandbox(t, "alice", nil)
	s.m.ScheduleIdle(ctx, sb)
	s.m.ScheduleIdle(ctx, plain)
	if at, err := s.d.Store.IdleAt(ctx, sb.ID); err != nil || at.IsZero() {
		t.Fatalf("IdleAt = %v, %v; want the sandbox on the schedule", at, err)
	}

	// Not yet due: nothing is paused.
	s.m.idleOnce(ctx)
	if got := s.record(t, sb.ID); got.State != stateRunning {
		t.Fatalf("a sandbox not yet idle is %s", got.State)
	}

	if err := s.d.Store.ScheduleIdle(ctx, sb.ID, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	s.host.set(func(h *testHost) { h.noLease = true })
	s.m.idleOnce(ctx)
	if got := s.record(t, sb.ID); got.State != stateRunning {
		t.Fatalf("a gateway without the lease paused a sandbox: %s", got.State)
	}
	s.host.set(func(h *testHost) { h.noLease = false })
	s.m.idleOnce(ctx)
	got := s.record(t, sb.ID)
	if got.State != statePaused || got.Reason != ReasonIdle || s.runtimeState(t, sb.ID) != runtimes.StatePaused {
		t.Fatalf("record %s (%s), runtime %s; want it paused for idleness", got.State, got.Reason, s.runtimeState(t, sb.ID))
	}
	if evs := s.host.events("sandbox.paused"); len(evs) != 1 || evs[0].Data["reason"] != ReasonIdle {
		t.Errorf("paused events %+v, want one with reason idle", evs)
	}

	// A plain sandbox costs nothing and is never woken.
	same, release, err := s.m.WakeForAccess(ctx, plain)
	if err != nil || same != plain {
		t.Fatalf("WakeForAccess(plain) = %v, %v", same, err)
	}
	release()

	woke, release, err := s.m.WakeForAccess(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	if woke.State != stateRunning || s.runtimeState(t, sb.ID) != runtimes.StateRunning {
		t.Fatalf("after a request the sandbox is %s, runtime %s; want Running", woke.State, s.runtimeState(t, sb.ID))
	}
	if evs := s.host.events("sandbox.resumed"); len(evs) != 1 {
		t.Errorf("resumed events %+v, want one", evs)
	}

	// While the request is in flight its sandbox stays on the schedule, moved forward.
	before, _ := s.d.Store.IdleAt(ctx, sb.ID)
	time.Sleep(1100 * time.Millisecond)
	s.m.idleOnce(ctx)
	if after, _ := s.d.Store.IdleAt(ctx, sb.ID); !after.After(before) {
		t.Errorf("a request in flight did not move the schedule: %v, then %v", before, after)
	}
	release()
	release() // a second release is harmless
	s.m.idle.mu.Lock()
	inflight := len(s.m.idle.inflight)
	s.m.idle.mu.Unlock()
	if inflight != 0 {
		t.Errorf("%d sandboxes counted in flight after their requests ended", inflight)
	}

	// A sandbox paused by hand, or gone, leaves the schedule.
	if _, err := s.d.Store.ModifySandbox(ctx, sb.ID, func(sb *store.Sandbox) error { sb.State = statePaused; sb.Reason = ""; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.d.Store.ScheduleIdle(ctx, sb.ID, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	s.m.idleOnce(ctx)
	if at, _ := s.d.Store.IdleAt(ctx, sb.ID); !at.IsZero() {
		t.Errorf("a sandbox paused by hand stays on the idle schedule (%v)", at)
	}
}

// TestIdlePauserLoop: the Manager's own loop pauses a sandbox once its idle period has
// passed, and Stop ends it.
func TestIdlePauserLoop(t *testing.T) {
	s := startManager(t, false)
	sb := s.idleSandbox(t)
	s.m.ScheduleIdle(context.Background(), sb)
	s.m.Start()
	waitFor(t, "the idle pause", func() bool { return s.record(t, sb.ID).State == statePaused })
	s.m.Stop()
}

// TestWakeFailure: a sandbox that cannot be resumed answers 503 with its code, and
// concurrent requests share one resume.
func TestWakeFailure(t *testing.T) {
	s := startManager(t, false)
	ctx := context.Background()
	sb := s.idleSandbox(t)
	// The record says paused for idleness, the runtime has it running already: the
	// resume's refusal is another gateway's resume, and the record follows.
	rec, err := s.d.Store.ModifySandbox(ctx, sb.ID, func(sb *store.Sandbox) error {
		sb.State, sb.Reason = statePaused, ReasonIdle
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	for range 2 {
		go func() {
			woke, release, err := s.m.WakeForAccess(ctx, rec)
			if err == nil {
				release()
				if woke.State != stateRunning {
					err = fault.Errorf(fault.KindInternal, "", "woke %s", woke.State)
				}
			}
			done <- err
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	// Gone from the runtime: no resume, 503.
	rec, err = s.d.Store.ModifySandbox(ctx, sb.ID, func(sb *store.Sandbox) error {
		sb.State, sb.Reason = statePaused, ReasonIdle
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.d.Runtime.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.m.WakeForAccess(ctx, rec)
	wantCode(t, err, fault.KindUnavailable, codeNotRunning)
}
