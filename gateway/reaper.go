package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
	"github.com/sandgate/sandgate/runtimes"
)

// Expiry. Each reaper tick hands every sandbox whose expiresAt has passed to a removal of
// its own (at most reapConcurrency at once) and returns at once, so that a burst of
// expiries does not hold up the next tick and one slow engine call does not hold up the
// rest: a burst of 20 is gone within about a second of expiresAt on an idle engine
// (measured in `make bench`). A sandbox being removed is in s.expiring until its record
// is gone; the reconciler leaves such records (and any whose expiresAt has passed) to the
// reaper, so that a container dying of its expiry is never reported as failed.

// ExtensionPauseAtExpiry ("true") makes a sandbox pause at its expiry instead of being
// removed (E2B's autoPause): it is then kept, paused, for at most the longest lifetime
// the operator allows (MaxTimeout) and removed when that passes too, unless a resume and
// a renewal give it a lifetime again first. A runtime that cannot pause removes it as any
// other.
const ExtensionPauseAtExpiry = "expiry.pause"

// reapConcurrency bounds expiry removals running at once.
const reapConcurrency = 16

// expirySet holds the sandboxes whose removal for expiry is under way on this gateway;
// sem bounds how many run at once.
type expirySet struct {
	inFlight
	sem chan struct{}
}

// inFlight is a set of sandbox ids with work under way on this gateway (an expiry
// removal, an enforcer restore), so that a slow one is not started twice.
type inFlight struct {
	mu  sync.Mutex
	ids map[string]bool
}

// begin claims id; false when work on it is already under way.
func (f *inFlight) begin(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ids == nil {
		f.ids = map[string]bool{}
	}
	if f.ids[id] {
		return false
	}
	f.ids[id] = true
	return true
}

func (f *inFlight) end(id string) {
	f.mu.Lock()
	delete(f.ids, id)
	f.mu.Unlock()
}

func (f *inFlight) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[id]
}

// expiring reports whether rec is the reaper's to remove: its removal is under way, or
// its expiresAt has passed. The reconciler does not judge such records.
func (s *Service) expiring(rec *store.Sandbox, now time.Time) bool {
	return s.expiries.has(rec.ID) || (rec.ExpiresAt != nil && !rec.ExpiresAt.After(now))
}

// reapOnce starts the removal of every sandbox whose expiry has passed.
func (s *Service) reapOnce(ctx context.Context) {
	if !s.holdLease(ctx, "reaper") {
		return
	}
	ids, err := s.store.ExpiredSandboxes(ctx, time.Now(), 256)
	if err != nil {
		s.backgroundError("reaper", "list expired sandboxes", err)
		return
	}
	for _, id := range ids {
		if !s.expiries.begin(id) {
			continue // still being removed since an earlier tick
		}
		s.group.GoAlways(func() {
			defer s.expiries.end(id)
			s.expiries.sem <- struct{}{}
			defer func() { <-s.expiries.sem }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s.expire(ctx, id)
		})
	}
}

func (s *Service) expire(ctx context.Context, id string) {
	sb, err := s.store.GetSandbox(ctx, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.backgroundError("reaper", "read expired sandbox", err, "id", id)
		return
	}
	// A sandbox still starting belongs to its create; it is reaped once that finishes (or
	// gives up), never from under it.
	if sb != nil && sb.State == StatePending && time.Since(sb.CreatedAt) < s.cfg.ReadyTimeout+30*time.Second {
		return
	}
	// Renewed since the expiry index was read: not expired after all.
	if sb != nil && (sb.ExpiresAt == nil || sb.ExpiresAt.After(time.Now())) {
		return
	}
	// Being deleted: the delete (or the reconciler's takeover of it) removes it and
	// announces it as deleted.
	if sb != nil && sb.State == StateStopping {
		return
	}
	// One that asked to pause at its expiry is paused and kept (ExtensionPauseAtExpiry),
	// unless its runtime cannot pause it; one already paused at its expiry has had its keep.
	if sb != nil && sb.Extensions[ExtensionPauseAtExpiry] == "true" && sb.State == StateRunning {
		err := s.runtime.Pause(ctx, id)
		switch {
		case err == nil || errors.Is(err, runtimes.ErrWrongState):
			now := time.Now().UTC()
			keep := now.Add(s.cfg.MaxTimeout)
			rec, err := s.store.ModifySandbox(ctx, id, func(cur *store.Sandbox) error {
				if cur.State != StateRunning {
					return errAlreadySettled
				}
				cur.State, cur.LastTransitionAt, cur.ExpiresAt = StatePaused, now, &keep
				return nil
			})
			s.feed.Drop(id)
			switch {
			case err == nil:
				s.log.Info("sandbox paused at its expiry", "id", id, "tenant", sb.Tenant, "kept_until", keep)
				s.emit(ctx, rec, "sandbox.paused", map[string]any{"reason": "expiry", "keptUntil": keep})
			case !errors.Is(err, errAlreadySettled) && !errors.Is(err, store.ErrNotFound):
				_ = s.runtime.Resume(ctx, id)
				s.backgroundError("reaper", "record the pause of an expired sandbox", err, "id", id)
			}
			return
		case !errors.Is(err, errors.ErrUnsupported):
			s.backgroundError("reaper", "pause expired sandbox", err, "id", id)
			return // its expiry stays past: the next tick tries again
		}
	}
	s.feed.Drop(id)
	if err := s.runtime.Delete(ctx, id); err != nil {
		s.backgroundError("reaper", "remove expired sandbox", err, "id", id)
		return
	}
	removed, err := s.store.RemoveSandbox(ctx, id)
	if err != nil && !removed {
		// The next tick finds it again in the expiry index and retries.
		s.backgroundError("reaper", "delete expired record", err, "id", id)
		return
	}
	if sb != nil && removed {
		s.log.Info("sandbox expired", "id", id, "tenant", sb.Tenant)
		s.emit(ctx, sb, plugins.EventSandboxExpired, nil)
	}
}
