package gateway

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
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
// the gateway's clock (clock.go).
const activityThrottle = time.Second

// RecordAccess notes a proxied request: it queues the access event (written in batches,
// off the request path) and, at most once per activityThrottle, records activity, which
// may extend the sandbox's life.
func (s *Service) RecordAccess(sb *store.Sandbox, rec AccessRecord) {
	s.noteProxied(rec)
	// Typed, not a map: one allocation for what was a dozen (store.Event.Access).
	ev := store.Event{Type: plugins.EventPreviewAccessed, Tenant: sb.Tenant, SandboxID: sb.ID, Time: time.Now().UTC(), Access: &store.AccessData{
		Port: rec.Port, Method: rec.Method, Path: rec.Path, Status: rec.Status, Bytes: rec.Bytes,
		DurationMs: float64(rec.Duration.Microseconds()) / 1000, Credential: rec.Credential,
	}}
	s.queueEvent(ev)
	now := s.now()
	// Without renew-on-access the activity is only noted: the access log writer sends
	// what is due in one command per flush. A batch's hundred first commands made a
	// goroutine and a Redis round trip each, beside their commands, on the hot path's CPU.
	renews := sb.Extensions[ExtensionRenewExtend] != "" && sb.ExpiresAt != nil
	s.preview.activityMu.Lock()
	last := s.preview.lastActivity[sb.ID]
	due := now.Sub(last) >= activityThrottle
	if due {
		if len(s.preview.lastActivity) > 100000 {
			s.preview.lastActivity = map[string]time.Time{}
		}
		s.preview.lastActivity[sb.ID] = now
		if !renews && len(s.preview.touches) < 100000 { // bounded as lastActivity is
			s.preview.touches[sb.ID] = now
		}
	}
	s.preview.activityMu.Unlock()
	if due && renews {
		s.spawn(func() { s.onActivity(sb, rec, now) })
	}
}

// takeTouches hands over the activity due to be written.
func (s *Service) takeTouches() map[string]time.Time {
	s.preview.activityMu.Lock()
	defer s.preview.activityMu.Unlock()
	if len(s.preview.touches) == 0 {
		return nil
	}
	t := s.preview.touches
	s.preview.touches = map[string]time.Time{}
	return t
}

// writeTouches writes the activity due, best effort (as onActivity's): activity only
// informs the console and plugins, and the next access notes it again.
func (s *Service) writeTouches() {
	t := s.takeTouches()
	if t == nil || s.store.Unreachable() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.store.TouchActivities(ctx, t)
}

// accessBacklogMax bounds the events kept in memory while Redis cannot take them (about
// 300 bytes each); beyond it the oldest are dropped and counted.
const accessBacklogMax = 50000

// runAccessLog writes queued access and agent-call events to Redis in pipelined batches.
// While Redis is unreachable they are kept (up to accessBacklogMax, oldest dropped first)
// and written once it answers again, in their order; live subscribers (plugins, event
// streams of this gateway) get each event once, when it is first taken from the queue.
// A batch that failed half-way is written again whole, so an event may be stored twice
// after an outage, never lost while the backlog has room.
func (s *Service) runAccessLog() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		var backlog []store.Event
		fresh := make([]store.Event, 0, 256)
		lost := int64(0)
		flush := func() {
			s.writeTouches()
			if len(fresh) > 0 {
				s.publishEvents(fresh)
				backlog = append(backlog, fresh...)
				fresh = fresh[:0]
			}
			if over := len(backlog) - accessBacklogMax; over > 0 {
				backlog = append(backlog[:0:0], backlog[over:]...)
				s.preview.dropped.Add(int64(over))
				lost += int64(over)
			}
			for len(backlog) > 0 {
				n := min(len(backlog), 512)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := s.store.AppendEvents(ctx, backlog[:n])
				cancel()
				if err != nil {
					if !errors.Is(err, store.ErrUnavailable) {
						s.log.Warn("access events lost", "count", n, "err", err)
						backlog = backlog[n:]
						continue
					}
					if !errors.Is(err, store.ErrFailFast) {
						s.log.Debug("redis unreachable: access events kept for later", "pending", len(backlog))
					}
					return
				}
				backlog = backlog[n:]
			}
			backlog = nil // release a backlog grown during an outage
			if lost > 0 {
				s.log.Warn("access events dropped while redis was unreachable (backlog full)", "count", lost)
				lost = 0
			}
		}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.preview.events.wake:
				fresh = s.preview.events.take(fresh)
				flush()
			case <-t.C:
				fresh = s.preview.events.take(fresh)
				flush()
			case <-s.stop:
				fresh = s.preview.events.take(fresh)
				flush()
				if len(backlog) > 0 {
					s.log.Warn("access events lost at shutdown: redis unreachable", "count", len(backlog))
				}
				return
			}
		}
	}()
}

// onActivity records the activity of an access at the gateway's time at and decides
// renew-on-access on that same time, however late this runs; each decision is counted
// by outcome (metrics.RenewOnAccess).
func (s *Service) onActivity(sb *store.Sandbox, rec AccessRecord, at time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Best effort: last activity only informs the TTL plugin and the console; the
	// access event itself is queued and kept through an outage (runAccessLog).
	_ = s.store.TouchActivity(ctx, sb.ID, at)
	if sb.Extensions[ExtensionRenewExtend] == "" || sb.ExpiresAt == nil {
		return
	}
	// One renewal per cooldown across every gateway.
	ok, err := s.store.TryCooldown(ctx, "renew:"+sb.ID, at, s.cfg.RenewCooldown)
	if err != nil {
		s.metrics.RenewOnAccess(metrics.RenewFailed)
		return
	}
	if !ok {
		s.metrics.RenewOnAccess(metrics.RenewCooldown)
		return
	}
	cur, err := s.store.GetSandbox(ctx, sb.ID)
	if err != nil || cur.ExpiresAt == nil {
		s.metrics.RenewOnAccess(metrics.RenewFailed)
		return
	}
	exp, changed := s.decideTTL(ctx, cur, TTLActivity{Port: rec.Port, Method: rec.Method, Path: rec.Path, At: at})
	if !changed {
		s.metrics.RenewOnAccess(metrics.RenewUnchanged)
		return
	}
	_, err = s.store.ModifySandbox(ctx, sb.ID, func(x *store.Sandbox) error {
		if x.ExpiresAt == nil || !exp.After(*x.ExpiresAt) {
			return errNoChange
		}
		x.ExpiresAt = &exp
		return nil
	})
	switch {
	case err == nil:
		s.log.Debug("renewed on access", "sandbox", sb.ID, "expiresAt", exp)
		s.emit(ctx, sb, "sandbox.renewed", map[string]any{"expiresAt": exp, "reason": "activity"})
		s.metrics.RenewOnAccess(metrics.RenewRenewed)
	case errors.Is(err, errNoChange):
		s.metrics.RenewOnAccess(metrics.RenewUnchanged)
	default:
		s.metrics.RenewOnAccess(metrics.RenewFailed)
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
func (s *Service) SetTTLDecider(d TTLDecider) { s.ttlDecider = d }

// decideTTL is the one place where renew-on-access is decided: the built-in rule moves
// the expiry to max(now + extend, current), capped by MaxTimeout; a TTLDecider may say
// otherwise.
func (s *Service) decideTTL(ctx context.Context, sb *store.Sandbox, act TTLActivity) (time.Time, bool) {
	extend, err := strconv.Atoi(sb.Extensions[ExtensionRenewExtend])
	if err != nil || extend <= 0 || sb.ExpiresAt == nil {
		return time.Time{}, false
	}
	if act.At.IsZero() {
		act.At = s.now()
	}
	now := act.At.UTC()
	maxExp := now.Add(s.cfg.MaxTimeout)
	builtin := now.Add(time.Duration(extend) * time.Second)
	if builtin.Before(*sb.ExpiresAt) {
		builtin = *sb.ExpiresAt
	}
	if builtin.After(maxExp) {
		builtin = maxExp
	}
	if s.ttlDecider != nil {
		exp, ok, err := s.ttlDecider(ctx, sb, act, builtin, maxExp)
		if err == nil {
			if !ok {
				return time.Time{}, false
			}
			if exp.After(maxExp) {
				exp = maxExp
			}
			return exp, exp.After(*sb.ExpiresAt)
		}
		s.log.Warn("TTL plugin failed; using the built-in rule", "sandbox", sb.ID, "err", err)
	}
	return builtin, builtin.After(*sb.ExpiresAt)
}
