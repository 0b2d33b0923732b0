package gateway

// Sandbox deaths. A sandbox whose workload stops by itself (its entrypoint exited, a
// kill at its memory limit, an operator's `docker kill`) is Failed. The gateway learns
// of it three ways, whichever comes first: the runtime's event stream (the pool feature's death watch, gateway/pool),
// a proxied call the sandbox does not answer (Upstream.Failed), and the reconciler's pass.
// From then on every call to it answers SANDBOX::UNAVAILABLE with the reason, and the
// parts of it that only serve a live workload (its egress enforcer, its namespace holder)
// are removed at once; the workload's container stays, for its logs, until the record's
// retention (FailedRetention) ends.

import (
	"context"
	"errors"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// Failed reasons of a sandbox that died.
const (
	// ReasonExited: its main process ended.
	ReasonExited = "EXITED"
	// ReasonOOMKilled: a process of it was killed for want of memory (its memory limit).
	ReasonOOMKilled = "OOM_KILLED"
	// ReasonVanished: its container was removed behind the gateway's back.
	ReasonVanished = "CONTAINER_VANISHED"
	// ReasonEvicted: the platform stopped or removed it (a Kubernetes eviction).
	ReasonEvicted = "EVICTED"
)

// deathOf says why a sandbox whose workload does not run ended, from what the runtime
// knows of it (exists false: the runtime has no such sandbox).
func deathOf(inst runtimes.Instance, exists bool) (reason, message string) {
	switch {
	case !exists:
		return ReasonVanished, "the sandbox's container no longer exists in the runtime"
	case inst.Evicted:
		return ReasonEvicted, inst.Message
	case inst.OOMKilled:
		return ReasonOOMKilled, inst.Message + "; the sandbox reached its memory limit"
	default:
		return ReasonExited, inst.Message
	}
}

// markDead marks a sandbox Failed for its death as inst tells it, emits
// sandbox.failed and releases its helpers. It returns the record as marked, or nil when
// the sandbox was deleted or is being deleted, is still being created, is past its
// expiry (the reaper's), or was marked by another path first.
func (s *Service) markDead(ctx context.Context, id string, inst runtimes.Instance, exists bool) *store.Sandbox {
	reason, message := deathOf(inst, exists)
	now := time.Now().UTC()
	sb, err := s.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
		if sb.State == StatePending || sb.State == StateFailed || sb.State == StateStopping {
			// A create's own, marked by another path first, or a delete's (its container
			// exits and goes because it is being deleted: deleting.go).
			return errAlreadySettled
		}
		if sb.ExpiresAt != nil && !sb.ExpiresAt.After(now) {
			// Past its expiry it is the reaper's (reaper.go, on whichever gateway holds
			// its lease): its container may be going because the reaper removes it, and
			// a pass that judged it before its expiry would report that as a death.
			return errAlreadySettled
		}
		sb.State, sb.Reason, sb.Message, sb.LastTransitionAt = StateFailed, reason, message, now
		return nil
	})
	if err != nil {
		if !errors.Is(err, errAlreadySettled) && !errors.Is(err, store.ErrNotFound) {
			s.backgroundError("deaths", "mark sandbox failed", err, "id", id)
		}
		return nil
	}
	s.log.Warn("sandbox failed", "id", id, "reason", reason)
	s.feed.Drop(id)
	s.emit(ctx, sb, "sandbox.failed", map[string]any{"reason": reason, "message": message})
	s.releaseHelpers(id)
	return sb
}

// releaseHelpers removes a dead sandbox's helpers in the background.
func (s *Service) releaseHelpers(id string) {
	hr, ok := s.runtime.(runtimes.HelperReleaser)
	if !ok {
		return
	}
	s.group.GoAlways(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := hr.ReleaseHelpers(ctx, id); err != nil {
			s.log.Warn("remove the helpers of a dead sandbox", "id", id, "err", err)
		}
	})
}

// coldSandboxDied handles the report that a sandbox not taken from a pool stopped (the
// runtime's event stream, or a call it did not answer): it marks it Failed once the
// runtime confirms it is not running, and returns the error its callers get then.
func (s *Service) coldSandboxDied(ctx context.Context, sb *store.Sandbox) error {
	inst, err := s.runtime.Inspect(ctx, sb.ID)
	exists := !errors.Is(err, runtimes.ErrNotFound)
	if err != nil && exists {
		return nil // the runtime cannot tell now: the reconciler's pass will
	}
	if exists && inst.State != runtimes.StateExited {
		return nil
	}
	marked := s.markDead(ctx, sb.ID, inst, exists)
	if marked == nil {
		cur, err := s.store.GetSandbox(ctx, sb.ID)
		if err != nil || cur.State != StateFailed {
			return nil
		}
		marked = cur
	}
	return failedError(marked)
}

var errAlreadySettled = errors.New("already settled")

// failedError is the answer to a call to a Failed sandbox.
func failedError(sb *store.Sandbox) error {
	if sb.Reason == ReasonMemberDied {
		return unavailable(sb.ID)
	}
	return Errorf(KindUnavailable, CodeUnavailable, "sandbox %s has failed (%s): %s", sb.ID, sb.Reason, sb.Message)
}

// FailedError is the answer to a proxied call to sb when it is Failed, else nil.
func FailedError(sb *store.Sandbox) error {
	if sb.State != StateFailed {
		return nil
	}
	return failedError(sb)
}
