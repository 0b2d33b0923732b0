package agent

import (
	"sync"

	"github.com/google/uuid"
)

// registry holds the live sessions of one kind (bash sessions, terminals) by id.
type registry[T interface {
	comparable
	Close()
}] struct {
	mu sync.Mutex
	m  map[string]T
}

func newRegistry[T interface {
	comparable
	Close()
}]() *registry[T] {
	return &registry[T]{m: map[string]T{}}
}

// add keeps v under a new id and returns the id.
func (r *registry[T]) add(v T) string {
	id := uuid.NewString()
	r.mu.Lock()
	r.m[id] = v
	r.mu.Unlock()
	return id
}

// get returns the session of id, the zero T (nil) when there is none.
func (r *registry[T]) get(id string) T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

// remove forgets the session of id and returns it (the zero T when there was none).
func (r *registry[T]) remove(id string) T {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.m[id]
	delete(r.m, id)
	return v
}

// closeAll closes and forgets every session.
func (r *registry[T]) closeAll() {
	r.mu.Lock()
	all := r.m
	r.m = map[string]T{}
	r.mu.Unlock()
	for _, v := range all {
		v.Close()
	}
}
