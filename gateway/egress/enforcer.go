package egress

// Enforcer recovery. A sandbox's egress enforcer can die on its own (killed, OOM, an
// operator's `docker kill`); its drop rules stay (they belong to the workload's network
// namespace), so the sandbox is cut off rather than open, but its policy API and DNS
// proxy are gone for good. On every reconcile pass the core hands CheckEnforcers what it
// read, and the runtime says which Running sandboxes lack a running enforcer (from the
// pass's list, older than its records: the restore looks again first); each is
// restored with the policy it last installed (kept in the record, see recordPolicy, or
// read back from the enforcer when the sandbox was adopted, see PolicyInForce) and the
// platform's deny list as Rego decides it now. A restore that fails three passes in a
// row marks the sandbox Failed with reason ENFORCER_LOST, so that nobody keeps using a
// sandbox whose policy can no longer be changed.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
)

// restoreAttempts is how many restores in a row may fail before the sandbox is marked
// Failed (a loaded engine may refuse one).
const restoreAttempts = 3

// enforcerRestores holds the restores under way, so that a slow one is not started
// twice, and counts failed attempts per sandbox.
type enforcerRestores struct {
	inFlight
	mu       sync.Mutex
	failures map[string]int
}

// failed counts a failed attempt for id and reports whether it was the last allowed.
func (e *enforcerRestores) failed(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failures == nil {
		e.failures = map[string]int{}
	}
	e.failures[id]++
	if e.failures[id] >= restoreAttempts {
		delete(e.failures, id)
		return true
	}
	return false
}

func (e *enforcerRestores) succeeded(id string) {
	e.mu.Lock()
	delete(e.failures, id)
	e.mu.Unlock()
}

// errNoChange leaves a record as it is from inside ModifySandbox.
var errNoChange = errors.New("no change")

// CheckEnforcers starts a restore for every Running sandbox whose enforcer is missing,
// from a reconcile pass's instances and records. Restores run in the background and
// report through events.
func (m *Manager) CheckEnforcers(ctx context.Context, instances []runtimes.Instance, records []*store.Sandbox, now time.Time) {
	rr, ok := m.runtime.(runtimes.EnforcerRestorer)
	if !ok || !m.Enforces() {
		return
	}
	missing, err := rr.MissingEnforcers(ctx, instances)
	if err != nil {
		m.host.BackgroundError("reconciler", "check egress enforcers", err)
		return
	}
	if len(missing) == 0 {
		return
	}
	byID := make(map[string]*store.Sandbox, len(records))
	for _, rec := range records {
		byID[rec.ID] = rec
	}
	for _, id := range missing {
		rec := byID[id]
		if rec == nil || rec.State != stateRunning || m.host.Expiring(rec, now) || !m.restores.begin(id) {
			continue
		}
		started := m.group.Go(func() {
			defer m.restores.end(id)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			m.restore(ctx, rr, id)
		})
		if !started {
			m.restores.end(id)
		}
	}
}

// restore restores one sandbox's enforcer, or marks the sandbox Failed.
func (m *Manager) restore(ctx context.Context, rr runtimes.EnforcerRestorer, id string) {
	// Read again: the sandbox may have been deleted or changed since the pass listed it.
	rec, err := m.store.GetSandbox(ctx, id)
	if err != nil || rec.State != stateRunning || m.host.Expiring(rec, time.Now()) {
		return
	}
	inst, err := m.runtime.Inspect(ctx, id)
	if err != nil {
		return // gone meanwhile (a delete in progress): nothing to restore
	}
	if inst.EnforcerRunning {
		// The pass's list was taken before its records were read: a create or a restore
		// that finished in between left a running enforcer the list did not show.
		return
	}
	m.log.Warn("the sandbox's egress enforcer is not running; restoring it", "sandbox", id)
	policyJSON := []byte(rec.EgressPolicy)
	fromRecord := len(policyJSON) > 0
	if !fromRecord {
		// A record that keeps no policy (an adopted sandbox whose enforcer did not
		// answer): fail closed, deny all but what the platform allows; the owner can set
		// the policy again through the egress API.
		policyJSON = []byte(`{"defaultAction":"deny"}`)
	}
	deny, err := m.platformDeny(ctx, rec.Tenant, rec.ID)
	if err == nil {
		err = rr.RestoreEnforcer(ctx, id, rec.EgressToken, runtimes.EgressSpec{Policy: policyJSON, PlatformDeny: deny})
	}
	if err != nil {
		m.restoreFailed(ctx, id, err)
		return
	}
	m.restores.succeeded(id)
	m.metrics.EnforcerRestore(metrics.EnforcerRestored)
	m.log.Info("egress enforcer restored", "sandbox", id, "policyFromRecord", fromRecord)
	m.host.Emit(ctx, rec, "sandbox.enforcer.restored", map[string]any{"policyFromRecord": fromRecord})
}

// restoreFailed counts a failed restore of id's enforcer; the last allowed marks the
// sandbox Failed.
func (m *Manager) restoreFailed(ctx context.Context, id string, err error) {
	if cur, gerr := m.store.GetSandbox(ctx, id); gerr != nil || cur.State != stateRunning {
		return // deleted or changed while we tried: not a failure of this sandbox
	}
	if !m.restores.failed(id) {
		m.log.Warn("restore egress enforcer failed; the next pass tries again", "sandbox", id, "err", err)
		return
	}
	message := "the sandbox's egress enforcer died and could not be restored: " + err.Error()
	m.log.Error("restore egress enforcer", "sandbox", id, "err", err)
	m.host.DropRoute(id)
	sb, merr := m.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
		if sb.State != stateRunning {
			return errNoChange
		}
		sb.State, sb.Reason, sb.Message, sb.LastTransitionAt = stateFailed, ReasonEnforcerLost, message, time.Now().UTC()
		return nil
	})
	if merr == nil {
		m.metrics.EnforcerRestore(metrics.EnforcerLost)
		m.host.Emit(ctx, sb, "sandbox.failed", map[string]any{"reason": ReasonEnforcerLost, "message": message})
	}
}

// PolicyInForce reads the policy an adopted sandbox's enforcer enforces (a signed
// answer, as every policy read), so that the record keeps it as a create or a change
// through the egress API would have: an enforcer restored later gets it back instead of
// deny-all. An enforcer that does not answer leaves the record without one (a restore
// then fails closed), and says so in the log.
func (m *Manager) PolicyInForce(ctx context.Context, rec *store.Sandbox) json.RawMessage {
	a, err := m.agents.GetPolicy(ctx, rec.Address, rec.EgressToken, callTimeout)
	if err == nil && !a.OK() {
		err = fmt.Errorf("status %d", a.Status)
	}
	var answer struct {
		Policy *policy.NetworkPolicy `json:"policy"`
	}
	if err == nil {
		if err = json.Unmarshal(a.Body, &answer); err == nil && answer.Policy == nil {
			err = errors.New("the answer names no policy")
		}
	}
	var js []byte
	if err == nil {
		js, err = json.Marshal(answer.Policy)
	}
	if err != nil {
		m.log.Warn("adopted sandbox's egress policy not read from its enforcer; a restored enforcer would deny all", "sandbox", rec.ID, "err", err)
		return nil
	}
	return js
}
