package gateway

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
)

// TestDeletedSandboxesEmitDeletedOnly: many sandboxes deleted at once while the
// reconciler runs every few milliseconds. A container leaves the runtime's list before
// its removal returns (as on Docker), so passes see records whose container is gone;
// none of them is reported as failed, and each emits sandbox.deleted once.
func TestDeletedSandboxesEmitDeletedOnly(t *testing.T) {
	const count = 200
	c := newTestCore(t, Config{SyncInterval: 5 * time.Millisecond})
	ctx := context.Background()
	ids := make(chan string, count)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range count / 8 {
				sb, err := c.svc.Create(ctx, admin, sleeper(600))
				if err != nil {
					t.Error(err)
					return
				}
				ids <- sb.ID
			}
		}()
	}
	wg.Wait()
	close(ids)
	if t.Failed() {
		return
	}
	deleting := map[string]bool{}
	var all []string
	for id := range ids {
		deleting[id] = true
		all = append(all, id)
	}
	work := make(chan string)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				if err := c.svc.Delete(ctx, admin, id); err != nil {
					t.Errorf("delete %s: %v", id, err)
				}
			}
		}()
	}
	for _, id := range all {
		work <- id
	}
	close(work)
	wg.Wait()
	// A few more passes, for any that would judge a deleted sandbox late.
	time.Sleep(200 * time.Millisecond)

	events, err := c.store.ReadEvents(ctx, DefaultTenant, "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	failed, deleted := map[string]int{}, map[string]int{}
	for _, ev := range events {
		if !deleting[ev.SandboxID] {
			continue
		}
		switch ev.Type {
		case "sandbox.failed":
			failed[ev.DataMap()["reason"].(string)]++
		case plugins.EventSandboxDeleted:
			deleted[ev.SandboxID]++
		}
	}
	if len(failed) > 0 {
		t.Errorf("sandbox.failed events for sandboxes being deleted, by reason: %v (of %d deletes)", failed, count)
	}
	for _, id := range all {
		if deleted[id] != 1 {
			t.Errorf("sandbox %s: %d sandbox.deleted events, want 1", id, deleted[id])
		}
	}
}

// TestStoppingRecordFinished: a record left Stopping (its gateway died between the mark
// and the removal) is left alone while a delete may still be under way, then finished by
// the reconciler: container and record go, with one sandbox.deleted.
func TestStoppingRecordFinished(t *testing.T) {
	c := newTestCore(t, Config{SyncInterval: 20 * time.Millisecond})
	ctx := context.Background()
	fresh, err := c.svc.Create(ctx, admin, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	stale, err := c.svc.Create(ctx, admin, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	for id, since := range map[string]time.Time{fresh.ID: time.Now(), stale.ID: time.Now().Add(-stoppingTakeover - time.Second)} {
		if _, err := c.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
			sb.State, sb.LastTransitionAt = StateStopping, since.UTC()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the stale Stopping sandbox removed", func() bool {
		_, err := c.rt.Inspect(ctx, stale.ID)
		_, gerr := c.store.GetSandbox(ctx, stale.ID)
		return err != nil && errors.Is(gerr, store.ErrNotFound)
	})
	time.Sleep(100 * time.Millisecond) // more passes
	if got, err := c.svc.Get(ctx, admin, fresh.ID); err != nil || got.Status.State != StateStopping {
		t.Errorf("the fresh Stopping sandbox: %+v, %v; want it left Stopping for its delete", got, err)
	}
	if _, err := c.rt.Inspect(ctx, fresh.ID); err != nil {
		t.Errorf("the fresh Stopping sandbox's container was removed: %v", err)
	}
	events, err := c.store.ReadEvents(ctx, DefaultTenant, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, ev := range events {
		if ev.Type == plugins.EventSandboxDeleted {
			deleted = append(deleted, ev.SandboxID)
		}
		if ev.Type == "sandbox.failed" {
			t.Errorf("sandbox.failed for %s: %v", ev.SandboxID, ev.Data)
		}
	}
	if len(deleted) != 1 || deleted[0] != stale.ID {
		t.Errorf("sandbox.deleted events for %v, want one for %s", deleted, stale.ID)
	}
}
