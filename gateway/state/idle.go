package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// ExtensionIdlePause makes a sandbox pause (Docker: freeze, memory kept) after that many
// seconds without agent or preview traffic; the next proxied request resumes it before
// it is served. Its expiry keeps counting while it is paused.
const ExtensionIdlePause = "idle.pause.seconds"

// ReasonIdle is the status reason of a sandbox paused for want of traffic.
const ReasonIdle = "idle"

const (
	// idleTouchEvery is the least time between two schedule updates of one sandbox by
	// the requests of one gateway.
	idleTouchEvery = time.Second
	// idleCheckEvery is how often the lease holder pauses what is due, and every
	// gateway keeps its long requests' sandboxes awake.
	idleCheckEvery = time.Second
)

// idleState is this gateway's part of idle pausing: the requests in flight per sandbox
// (a long stream is traffic for as long as it lasts), the last schedule update per
// sandbox, and the resumes under way.
type idleState struct {
	mu       sync.Mutex
	inflight map[string]*idleFlight
	touched  map[string]time.Time
	waking   map[string]chan struct{}
}

type idleFlight struct {
	n    int
	idle time.Duration
}

// idlePauseOf returns a sandbox's idle period, zero without one.
func idlePauseOf(sb *store.Sandbox) time.Duration {
	v := sb.Extensions[ExtensionIdlePause]
	if v == "" {
		return 0 // most sandboxes: no parse error built on every proxied request
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// ValidateIdlePause checks extensions["idle.pause.seconds"]: whole seconds from the
// gateway's minimum timeout to its maximum.
func (m *Manager) ValidateIdlePause(v string) error {
	n, err := strconv.Atoi(v)
	lo, hi := int(m.cfg.MinTimeout/time.Second), int(m.cfg.MaxTimeout/time.Second)
	if err != nil || n < lo || n > hi {
		return fault.Errorf(fault.KindInvalid, fault.CodeInvalidParameter, "extensions[%q] = %q: want whole seconds from %d to %d", ExtensionIdlePause, v, lo, hi)
	}
	return nil
}

// ScheduleIdle puts a new Running sandbox on the idle schedule.
func (m *Manager) ScheduleIdle(ctx context.Context, sb *store.Sandbox) {
	if d := idlePauseOf(sb); d > 0 {
		if err := m.store.ScheduleIdle(ctx, sb.ID, time.Now().Add(d)); err != nil {
			m.log.Warn("idle schedule", "id", sb.ID, "err", err)
		}
	}
}

// WakeForAccess is the proxy's one call before it forwards a request to sandbox sb: for
// a sandbox with an idle period it counts the request as traffic and, when the sandbox
// was paused for idleness, resumes it first and returns the updated record. The caller
// runs release once the request is done (a request in flight keeps its sandbox awake).
// Other sandboxes cost a map lookup.
func (m *Manager) WakeForAccess(ctx context.Context, sb *store.Sandbox) (*store.Sandbox, func(), error) {
	idle := idlePauseOf(sb)
	if idle == 0 {
		return sb, func() {}, nil
	}
	id := sb.ID
	m.idle.mu.Lock()
	f := m.idle.inflight[id]
	if f == nil {
		f = &idleFlight{idle: idle}
		m.idle.inflight[id] = f
	}
	f.n++
	m.idle.mu.Unlock()
	var once sync.Once
	release := func() {
		once.Do(func() {
			m.idle.mu.Lock()
			if f := m.idle.inflight[id]; f != nil {
				if f.n--; f.n <= 0 {
					delete(m.idle.inflight, id)
				}
			}
			m.idle.mu.Unlock()
		})
	}
	// The schedule moves before a resume, so that the pauser does not freeze the
	// sandbox again at once.
	m.touchIdle(ctx, id, idle, sb.State == statePaused)
	if sb.State == statePaused && sb.Reason == ReasonIdle {
		woke, err := m.wake(ctx, id)
		if err != nil {
			release()
			return nil, func() {}, err
		}
		sb = woke
	}
	return sb, release, nil
}

// touchIdle moves sandbox id's pause time to idle from now, at most once per
// idleTouchEvery unless force.
func (m *Manager) touchIdle(ctx context.Context, id string, idle time.Duration, force bool) {
	now := time.Now()
	m.idle.mu.Lock()
	due := force || now.Sub(m.idle.touched[id]) >= idleTouchEvery
	if due {
		if len(m.idle.touched) > 100000 {
			m.idle.touched = map[string]time.Time{}
		}
		m.idle.touched[id] = now
	}
	m.idle.mu.Unlock()
	if due {
		if err := m.store.ScheduleIdle(ctx, id, now.Add(idle)); err != nil {
			m.log.Debug("idle schedule", "id", id, "err", err)
		}
	}
}

// wake resumes a sandbox paused for idleness; concurrent requests share one resume.
func (m *Manager) wake(ctx context.Context, id string) (*store.Sandbox, error) {
	m.idle.mu.Lock()
	if ch, ok := m.idle.waking[id]; ok {
		m.idle.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return m.store.GetSandbox(ctx, id)
	}
	ch := make(chan struct{})
	m.idle.waking[id] = ch
	m.idle.mu.Unlock()
	defer func() {
		m.idle.mu.Lock()
		delete(m.idle.waking, id)
		m.idle.mu.Unlock()
		close(ch)
	}()
	if err := m.runtime.Resume(ctx, id); err != nil {
		// Another gateway's resume may have come first: the record decides below.
		if cur, ierr := m.runtime.Inspect(ctx, id); ierr != nil || cur.State != runtimes.StateRunning {
			return nil, &fault.Error{Kind: fault.KindUnavailable, Code: codeNotRunning, Message: fmt.Sprintf("sandbox %s is paused and could not be resumed", id), Cause: err}
		}
	}
	rec, err := m.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
		if sb.State == statePaused && sb.Reason == ReasonIdle {
			sb.State, sb.Reason, sb.Message, sb.LastTransitionAt = stateRunning, "", "", time.Now().UTC()
		}
		return nil
	})
	m.host.DropRoute(id)
	if err != nil {
		return nil, m.host.StoreError(id, err)
	}
	m.host.Emit(ctx, rec, "sandbox.resumed", map[string]any{"reason": ReasonIdle})
	return rec, nil
}

// idleOnce keeps the sandboxes with requests in flight on this gateway awake and, on
// the lease holder, pauses those whose idle time has come.
func (m *Manager) idleOnce(ctx context.Context) {
	m.touchInflight(ctx)
	if m.host.HoldLease(ctx, "idle pause") {
		m.pauseIdle(ctx)
	}
}

func (m *Manager) touchInflight(ctx context.Context) {
	m.idle.mu.Lock()
	busy := make(map[string]time.Duration, len(m.idle.inflight))
	for id, f := range m.idle.inflight {
		busy[id] = f.idle
	}
	m.idle.mu.Unlock()
	for id, idle := range busy {
		m.touchIdle(ctx, id, idle, false)
	}
}

// pauseIdle freezes the sandboxes due on the idle schedule that are still Running.
func (m *Manager) pauseIdle(ctx context.Context) {
	ids, err := m.store.IdleDue(ctx, time.Now(), 64)
	if err != nil || len(ids) == 0 {
		return
	}
	for _, id := range ids {
		if err := m.pauseIfIdle(ctx, id); err != nil {
			m.log.Warn("idle pause", "id", id, "err", err)
		}
	}
}

func (m *Manager) pauseIfIdle(ctx context.Context, id string) error {
	sb, err := m.store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && (sb.State != stateRunning || idlePauseOf(sb) == 0)) {
		// Gone, paused by hand or not Running: a request puts it back on the schedule.
		return m.store.UnscheduleIdle(ctx, id)
	}
	if err != nil {
		return err
	}
	due, err := m.store.IdleAt(ctx, id)
	if err != nil || due.IsZero() || due.After(time.Now()) {
		return err
	}
	if err := m.runtime.Pause(ctx, id); err != nil {
		return err
	}
	msg := fmt.Sprintf("paused after %s without traffic; the next request resumes it", idlePauseOf(sb))
	rec, err := m.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
		if sb.State != stateRunning {
			return errIdleRace
		}
		sb.State, sb.Reason, sb.Message, sb.LastTransitionAt = statePaused, ReasonIdle, msg, time.Now().UTC()
		return nil
	})
	m.host.DropRoute(id)
	if errors.Is(err, errIdleRace) {
		_ = m.runtime.Resume(ctx, id)
		return nil
	}
	if err != nil {
		_ = m.runtime.Resume(ctx, id)
		return err
	}
	// A request that arrived while this pause was being made moved the schedule: it may
	// be waiting on the frozen sandbox, so wake it at once.
	if removed, err := m.store.UnscheduleIdleIf(ctx, id, due); err == nil && !removed {
		_, err := m.wake(ctx, id)
		return err
	}
	m.host.Emit(ctx, rec, "sandbox.paused", map[string]any{"reason": ReasonIdle})
	return nil
}

var errIdleRace = errors.New("sandbox changed state while it was being paused for idleness")
