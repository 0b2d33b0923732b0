package gateway

// Enforcer recovery. A sandbox's egress enforcer can die on its own (killed, OOM, an
// operator's `docker kill`); its drop rules stay (they belong to the workload's network
// namespace), so the sandbox is cut off rather than open, but its policy API and DNS
// proxy are gone for good. On every reconcile pass the gateway asks the runtime which
// Running sandboxes lack a running enforcer and restores each with the policy it last
// installed (kept in the record as EgressPolicy, see recordEgressPolicy, or read back
// from the enforcer when the sandbox was adopted, see policyInForce) and the
// platform's deny list as Rego decides it now. A restore that fails three passes in a
// row marks the sandbox Failed with reason ENFORCER_LOST, so that nobody keeps using a sandbox whose policy
// can no longer be changed.

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// ReasonEnforcerLost is the Failed reason of a sandbox whose enforcer could not be restored.
const ReasonEnforcerLost = "ENFORCER_LOST"

// enforcerRestoreAttempts is how many restores in a row may fail before the sandbox is
// marked Failed (a loaded engine may refuse one).
const enforcerRestoreAttempts = 3

// enforcerRestores holds the restores under way, so that a slow one is not started
// twice, and counts failed attempts per sandbox.
type enforcerRestores struct {
	inFlight
	failures map[string]int // guarded by inFlight.mu
}

// failed counts a failed attempt for id and reports whether it was the last allowed.
func (e *enforcerRestores) failed(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failures == nil {
		e.failures = map[string]int{}
	}
	e.failures[id]++
	if e.failures[id] >= enforcerRestoreAttempts {
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

// egressPolicyOf is what a record keeps of the policy a new sandbox starts with.
func egressPolicyOf(spec *runtimes.EgressSpec) json.RawMessage {
	if spec == nil || len(spec.Policy) == 0 {
		return nil
	}
	return json.RawMessage(spec.Policy)
}

// recordEgressPolicy keeps the effective policy an enforcer accepted in the sandbox's
// record, so that a restored enforcer gets it back.
func (s *Service) recordEgressPolicy(ctx context.Context, id string, effective any) {
	js, err := json.Marshal(effective)
	if err != nil {
		return
	}
	_, err = s.store.ModifySandbox(context.WithoutCancel(ctx), id, func(sb *store.Sandbox) error {
		sb.EgressPolicy = js
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("keep the sandbox's egress policy in its record (a restored enforcer would miss the change)", "sandbox", id, "err", err)
	}
}

// checkEnforcers starts a restore for every Running sandbox whose enforcer is missing.
// It is part of a reconcile pass (records as read by it); restores run in the
// background and report through events.
func (s *Service) checkEnforcers(ctx context.Context, instances []runtimes.Instance, records []*store.Sandbox, now time.Time) {
	rr, ok := s.runtime.(runtimes.EnforcerRestorer)
	if !ok || !s.enforcesEgress() {
		return
	}
	missing, err := rr.MissingEnforcers(ctx, instances)
	if err != nil {
		s.backgroundError("reconciler", "check egress enforcers", err)
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
		if rec == nil || rec.State != StateRunning || s.expiring(rec, now) || !s.enforcerRestores.begin(id) {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.enforcerRestores.end(id)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s.restoreEnforcer(ctx, rr, id)
		}()
	}
}

// restoreEnforcer restores one sandbox's enforcer, or marks the sandbox Failed.
func (s *Service) restoreEnforcer(ctx context.Context, rr runtimes.EnforcerRestorer, id string) {
	// Read again: the sandbox may have been deleted or changed since the pass listed it.
	rec, err := s.store.GetSandbox(ctx, id)
	if err != nil || rec.State != StateRunning || s.expiring(rec, time.Now()) {
		return
	}
	if _, err := s.runtime.Inspect(ctx, id); err != nil {
		return // gone meanwhile (a delete in progress): nothing to restore
	}
	s.log.Warn("the sandbox's egress enforcer is not running; restoring it", "sandbox", id)
	policyJSON := []byte(rec.EgressPolicy)
	fromRecord := len(policyJSON) > 0
	if !fromRecord {
		// A record made before policies were kept: fail closed, deny all but what the
		// platform allows; the owner can set the policy again through the egress API.
		policyJSON = []byte(`{"defaultAction":"deny"}`)
	}
	deny, err := s.platformDeny(ctx, rec.Tenant, rec.ID)
	if err == nil {
		err = rr.RestoreEnforcer(ctx, id, rec.EgressToken, runtimes.EgressSpec{Policy: policyJSON, PlatformDeny: deny})
	}
	if err != nil {
		if cur, gerr := s.store.GetSandbox(ctx, id); gerr != nil || cur.State != StateRunning {
			return // deleted or changed while we tried: not a failure of this sandbox
		}
		if !s.enforcerRestores.failed(id) {
			s.log.Warn("restore egress enforcer failed; the next pass tries again", "sandbox", id, "err", err)
			return
		}
		message := "the sandbox's egress enforcer died and could not be restored: " + err.Error()
		s.log.Error("restore egress enforcer", "sandbox", id, "err", err)
		s.routes.drop(id)
		sb, merr := s.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
			if sb.State != StateRunning {
				return errNoChange
			}
			sb.State, sb.Reason, sb.Message, sb.LastTransitionAt = StateFailed, ReasonEnforcerLost, message, time.Now().UTC()
			return nil
		})
		if merr == nil {
			s.emit(ctx, sb, "sandbox.failed", map[string]any{"reason": ReasonEnforcerLost, "message": message})
		}
		return
	}
	s.enforcerRestores.succeeded(id)
	s.log.Info("egress enforcer restored", "sandbox", id, "policyFromRecord", fromRecord)
	s.emit(ctx, rec, "sandbox.enforcer.restored", map[string]any{"policyFromRecord": fromRecord})
}

// errNoChange leaves a record as it is from inside ModifySandbox.
var errNoChange = errors.New("no change")
