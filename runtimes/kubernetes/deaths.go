package kubernetes

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/sandgate/sandgate/runtimes"
)

// deathWatch fans the informer's news of sandboxes that died out to WatchDeaths callers.
type deathWatch struct {
	watchers map[int]func(id string)
	next     int
	// reported holds the sandboxes already reported, so that later updates of a dead
	// pod are not reported again; a pod's deletion forgets it.
	reported map[string]bool
}

// WatchDeaths reports, from the pod informer, each sandbox whose workload stopped or
// whose pod failed, until ctx ends. A pod being deleted (the gateway's own removals) is
// not reported.
func (r *Runtime) WatchDeaths(ctx context.Context, dead func(id string)) error {
	r.mu.Lock()
	if r.deaths.watchers == nil {
		r.deaths.watchers, r.deaths.reported = map[int]func(string){}, map[string]bool{}
	}
	key := r.deaths.next
	r.deaths.next++
	r.deaths.watchers[key] = dead
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.deaths.watchers, key)
		r.mu.Unlock()
	}()
	<-ctx.Done()
	return ctx.Err()
}

// noteDeath is called for every pod change (podChanged).
func (r *Runtime) noteDeath(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	id := pod.Labels[runtimes.LabelID]
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.deaths.watchers) == 0 || id == "" {
		return
	}
	if deleted {
		delete(r.deaths.reported, id)
		return
	}
	if pod.DeletionTimestamp != nil || r.deaths.reported[id] || instanceOf(pod).State != runtimes.StateExited {
		return
	}
	r.deaths.reported[id] = true
	for _, fn := range r.deaths.watchers {
		go fn(id)
	}
}
