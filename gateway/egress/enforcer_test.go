package egress

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
)

// TestCheckEnforcers: a Running sandbox whose enforcer is missing gets one back with the
// policy its record keeps and the platform's denies; one the reaper is removing does
// not; three failed restores in a row mark it Failed, ENFORCER_LOST.
func TestCheckEnforcers(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, true)
	sb, _ := s.runningSandbox(t, "t1")
	if err := s.m.BindClaim(ctx, sb, json.RawMessage(`{"defaultAction": "deny", "egress": [{"action": "allow", "target": "a.test"}]}`)); err != nil {
		t.Fatal(err)
	}
	records, err := s.d.Store.ListSandboxes(ctx, "")
	if err != nil {
		t.Fatal(err)
	}

	s.runtime.mu.Lock()
	s.runtime.missing = []string{sb.ID, "not-a-record"}
	s.runtime.mu.Unlock()
	s.host.mu.Lock()
	s.host.expiring[sb.ID] = true
	s.host.mu.Unlock()
	s.m.CheckEnforcers(ctx, nil, records, time.Now())
	if s.restoring(sb.ID) || len(s.runtime.restored) != 0 {
		t.Fatal("the enforcer of an expiring sandbox was restored")
	}
	s.host.mu.Lock()
	s.host.expiring[sb.ID] = false
	s.host.mu.Unlock()

	s.m.CheckEnforcers(ctx, nil, records, time.Now())
	waitFor(t, "the restore", func() bool { return len(s.host.events("sandbox.enforcer.restored")) == 1 })
	s.runtime.mu.Lock()
	spec := s.runtime.restored[0]
	s.runtime.mu.Unlock()
	var restored policy.NetworkPolicy
	if err := json.Unmarshal(spec.Policy, &restored); err != nil || !slices.Contains(restored.Egress, policy.EgressRule{Action: policy.ActionAllow, Target: "a.test"}) {
		t.Fatalf("restored with %s, %v; want the record's policy", spec.Policy, err)
	}
	if !slices.Contains(spec.PlatformDeny, blockedTarget) {
		t.Errorf("restored with platform denies %v", spec.PlatformDeny)
	}
	if ev := s.host.events("sandbox.enforcer.restored")[0]; ev.Data["policyFromRecord"] != true {
		t.Errorf("event data %v", ev.Data)
	}
	if n := s.restoresCounted(t, metrics.EnforcerRestored); n != 1 {
		t.Errorf("sandgate_enforcer_restores_total{outcome=restored} %v after one restore, want 1", n)
	}

	s.runtime.mu.Lock()
	s.runtime.missing, s.runtime.restoreErr = []string{sb.ID}, errSentinel
	s.runtime.mu.Unlock()
	for i := 1; i <= restoreAttempts; i++ {
		s.m.CheckEnforcers(ctx, nil, records, time.Now())
		waitFor(t, "the failed restore", func() bool { return !s.restoring(sb.ID) })
		if i < restoreAttempts && len(s.host.events("sandbox.failed")) != 0 {
			t.Fatalf("marked Failed after %d failed restores", i)
		}
	}
	rec, err := s.d.Store.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != stateFailed || rec.Reason != ReasonEnforcerLost {
		t.Fatalf("after %d failed restores: %s %s, want Failed %s", restoreAttempts, rec.State, rec.Reason, ReasonEnforcerLost)
	}
	if evs := s.host.events("sandbox.failed"); len(evs) != 1 || evs[0].Data["reason"] != ReasonEnforcerLost {
		t.Errorf("sandbox.failed events %v", evs)
	}
	if !slices.Contains(s.host.dropped, sb.ID) {
		t.Error("the failed sandbox's route was not dropped")
	}
	if n := s.restoresCounted(t, metrics.EnforcerLost); n != 1 {
		t.Errorf("sandgate_enforcer_restores_total{outcome=lost} %v after the sandbox was lost, want 1", n)
	}
}

// TestCheckEnforcersListOlderThanRecords: a sandbox a pass's list showed without its
// enforcer, whose enforcer runs by the time the restore looks (a create or a restore
// finished between the list and the records), keeps that enforcer.
func TestCheckEnforcersListOlderThanRecords(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, true)
	sb, _ := s.runningSandbox(t, "t1")
	records, err := s.d.Store.ListSandboxes(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	s.runtime.mu.Lock()
	s.runtime.missing = []string{sb.ID}
	s.runtime.runningNow = map[string]bool{sb.ID: true}
	s.runtime.mu.Unlock()
	s.m.CheckEnforcers(ctx, nil, records, time.Now())
	waitFor(t, "the restore's check", func() bool { return !s.restoring(sb.ID) })
	s.runtime.mu.Lock()
	restored := len(s.runtime.restored)
	s.runtime.mu.Unlock()
	if restored != 0 || len(s.host.events("sandbox.enforcer.restored")) != 0 {
		t.Fatalf("a running enforcer was replaced (%d restores)", restored)
	}

	// Its enforcer gone by then too: restored.
	s.runtime.mu.Lock()
	s.runtime.runningNow = nil
	s.runtime.mu.Unlock()
	s.m.CheckEnforcers(ctx, nil, records, time.Now())
	waitFor(t, "the restore", func() bool { return len(s.host.events("sandbox.enforcer.restored")) == 1 })
}

// TestPolicyInForce: an adopted sandbox's record keeps the policy its enforcer reports;
// an enforcer that does not answer, or reports none, leaves it without one.
func TestPolicyInForce(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, true)
	sb, enf := s.runningSandbox(t, "t1")
	if err := s.m.BindClaim(ctx, sb, json.RawMessage(`{"defaultAction": "allow"}`)); err != nil {
		t.Fatal(err)
	}
	var got policy.NetworkPolicy
	if err := json.Unmarshal(s.m.PolicyInForce(ctx, sb), &got); err != nil || got.DefaultAction != policy.ActionAllow {
		t.Fatalf("policy in force %+v, %v", got, err)
	}
	for name, fault := range map[string]func(f *fakeEnforcer){
		"refusing":      func(f *fakeEnforcer) { f.refuse = 503 },
		"naming none":   func(f *fakeEnforcer) { f.refuse, f.report = 0, []byte(`{"status": "ok"}`) },
		"not answering": func(f *fakeEnforcer) { _ = f.srv.Close() },
	} {
		enf.set(fault)
		if js := s.m.PolicyInForce(ctx, sb); js != nil {
			t.Errorf("%s enforcer: policy in force %s, want none", name, js)
		}
	}
}

// TestEnforces: the feature asks the runtime whether it runs enforcers and the vault.
func TestEnforces(t *testing.T) {
	on, off := startManager(t, true), startManager(t, false)
	if !on.m.Enforces() || !on.m.RunsCredentialProxy() || off.m.Enforces() || off.m.RunsCredentialProxy() {
		t.Fatal("Enforces or RunsCredentialProxy does not follow the runtime")
	}
	// A runtime without enforcers has none to restore, and nothing to ask.
	off.m.CheckEnforcers(context.Background(), []runtimes.Instance{{ID: "x"}}, []*store.Sandbox{{ID: "x", State: stateRunning}}, time.Now())
	if off.restoring("x") || len(off.host.errors) != 0 {
		t.Fatalf("a runtime without enforcers: restore started %v, errors %v", off.restoring("x"), off.host.errors)
	}
}

// restoring reports whether a restore of id's enforcer is under way.
func (s started) restoring(id string) bool {
	_, busy := s.m.restores.ids.Load(id)
	return busy
}
