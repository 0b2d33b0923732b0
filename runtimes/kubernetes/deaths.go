package kubernetes

import (
	"context"
	"time"

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
	// evicted holds the last view of each pod the cluster evicted, which Inspect answers
	// once the pod is gone (an eviction by the API deletes it within its grace period,
	// often before the gateway asks), for evictionMemory.
	evicted map[string]evictedPod
}

type evictedPod struct {
	inst runtimes.Instance
	seen time.Time
}

// evictionMemory is how long an evicted pod's last view outlives the pod: several of
// the gateway's reconcile passes.
const evictionMemory = 10 * time.Minute

// rememberEviction keeps inst, the view of an evicted pod, and forgets those older than
// evictionMemory; under r.mu.
func (d *deathWatch) rememberEviction(id string, inst runtimes.Instance, now time.Time) {
	if d.evicted == nil {
		d.evicted = map[string]evictedPod{}
	}
	for k, e := range d.evicted {
		if now.Sub(e.seen) > evictionMemory {
			delete(d.evicted, k)
		}
	}
	d.evicted[id] = evictedPod{inst: inst, seen: now}
}

// evictedView is the last view of a pod the cluster evicted and removed, if it is
// remembered; under r.mu.
func (d *deathWatch) evictedView(id string, now time.Time) (runtimes.Instance, bool) {
	e, ok := d.evicted[id]
	if !ok || now.Sub(e.seen) > evictionMemory {
		return runtimes.Instance{}, false
	}
	return e.inst, true
}

// WatchDeaths reports, from the pod informer, each sandbox whose workload stopped or
// whose pod failed or was evicted, until ctx ends. A pod being deleted is not reported
// (the gateway's own removals) unless the cluster evicted it.
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
	if id == "" {
		return
	}
	inst := instanceOf(pod)
	r.mu.Lock()
	defer r.mu.Unlock()
	if inst.Evicted {
		r.deaths.rememberEviction(id, inst, time.Now())
	}
	if len(r.deaths.watchers) == 0 {
		return
	}
	if deleted {
		delete(r.deaths.reported, id)
		return
	}
	if (pod.DeletionTimestamp != nil && !inst.Evicted) || r.deaths.reported[id] || inst.State != runtimes.StateExited {
		return
	}
	r.deaths.reported[id] = true
	for _, fn := range r.deaths.watchers {
		go fn(id)
	}
}
