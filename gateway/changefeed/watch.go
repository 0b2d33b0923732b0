package changefeed

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// Live sandbox lists. Every write of a sandbox record, on any gateway, publishes its id
// on Redis (store.PublishChange); each gateway holds one subscription (Manager.subscribe)
// and fans the ids out to its watchers here. A watcher re-reads each record from Redis, so
// what it sends is what GET /v1/sandboxes/{id} would answer, whichever replica wrote it.

// watchBuffer is how many changed ids a watcher may fall behind by before it must
// resynchronize by listing again.
const watchBuffer = 1024

// watchHub is this gateway's set of watchers; its zero value is ready.
type watchHub struct {
	mu   sync.Mutex
	subs map[*Watcher]struct{}
}

// Watcher receives the ids of changed sandboxes. When it fell behind or the Redis
// subscription was re-established (changes may have been missed), Resync is signalled
// and the reader lists again.
type Watcher struct {
	C      chan string
	Resync chan struct{}
	hub    *watchHub
	lost   atomic.Bool
}

// Watch registers a watcher; Close it when done. Register before listing, so that no
// change between the list and the first notice is missed.
func (m *Manager) Watch() *Watcher {
	w := &Watcher{C: make(chan string, watchBuffer), Resync: make(chan struct{}, 1), hub: &m.watch}
	m.watch.mu.Lock()
	if m.watch.subs == nil {
		m.watch.subs = map[*Watcher]struct{}{}
	}
	m.watch.subs[w] = struct{}{}
	m.watch.mu.Unlock()
	return w
}

// Close unregisters the watcher.
func (w *Watcher) Close() {
	w.hub.mu.Lock()
	delete(w.hub.subs, w)
	w.hub.mu.Unlock()
}

func (w *Watcher) resync() {
	select {
	case w.Resync <- struct{}{}:
	default:
	}
}

// notify hands a changed id to every watcher without blocking.
func (h *watchHub) notify(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.subs {
		select {
		case w.C <- id:
		default:
			w.resync()
		}
	}
}

// resyncAll asks every watcher to list again.
func (h *watchHub) resyncAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.subs {
		w.resync()
	}
}

// Filter narrows a live list like the list's query does.
type Filter struct {
	States   []string
	Metadata map[string]string
}

// Matches reports whether the record sb passes the filter.
func (f Filter) Matches(sb *store.Sandbox) bool {
	if len(f.States) > 0 {
		ok := false
		for _, st := range f.States {
			if strings.EqualFold(st, sb.State) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	for k, v := range f.Metadata {
		if got, ok := sb.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Snapshot lists the record of every sandbox caller may see that passes f (no paging).
func (m *Manager) Snapshot(ctx context.Context, caller principal.Caller, f Filter) ([]*store.Sandbox, error) {
	tenant := caller.Tenant
	if caller.Admin {
		tenant = ""
	}
	all, err := m.store.ListSandboxes(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]*store.Sandbox, 0, len(all))
	for _, rec := range all {
		if f.Matches(rec) {
			out = append(out, rec)
		}
	}
	return out, nil
}

// Lookup returns the current record of a changed sandbox for caller: nil when it is
// gone or not the caller's to see.
func (m *Manager) Lookup(ctx context.Context, caller principal.Caller, id string) (*store.Sandbox, error) {
	rec, err := m.store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !caller.Admin && rec.Tenant != caller.Tenant {
		return nil, nil
	}
	return rec, nil
}
