package plugins

import (
	"context"
	"time"
)

// pool holds up to size instances of one plugin version. tokens counts live
// instances (idle or in use), so the pool never holds more than size.
type pool struct {
	tokens chan struct{}
	idle   chan *instance
}

func newPool(size int) *pool {
	return &pool{tokens: make(chan struct{}, size), idle: make(chan *instance, size)}
}

// get returns an idle instance, or creates one while under the bound, or
// waits for one to come back until ctx is done.
func (p *pool) get(ctx context.Context, create func() (*instance, error)) (*instance, error) {
	select {
	case inst := <-p.idle:
		return inst, nil
	default:
	}
	select {
	case inst := <-p.idle:
		return inst, nil
	case p.tokens <- struct{}{}:
		inst, err := create()
		if err != nil {
			<-p.tokens
			return nil, err
		}
		return inst, nil
	case <-ctx.Done():
		return nil, newError(CodeTimeout, ctx.Err(), "no free instance before the deadline (pool exhausted)")
	}
}

// tryReserve takes a token for an instance created in the background; it
// fails when the pool is full.
func (p *pool) tryReserve() bool {
	select {
	case p.tokens <- struct{}{}:
		return true
	default:
		return false
	}
}

// unreserve gives back a token whose instance could not be created.
func (p *pool) unreserve() { <-p.tokens }

// put returns a healthy instance for reuse.
func (p *pool) put(inst *instance) {
	inst.lastUsed = time.Now()
	p.idle <- inst
}

// trim closes the idle instances last used before cutoff. An instance in
// use is not idle, so it is never touched.
func (p *pool) trim(ctx context.Context, cutoff time.Time) {
	for range len(p.idle) {
		select {
		case inst := <-p.idle:
			if inst.lastUsed.Before(cutoff) {
				p.discard(ctx, inst)
			} else {
				p.idle <- inst
			}
		default:
			return
		}
	}
}

// size is the number of live instances, idle or in use.
func (p *pool) size() int { return len(p.tokens) }

// discard closes a failed instance and frees its place.
func (p *pool) discard(ctx context.Context, inst *instance) {
	inst.close(ctx)
	<-p.tokens
}

// drain closes every idle instance. The version is retired by then, so no
// instance is in use.
func (p *pool) drain(ctx context.Context) {
	for {
		select {
		case inst := <-p.idle:
			p.discard(ctx, inst)
		default:
			return
		}
	}
}
