package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
)

// Deletes. A delete first marks the record Stopping, then removes the container, then
// the record. The mark is what keeps a sandbox being deleted from being reported as
// failed: its container leaves the runtime's list (and its process exits) before the
// record goes, and a reconcile pass in between, on any gateway, would otherwise judge
// it vanished or exited. The reconciler leaves Stopping records alone (and its writes
// check that the record is still in the state it judged), the reaper too; a sandbox
// deleted emits sandbox.deleted only, once, from whichever removal took its record.
//
// A record the store would not remove (an outage that began during the delete) is
// queued and removed once the store answers again (recovery.Manager.RememberDeleted), and its
// sandbox.deleted emitted then. A Stopping record whose delete no gateway finishes (its
// gateway died, or the runtime refused the removal) is finished by the reconciler after
// stoppingTakeover.

// stoppingTakeover is how long a record may stay Stopping before the reconciler
// finishes its delete: well past any removal a runtime completes.
const stoppingTakeover = 2 * time.Minute

// markStopping marks the record of id Stopping, after check (may be nil) accepts it,
// and returns it. A record already Stopping is returned as it is: a delete of it is
// under way, and this one completes it too.
func (s *Service) markStopping(ctx context.Context, id string, check func(*store.Sandbox) error) (*store.Sandbox, error) {
	return s.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
		if check != nil {
			if err := check(sb); err != nil {
				return err
			}
		}
		if sb.State != StateStopping {
			sb.State, sb.Reason, sb.Message, sb.LastTransitionAt = StateStopping, "", "", time.Now().UTC()
		}
		return nil
	})
}

// removeStopping removes the container and then the record of sb, marked Stopping,
// and emits sandbox.deleted with data. When the store does not take the removal, the
// record is queued for removal and the store's error returned.
func (s *Service) removeStopping(ctx context.Context, sb *store.Sandbox, data map[string]any) error {
	s.feed.Drop(sb.ID)
	if err := s.runtime.Delete(ctx, sb.ID); err != nil {
		// The record stays Stopping: a retry of the delete, or the reconciler after
		// stoppingTakeover, removes it.
		return &Error{Kind: KindInternal, Code: CodeRuntimeError, Message: "the runtime could not remove the sandbox; retry the delete", Cause: err}
	}
	removed, err := s.store.RemoveSandbox(context.WithoutCancel(ctx), sb.ID)
	if err != nil && !removed {
		s.recovery.RememberDeleted(sb, data)
		if errors.Is(err, store.ErrUnavailable) {
			return &Error{Kind: KindUnavailable, Code: CodeStoreUnavailable, Cause: err,
				Message: "the sandbox is removed; the state store (Redis) is unreachable, and its record is removed as soon as it answers again"}
		}
		return err
	}
	if err != nil {
		s.log.Warn("sandbox record removed, its index entries not all", "id", sb.ID, "err", err)
	}
	if removed {
		s.emit(ctx, sb, plugins.EventSandboxDeleted, data)
	}
	return nil
}

// finishStopping completes the delete of a record left Stopping past stoppingTakeover.
func (s *Service) finishStopping(ctx context.Context, rec *store.Sandbox) {
	s.log.Warn("finishing a delete that did not complete", "id", rec.ID, "since", rec.LastTransitionAt)
	s.feed.Drop(rec.ID)
	if err := s.runtime.Delete(ctx, rec.ID); err != nil {
		s.backgroundError("reconciler", "remove the container of a sandbox being deleted", err, "id", rec.ID)
		return
	}
	removed, err := s.store.RemoveSandbox(ctx, rec.ID)
	if err != nil && !removed {
		s.backgroundError("reconciler", "remove the record of a sandbox being deleted", err, "id", rec.ID)
		return
	}
	if removed {
		s.emit(ctx, rec, plugins.EventSandboxDeleted, map[string]any{"finishedBy": "reconciler"})
	}
}

// errNotAsJudged aborts a reconciler write whose record changed since the pass read it.
var errNotAsJudged = errors.New("record changed since it was judged")
