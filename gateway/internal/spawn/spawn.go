// Package spawn owns the goroutines of a component that its Stop ends and waits for:
// the core's (gateway.Service) and its features' (gateway/pool, gateway/state, ...).
package spawn

import (
	"context"
	"sync"
	"time"
)

// everyRunTimeout bounds each run of a function Every calls.
const everyRunTimeout = 30 * time.Second

// Group starts a component's goroutines, tells them when the component stops (Done,
// Context) and waits for them (Stop). Its zero value is ready to use; it must not be
// copied after first use.
type Group struct {
	// initOnce makes done and ctx on first use, so that the zero value works.
	initOnce sync.Once
	done     chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc

	// mu orders Go against Close: once stopped is set, Go adds nothing to running, so
	// that no goroutine is added while Wait waits.
	mu      sync.Mutex
	stopped bool
	running sync.WaitGroup
}

func (g *Group) init() {
	g.initOnce.Do(func() {
		g.done = make(chan struct{})
		g.ctx, g.cancel = context.WithCancel(context.Background())
	})
}

// Done is closed when the group stops (Close or Stop).
func (g *Group) Done() <-chan struct{} {
	g.init()
	return g.done
}

// Context is cancelled when the group stops (Close or Stop): the context of work that
// outlives any request.
func (g *Group) Context() context.Context {
	g.init()
	return g.ctx
}

// Go runs fn in a goroutine that Wait waits for, unless the group has stopped: then it
// runs nothing and reports false.
func (g *Group) Go(fn func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return false
	}
	g.running.Add(1)
	go func() {
		defer g.running.Done()
		fn()
	}()
	return true
}

// GoAlways runs fn in a goroutine that Wait waits for, even when the group has
// stopped: for work that must run to its end once begun (a removal handed off, a
// counter to give back, a commit whose record says Creating). Unlike Go it is not
// ordered against Stop: one started while Wait waits with no other goroutine running
// may outlive that Wait (sync.WaitGroup's rule on Add), so it is safest from a
// goroutine the group already counts.
func (g *Group) GoAlways(fn func()) {
	g.running.Add(1)
	go func() {
		defer g.running.Done()
		fn()
	}()
}

// Every runs fn each interval in a goroutine started as Go starts one, until the
// group stops; each run gets a context bounded to 30 s.
func (g *Group) Every(interval time.Duration, fn func(context.Context)) bool {
	done := g.Done()
	return g.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), everyRunTimeout)
				fn(ctx)
				cancel()
			}
		}
	})
}

// Close stops the group without waiting: Go starts nothing after it, Done closes and
// Context is cancelled. It reports whether this call stopped the group (false when it
// had stopped already).
func (g *Group) Close() bool {
	g.init()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return false
	}
	g.stopped = true
	close(g.done)
	g.cancel()
	return true
}

// Wait waits for every goroutine the group started.
func (g *Group) Wait() { g.running.Wait() }

// Stop closes the group and waits for every goroutine it started; it may be called
// more than once.
func (g *Group) Stop() {
	g.Close()
	g.Wait()
}
