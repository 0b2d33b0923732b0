package gateway

import (
	"context"
	"sync"
	"testing"
	"time"

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
