package plugins

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// slot is a tenant's plugin of one name across its versions: it owns the
// event queue and its worker, and the statistics, so that replacing the
// version loses neither events nor counters.
type slot struct {
	host         *Host
	tenant, name string
	current      atomic.Pointer[version]
	counters     counters

	queue   chan []byte
	stop    chan struct{} // closed by Remove/Close: drain the queue, then exit
	done    chan struct{} // closed when the worker has exited
	started bool          // guarded by Host.mu
	stopped bool          // guarded by Host.mu
}

func (s *slot) auditRejected() { s.counters.auditRejected.Add(1) }

// hasHook reports whether the current version declares hook.
func (s *slot) hasHook(hook string) bool {
	v := s.current.Load()
	return v != nil && slices.Contains(v.cfg.hooks, hook)
}

// start launches the event worker; Host.mu must be held.
func (s *slot) start() {
	if s.started {
		return
	}
	s.started = true
	s.queue = make(chan []byte, s.host.opts.QueueSize)
	s.stop = make(chan struct{})
	s.done = make(chan struct{})
	go s.work()
}

// stopWorker asks the worker to deliver what is queued and exit; Host.mu
// must be held.
func (s *slot) stopWorker() {
	if !s.started || s.stopped {
		return
	}
	s.stopped = true
	close(s.stop)
}

// enqueue queues an event without blocking; a full queue drops it.
func (s *slot) enqueue(event []byte) {
	select {
	case s.queue <- event:
	default:
		s.counters.drops.Add(1)
	}
}

func (s *slot) work() {
	defer close(s.done)
	for {
		select {
		case ev := <-s.queue:
			s.deliver(ev)
		case <-s.stop:
			for {
				select {
				case ev := <-s.queue:
					s.deliver(ev)
				default:
					if v := s.current.Swap(nil); v != nil {
						v.retire()
					}
					return
				}
			}
		}
	}
}

// deliver hands one event to the current version's on_event.
func (s *slot) deliver(event []byte) {
	defer func() {
		// Calls into modules recover their own panics; this guards the
		// worker against the host's bugs, so that one event cannot stop
		// the plugin's delivery for good.
		if r := recover(); r != nil {
			s.counters.fail(fmt.Errorf("plugins: deliver event: panic: %v", r))
		}
	}()
	if s.host.ctx.Err() != nil || len(event) > maxInput {
		s.counters.drops.Add(1) // Close ran out of time, or an oversized event
		return
	}
	v := s.acquire()
	if v == nil {
		s.counters.drops.Add(1)
		return
	}
	defer v.release()
	if !v.cfg.onEvent {
		return // the new version no longer wants events
	}
	v.invoke(s.host.ctx, HookOnEvent, event, false)
}

// acquire returns the current version, held so that it is not retired
// under the caller; nil when the plugin is gone.
func (s *slot) acquire() *version {
	for {
		v := s.current.Load()
		if v == nil {
			return nil
		}
		v.mu.RLock()
		if !v.retired {
			return v
		}
		v.mu.RUnlock()
	}
}

// version is one loaded module with its config and instance pool.
type version struct {
	slot     *slot
	info     Info
	cfg      resolved
	compiled *compiled
	pool     *pool

	// mu is read-held by every call in flight; retire takes it for writing,
	// so it waits for those calls and lets no new one start.
	mu      sync.RWMutex
	retired bool
}

func (v *version) release() { v.mu.RUnlock() }

// retire closes the version once its in-flight calls have returned. It
// does not block: Load and Remove call it with Host.mu held.
func (v *version) retire() {
	v.slot.host.background.Add(1)
	go func() {
		defer v.slot.host.background.Done()
		v.mu.Lock()
		v.retired = true
		v.mu.Unlock()
		ctx := context.Background()
		v.pool.drain(ctx)
		v.slot.host.releaseCompiled(ctx, v.compiled)
	}()
}

// invoke calls hook with input on a pooled instance, records the outcome,
// and returns the hook's output when wantOutput. The caller holds v
// (acquire). The plugin's deadline applies twice: to waiting for a free
// instance, then to the call itself; creating an instance is bounded by the
// init deadline instead, so a cold start does not eat into the call's time.
func (v *version) invoke(ctx context.Context, hook string, input []byte, wantOutput bool) ([]byte, error) {
	start := time.Now()
	out, err := v.invokeOn(ctx, hook, input, wantOutput)
	v.slot.counters.record(time.Since(start), err)
	if err != nil {
		v.slot.host.opts.Logger.Warn("plugin call failed", "tenant", v.info.Tenant, "plugin", v.info.Name,
			"version", v.info.Version, "hook", hook, "code", ErrorCode(err), "err", err)
	}
	return out, err
}

func (v *version) invokeOn(ctx context.Context, hook string, input []byte, wantOutput bool) ([]byte, error) {
	waitCtx, cancelWait := context.WithTimeout(ctx, v.cfg.timeout)
	inst, err := v.pool.get(waitCtx, func() (*instance, error) {
		return v.slot.host.instantiate(ctx, v.compiled, v.slot, v.cfg.settings)
	})
	cancelWait()
	if err != nil {
		return nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, v.cfg.timeout)
	defer cancel()
	fn := inst.onEvent
	if hook == HookDecideTTL {
		fn = inst.decideTTL
	}
	packed, err := inst.call(callCtx, fn, input)
	if err != nil {
		v.pool.discard(ctx, inst)
		v.replenish()
		return nil, err
	}
	var out []byte
	if wantOutput {
		out, err = inst.output(packed)
	}
	// A bad result is the plugin's logic error; the instance itself is fine.
	v.pool.put(inst)
	return out, err
}

// replenish creates an instance in the background after one was
// discarded, so that the next call does not pay for instantiation.
func (v *version) replenish() {
	if !v.pool.tryReserve() {
		return
	}
	// The caller holds v, so the retirement that Close waits for cannot
	// finish before this Add.
	v.slot.host.background.Add(1)
	go func() {
		defer v.slot.host.background.Done()
		v.mu.RLock()
		defer v.mu.RUnlock()
		if v.retired {
			v.pool.unreserve()
			return
		}
		inst, err := v.slot.host.instantiate(v.slot.host.ctx, v.compiled, v.slot, v.cfg.settings)
		if err != nil {
			v.pool.unreserve()
			v.slot.counters.fail(err)
			return
		}
		v.pool.put(inst)
	}()
}
