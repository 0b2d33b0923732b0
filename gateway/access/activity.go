package access

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
	"github.com/sandgate/sandgate/runtimes"
)

// AccessRecord is what the proxy reports about one request it forwarded.
type AccessRecord struct {
	Port       int
	Method     string
	Path       string
	Status     int
	Bytes      int64
	Duration   time.Duration
	Credential string
}

// activityThrottle is the least time between two activity updates of one sandbox, on
// the gateway's clock (Host.Now).
const activityThrottle = time.Second

// maxActivity bounds the sandboxes whose last activity is kept in memory.
const maxActivity = 100000

// activityState is the activity of proxied requests this gateway has seen.
type activityState struct {
	mu   sync.Mutex
	last map[string]time.Time
	// touches holds activity due to be written (sandboxes without renew-on-access),
	// which the core's event writer sends in one command per flush (FlushActivity).
	touches map[string]time.Time
}

// RecordAccess notes a proxied request: it queues the access event (written in batches,
// off the request path, by the core's event writer) and, at most once per
// activityThrottle, records activity, which may extend the sandbox's life.
func (m *Manager) RecordAccess(sb *store.Sandbox, rec AccessRecord) {
	m.metrics.Proxied(rec.Port == runtimes.AgentPort, rec.Status, rec.Bytes)
	// Typed, not a map: one allocation for what was a dozen (store.Event.Access).
	ev := store.Event{Type: plugins.EventPreviewAccessed, Tenant: sb.Tenant, SandboxID: sb.ID, Time: time.Now().UTC(), Access: &store.AccessData{
		Port: rec.Port, Method: rec.Method, Path: rec.Path, Status: rec.Status, Bytes: rec.Bytes,
		DurationMs: float64(rec.Duration.Microseconds()) / 1000, Credential: rec.Credential,
	}}
	m.host.QueueEvent(ev)
	now := m.host.Now()
	// Without renew-on-access the activity is only noted: the event writer sends what is
	// due in one command per flush, not a goroutine and a Redis round trip per sandbox
	// on the hot path's CPU.
	renews := sb.Extensions[ExtensionRenewExtend] != "" && sb.ExpiresAt != nil
	m.activity.mu.Lock()
	last := m.activity.last[sb.ID]
	due := now.Sub(last) >= activityThrottle
	if due {
		if len(m.activity.last) > maxActivity {
			m.activity.last = map[string]time.Time{}
		}
		m.activity.last[sb.ID] = now
		if !renews && len(m.activity.touches) < maxActivity { // bounded as last is
			m.activity.touches[sb.ID] = now
		}
	}
	m.activity.mu.Unlock()
	if due && renews {
		m.group.Go(func() { m.onActivity(sb, rec, now) })
	}
}

// takeTouches hands over the activity due to be written.
func (m *Manager) takeTouches() map[string]time.Time {
	m.activity.mu.Lock()
	defer m.activity.mu.Unlock()
	if len(m.activity.touches) == 0 {
		return nil
	}
	t := m.activity.touches
	m.activity.touches = map[string]time.Time{}
	return t
}

// FlushActivity writes the activity due, best effort (as onActivity's): activity only
// informs the console and plugins, and the next access notes it again. The core's event
// writer calls it at each of its flushes.
func (m *Manager) FlushActivity() {
	t := m.takeTouches()
	if t == nil || m.store.Unreachable() {
		return
	}
	ctx, cancel := withTimeout()
	defer cancel()
	_ = m.store.TouchActivities(ctx, t)
}

// onActivity records the activity of an access at the gateway's time at and decides
// renew-on-access on that same time, however late this runs; each decision is counted
// by outcome (metrics.RenewOnAccess).
func (m *Manager) onActivity(sb *store.Sandbox, rec AccessRecord, at time.Time) {
	ctx, cancel := withTimeout()
	defer cancel()
	// Best effort: last activity only informs the TTL plugin and the console; the
	// access event itself is queued and kept through an outage (the event writer).
	_ = m.store.TouchActivity(ctx, sb.ID, at)
	if sb.Extensions[ExtensionRenewExtend] == "" || sb.ExpiresAt == nil {
		return
	}
	// One renewal per cooldown across every gateway.
	ok, err := m.store.TryCooldown(ctx, "renew:"+sb.ID, at, m.cfg.RenewCooldown)
	if err != nil {
		m.metrics.RenewOnAccess(metrics.RenewFailed)
		return
	}
	if !ok {
		m.metrics.RenewOnAccess(metrics.RenewCooldown)
		return
	}
	cur, err := m.store.GetSandbox(ctx, sb.ID)
	if err != nil || cur.ExpiresAt == nil {
		m.metrics.RenewOnAccess(metrics.RenewFailed)
		return
	}
	exp, changed := m.decideTTL(ctx, cur, TTLActivity{Port: rec.Port, Method: rec.Method, Path: rec.Path, At: at})
	if !changed {
		m.metrics.RenewOnAccess(metrics.RenewUnchanged)
		return
	}
	_, err = m.store.ModifySandbox(ctx, sb.ID, func(x *store.Sandbox) error {
		if x.ExpiresAt == nil || !exp.After(*x.ExpiresAt) {
			return errNoChange
		}
		x.ExpiresAt = &exp
		return nil
	})
	switch {
	case err == nil:
		m.log.Debug("renewed on access", "sandbox", sb.ID, "expiresAt", exp)
		m.host.Emit(ctx, sb, "sandbox.renewed", map[string]any{"expiresAt": exp, "reason": "activity"})
		m.metrics.RenewOnAccess(metrics.RenewRenewed)
	case errors.Is(err, errNoChange):
		m.metrics.RenewOnAccess(metrics.RenewUnchanged)
	default:
		m.metrics.RenewOnAccess(metrics.RenewFailed)
	}
}

var errNoChange = errors.New("no change")

// TTLActivity is what triggered a TTL decision: an access to a port, or (Renew) an
// explicit renew-expiration asking for Requested. At is the decision's time on the
// gateway's clock; zero is now.
type TTLActivity struct {
	Port      int
	Method    string
	Path      string
	Renew     bool
	Requested time.Time
	At        time.Time
}

// TTLDecider decides a sandbox's new expiry on activity; ok false means no change. A
// plugin host can take the decision over; any failure falls back to the built-in rule.
type TTLDecider func(ctx context.Context, sb *store.Sandbox, activity TTLActivity, builtin time.Time, max time.Time) (time.Time, bool, error)

// SetTTLDecider installs the function that overrides the built-in renew-on-access rule.
// Call it before the Manager serves requests.
func (m *Manager) SetTTLDecider(d TTLDecider) { m.ttlDecider = d }

// TTLDecider is the function SetTTLDecider installed, nil when none: the core asks it
// about explicit renewals too.
func (m *Manager) TTLDecider() TTLDecider { return m.ttlDecider }

// decideTTL is the one place where renew-on-access is decided: the built-in rule moves
// the expiry to max(now + extend, current), capped by MaxTimeout; a TTLDecider may say
// otherwise.
func (m *Manager) decideTTL(ctx context.Context, sb *store.Sandbox, act TTLActivity) (time.Time, bool) {
	extend, err := strconv.Atoi(sb.Extensions[ExtensionRenewExtend])
	if err != nil || extend <= 0 || sb.ExpiresAt == nil {
		return time.Time{}, false
	}
	if act.At.IsZero() {
		act.At = m.host.Now()
	}
	now := act.At.UTC()
	maxExp := now.Add(m.cfg.MaxTimeout)
	builtin := now.Add(time.Duration(extend) * time.Second)
	if builtin.Before(*sb.ExpiresAt) {
		builtin = *sb.ExpiresAt
	}
	if builtin.After(maxExp) {
		builtin = maxExp
	}
	if m.ttlDecider != nil {
		exp, ok, err := m.ttlDecider(ctx, sb, act, builtin, maxExp)
		if err == nil {
			if !ok {
				return time.Time{}, false
			}
			if exp.After(maxExp) {
				exp = maxExp
			}
			return exp, exp.After(*sb.ExpiresAt)
		}
		m.log.Warn("TTL plugin failed; using the built-in rule", "sandbox", sb.ID, "err", err)
	}
	return builtin, builtin.After(*sb.ExpiresAt)
}
