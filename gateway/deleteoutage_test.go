package gateway

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
	"github.com/sandgate/sandgate/runtimes/inprocess"
	"github.com/sandgate/sandgate/test/coredeps"
)

// outageDuringDelete is the in-process runtime whose Delete of sandbox id first freezes
// the store's real redis-server (SIGSTOP), so that the outage begins while the delete
// is under way: after the record was read, before it is removed.
type outageDuringDelete struct {
	*inprocess.Runtime
	id     string
	freeze func()
	once   sync.Once
}

func (r *outageDuringDelete) Delete(ctx context.Context, id string) error {
	if id == r.id {
		r.once.Do(r.freeze)
	}
	return r.Runtime.Delete(ctx, id)
}

// TestDeleteDuringStoreOutage: a delete whose record removal meets a frozen Redis
// answers 503, and once Redis answers again the record goes by itself: the sandbox
// leaves the list and its tenant's usage, and emits sandbox.deleted (once), never
// sandbox.failed.
func TestDeleteDuringStoreOutage(t *testing.T) {
	d := coredeps.Start(t)
	rt := &outageDuringDelete{Runtime: d.Runtime}
	svc := New(Config{SyncInterval: 50 * time.Millisecond}, d.Store, rt, d.Policy, d.Log)
	svc.SetAdminKey("admin-key")
	svc.Start(context.Background())
	t.Cleanup(svc.Stop)
	ctx := context.Background()
	sb, err := svc.Create(ctx, admin, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	pid := d.Redis.Pid()
	frozen := false
	thaw := func() {
		if frozen {
			frozen = false
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	rt.id, rt.freeze = sb.ID, func() {
		frozen = true
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}

	err = svc.Delete(ctx, admin, sb.ID)
	if e, ok := AsError(err); !errors.Is(err, store.ErrUnavailable) && (!ok || e.Code != CodeStoreUnavailable) {
		t.Fatalf("delete during the outage: %v, want the store unavailable", err)
	}
	if _, err := d.Runtime.Inspect(ctx, sb.ID); err == nil {
		t.Fatal("the sandbox still runs after its delete")
	}
	time.Sleep(time.Second) // the outage goes on through passes of every loop
	thaw()

	// The queued removal is retried every heartbeat (a second).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, err := svc.Get(ctx, admin, sb.ID)
		if e, ok := AsError(err); ok && e.Kind == KindNotFound {
			break
		}
		if time.Now().After(deadline) {
			if err == nil {
				t.Fatalf("10s after the store came back the record is still there: %s %s", got.Status.State, got.Status.Reason)
			}
			t.Fatalf("10s after the store came back: %v", err)
		}
	}
	list, err := svc.List(ctx, admin, ListQuery{Page: 1, PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("listed after the store came back: %v", list.Items)
	}
	if u, err := d.Store.TenantUsage(ctx, DefaultTenant); err != nil || u.Sandboxes != 0 {
		t.Errorf("tenant usage %+v (%v), want no sandbox", u, err)
	}
	events, err := d.Store.ReadEvents(ctx, DefaultTenant, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	deleted := 0
	for _, ev := range events {
		if ev.SandboxID != sb.ID {
			continue
		}
		kinds = append(kinds, ev.Type)
		if ev.Type == plugins.EventSandboxDeleted {
			deleted++
		}
		if ev.Type == "sandbox.failed" {
			t.Errorf("sandbox.failed for a deleted sandbox: %v", ev.Data)
		}
	}
	if deleted != 1 {
		t.Errorf("%d sandbox.deleted events, want 1 (events: %v)", deleted, kinds)
	}
}
