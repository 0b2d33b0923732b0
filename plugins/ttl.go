package plugins

import (
	"context"
	"encoding/json"
	"time"
)

// TTL decision reasons.
const (
	// ReasonActivity: the sandbox saw traffic (preview, agent API).
	ReasonActivity = "activity"
	// ReasonRenew: a client asked for a new expiry (renew-expiration).
	ReasonRenew = "renew"
)

// TTLInput is what the gateway knows when a sandbox's expiry may move. The
// host adds the tenant and the plugin's settings.
type TTLInput struct {
	SandboxID string
	// Reason is ReasonActivity or ReasonRenew.
	Reason string
	// Now is the decision time; zero means the host's clock. Tests inject it.
	Now time.Time
	// CurrentExpiresAt is the sandbox's expiry now.
	CurrentExpiresAt time.Time
	// RequestedExpiresAt is what a renew asked for; zero when absent.
	RequestedExpiresAt time.Time
	// MaxExpiresAt is the latest expiry the tenant may have; zero for no cap.
	MaxExpiresAt time.Time
	// Activity describes the request behind a ReasonActivity decision.
	Activity *Activity
}

// Activity is the request that triggered a ReasonActivity decision.
type Activity struct {
	Port   int    `json:"port"`
	Method string `json:"method"`
	Path   string `json:"path"`
}

// ttlWire is decide_ttl's input as ABI.md specifies it.
type ttlWire struct {
	Tenant             string          `json:"tenant"`
	SandboxID          string          `json:"sandboxId"`
	Reason             string          `json:"reason"`
	Now                time.Time       `json:"now"`
	CurrentExpiresAt   time.Time       `json:"currentExpiresAt"`
	RequestedExpiresAt *time.Time      `json:"requestedExpiresAt,omitempty"`
	MaxExpiresAt       *time.Time      `json:"maxExpiresAt,omitempty"`
	Activity           *Activity       `json:"activity,omitempty"`
	Settings           json.RawMessage `json:"settings"`
}

// ttlResult is decide_ttl's output.
type ttlResult struct {
	ExpiresAt *string `json:"expiresAt"`
	NoChange  bool    `json:"noChange"`
}

// DecideTTL asks the tenant's decide_ttl plugin for a sandbox's new expiry,
// synchronously, within the plugin's deadline (and ctx's). The result is
// clamped to in.MaxExpiresAt and never earlier than in.Now; changed is
// false when the plugin said "no change" or named the current expiry. Any
// error (no such plugin: ErrNotFound; timeout, trap, bad output) means the
// caller should apply its built-in rule.
func (h *Host) DecideTTL(ctx context.Context, tenant string, in TTLInput) (newExpiry time.Time, changed bool, err error) {
	s := h.routes.Load().ttl[tenant]
	if s == nil {
		return time.Time{}, false, newError(CodeNotFound, nil, "tenant has no %s plugin", HookDecideTTL)
	}
	v := s.acquire()
	if v == nil {
		return time.Time{}, false, newError(CodeNotFound, nil, "tenant has no %s plugin", HookDecideTTL)
	}
	defer v.release()
	if !v.cfg.decideTTL {
		return time.Time{}, false, newError(CodeNotFound, nil, "tenant has no %s plugin", HookDecideTTL)
	}

	now := in.Now
	if now.IsZero() {
		now = h.now()
	}
	wire := ttlWire{
		Tenant: tenant, SandboxID: in.SandboxID, Reason: in.Reason,
		Now: now.UTC(), CurrentExpiresAt: in.CurrentExpiresAt.UTC(),
		Activity: in.Activity, Settings: v.cfg.settings,
	}
	if !in.RequestedExpiresAt.IsZero() {
		t := in.RequestedExpiresAt.UTC()
		wire.RequestedExpiresAt = &t
	}
	if !in.MaxExpiresAt.IsZero() {
		t := in.MaxExpiresAt.UTC()
		wire.MaxExpiresAt = &t
	}
	input, err := json.Marshal(wire)
	if err != nil {
		return time.Time{}, false, newError(CodeInvalidConfig, err, "encode %s input", HookDecideTTL)
	}
	out, err := v.invoke(ctx, HookDecideTTL, input, true)
	if err != nil {
		return time.Time{}, false, err
	}
	expiry, noChange, err := parseTTLResult(out)
	if err != nil {
		s.counters.fail(err)
		return time.Time{}, false, err
	}
	if noChange {
		return in.CurrentExpiresAt, false, nil
	}
	if !in.MaxExpiresAt.IsZero() && expiry.After(in.MaxExpiresAt) {
		expiry = in.MaxExpiresAt
	}
	if expiry.Before(now) {
		expiry = now
	}
	return expiry, !expiry.Equal(in.CurrentExpiresAt), nil
}

func parseTTLResult(out []byte) (expiry time.Time, noChange bool, err error) {
	var res ttlResult
	if err := json.Unmarshal(out, &res); err != nil {
		return time.Time{}, false, newError(CodeBadOutput, err, "%s result is not JSON: %.80q", HookDecideTTL, out)
	}
	switch {
	case res.NoChange && res.ExpiresAt != nil:
		return time.Time{}, false, newError(CodeBadOutput, nil, "%s result has both expiresAt and noChange", HookDecideTTL)
	case res.NoChange:
		return time.Time{}, true, nil
	case res.ExpiresAt == nil:
		return time.Time{}, false, newError(CodeBadOutput, nil, `%s result has neither "expiresAt" nor "noChange": true`, HookDecideTTL)
	}
	t, err := time.Parse(time.RFC3339Nano, *res.ExpiresAt)
	if err != nil {
		return time.Time{}, false, newError(CodeBadOutput, err, "%s expiresAt %q is not RFC 3339", HookDecideTTL, *res.ExpiresAt)
	}
	return t, false, nil
}
