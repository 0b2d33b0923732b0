package gateway

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

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

// validateIdlePause checks extensions["idle.pause.seconds"]: whole seconds from the
// gateway's minimum timeout to its maximum.
func (s *Service) validateIdlePause(v string) error {
	n, err := strconv.Atoi(v)
	lo, hi := int(s.cfg.MinTimeout/time.Second), int(s.cfg.MaxTimeout/time.Second)
	if err != nil || n < lo || n > hi {
		return invalid("extensions[%q] = %q: want whole seconds from %d to %d", ExtensionIdlePause, v, lo, hi)
	}
	return nil
}

// scheduleIdle puts a new Running sandbox on the idle schedule.
func (s *Service) scheduleIdle(ctx context.Context, sb *store.Sandbox) {
	if d := idlePauseOf(sb); d > 0 {
		if err := s.store.ScheduleIdle(ctx, sb.ID, time.Now().Add(d)); err != nil {
			s.log.Warn("idle schedule", "id", sb.ID, "err", err)
		}
	}
}

// WakeForAccess is the proxy's one call before it forwards a request to sandbox sb: for
// a sandbox with an idle period it counts the request as traffic and, when the sandbox
// was paused for idleness, resumes it first and returns the updated record. The caller
// runs release once the request is done (a request in flight keeps its sandbox awake).
// Other sandboxes cost a map lookup.
func (s *Service) WakeForAccess(ctx context.Context, sb *store.Sandbox) (*store.Sandbox, func(), error) {
	idle := idlePauseOf(sb)
	if idle == 0 {
		return sb, func() {}, nil
	}
	id := sb.ID
	s.idle.mu.Lock()
	f := s.idle.inflight[id]
	if f == nil {
		f = &idleFlight{idle: idle}
		s.idle.inflight[id] = f
	}
	f.n++
	s.idle.mu.Unlock()
	var once sync.Once
	release := func() {
		once.Do(func() {
			s.idle.mu.Lock()
			if f := s.idle.inflight[id]; f != nil {
				if f.n--; f.n <= 0 {
					delete(s.idle.inflight, id)
				}
			}
			s.idle.mu.Unlock()
		})
	}
	// The schedule moves before a resume, so that the pauser does not freeze the
	// sandbox again at once.
	s.touchIdle(ctx, id, idle, sb.State == StatePaused)
	if sb.State == StatePaused && sb.Reason == ReasonIdle {
		woke, err := s.wake(ctx, id)
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
func (s *Service) touchIdle(ctx context.Context, id string, idle time.Duration, force bool) {
	now := time.Now()
	s.idle.mu.Lock()
	due := force || now.Sub(s.idle.touched[id]) >= idleTouchEvery
	if due {
		if len(s.idle.touched) > 100000 {
			s.idle.touched = map[string]time.Time{}
		}
		s.idle.touched[id] = now
	}
	s.idle.mu.Unlock()
	if due {
		if err := s.store.ScheduleIdle(ctx, id, now.Add(idle)); err != nil {
			s.log.Debug("idle schedule", "id", id, "err", err)
		}
	}
}

// wake resumes a sandbox paused for idleness; concurrent requests share one resume.
func (s *Service) wake(ctx context.Context, id string) (*store.Sandbox, error) {
	s.idle.mu.Lock()
	if ch, ok := s.idle.waking[id]; ok {
		s.idle.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return s.store.GetSandbox(ctx, id)
	}
	ch := make(chan struct{})
	s.idle.waking[id] = ch
	s.idle.mu.Unlock()
	defer func() {
		s.idle.mu.Lock()
		delete(s.idle.waking, id)
		s.idle.mu.Unlock()
		close(ch)
	}()
	if err := s.runtime.Resume(ctx, id); err != nil {
		// Another gateway's resume may have come first: the record decides below.
		if cur, ierr := s.runtime.Inspect(ctx, id); ierr != nil || cur.State != runtimes.StateRunning {
			return nil, &Error{Kind: KindUnavailable, Code: CodeNotRunning, Message: fmt.Sprintf("sandbox %s is paused and could not be resumed", id), Cause: err}
		}
	}
	rec, err := s.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
		if sb.State == StatePaused && sb.Reason == ReasonIdle {
			sb.State, sb.Reason, sb.Message, sb.LastTransitionAt = StateRunning, "", "", time.Now().UTC()
		}
		return nil
	})
	s.routes.drop(id)
	if err != nil {
		return nil, s.mapStoreErr(id, err)
	}
	s.emit(ctx, rec, "sandbox.resumed", map[string]any{"reason": ReasonIdle})
	return rec, nil
}

// runIdlePauser keeps the sandboxes with requests in flight on this gateway awake and,
// on the lease holder, pauses those whose idle time has come.
func (s *Service) runIdlePauser() {
	s.loop(idleCheckEvery, func(ctx context.Context) {
		s.touchInflight(ctx)
		if s.holdLease(ctx, "idle pause") {
			s.pauseIdle(ctx)
		}
	})
}

func (s *Service) touchInflight(ctx context.Context) {
	s.idle.mu.Lock()
	busy := make(map[string]time.Duration, len(s.idle.inflight))
	for id, f := range s.idle.inflight {
		busy[id] = f.idle
	}
	s.idle.mu.Unlock()
	for id, idle := range busy {
		s.touchIdle(ctx, id, idle, false)
	}
}

// pauseIdle freezes the sandboxes due on the idle schedule that are still Running.
func (s *Service) pauseIdle(ctx context.Context) {
	ids, err := s.store.IdleDue(ctx, time.Now(), 64)
	if err != nil || len(ids) == 0 {
		return
	}
	for _, id := range ids {
		if err := s.pauseIfIdle(ctx, id); err != nil {
			s.log.Warn("idle pause", "id", id, "err", err)
		}
	}
}

func (s *Service) pauseIfIdle(ctx context.Context, id string) error {
	sb, err := s.store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && (sb.State != StateRunning || idlePauseOf(sb) == 0)) {
		// Gone, paused by hand or not Running: a request puts it back on the schedule.
		return s.store.UnscheduleIdle(ctx, id)
	}
	if err != nil {
		return err
	}
	due, err := s.store.IdleAt(ctx, id)
	if err != nil || due.IsZero() || due.After(time.Now()) {
		return err
	}
	if err := s.runtime.Pause(ctx, id); err != nil {
		return err
	}
	msg := fmt.Sprintf("paused after %s without traffic; the next request resumes it", idlePauseOf(sb))
	rec, err := s.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
		if sb.State != StateRunning {
			return errIdleRace
		}
		sb.State, sb.Reason, sb.Message, sb.LastTransitionAt = StatePaused, ReasonIdle, msg, time.Now().UTC()
		return nil
	})
	s.routes.drop(id)
	if errors.Is(err, errIdleRace) {
		_ = s.runtime.Resume(ctx, id)
		return nil
	}
	if err != nil {
		_ = s.runtime.Resume(ctx, id)
		return err
	}
	// A request that arrived while this pause was being made moved the schedule: it may
	// be waiting on the frozen sandbox, so wake it at once.
	if removed, err := s.store.UnscheduleIdleIf(ctx, id, due); err == nil && !removed {
		_, err := s.wake(ctx, id)
		return err
	}
	s.emit(ctx, rec, "sandbox.paused", map[string]any{"reason": ReasonIdle})
	return nil
}

var errIdleRace = errors.New("sandbox changed state while it was being paused for idleness")
