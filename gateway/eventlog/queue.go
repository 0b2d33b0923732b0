package eventlog

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
)

// Bounds of the event queue (Queue): the writer takes a batch when eventBatch events
// are waiting, or at its next tick; beyond eventQueueMax waiting events new ones are
// dropped and counted.
const (
	eventBatch    = 256
	eventQueueMax = 8192
)

// eventBacklogMax bounds the events kept in memory while Redis cannot take them (about
// 300 bytes each); beyond it the oldest are dropped and counted.
const eventBacklogMax = 50000

// writerTick is how often the writer flushes what is queued when no batch filled up.
const writerTick = 100 * time.Millisecond

// eventQueue holds events for the batched writer (runEventWriter). A request appends
// under a lock and wakes the writer only once per eventBatch: a channel send per event
// woke the writer's goroutine (and often an idle thread) on every proxied request.
type eventQueue struct {
	mu      sync.Mutex
	pending []store.Event
	wake    chan struct{} // capacity 1: a batch is ready
	// dropped counts the events refused by a full queue or a full backlog.
	dropped atomic.Int64
}

// push queues ev; false when the queue is full.
func (q *eventQueue) push(ev store.Event) bool {
	q.mu.Lock()
	if len(q.pending) >= eventQueueMax {
		q.mu.Unlock()
		return false
	}
	q.pending = append(q.pending, ev)
	full := len(q.pending) == eventBatch
	q.mu.Unlock()
	if full {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// take appends the waiting events to dst, oldest first, and empties the queue.
func (q *eventQueue) take(dst []store.Event) []store.Event {
	q.mu.Lock()
	dst = append(dst, q.pending...)
	if cap(q.pending) > 4*eventBatch {
		q.pending = nil // release a queue grown while the writer waited for Redis
	} else {
		clear(q.pending)
		q.pending = q.pending[:0]
	}
	q.mu.Unlock()
	return dst
}

// Queue hands ev to the batched event writer without blocking; when the queue is full
// the event is dropped and counted. The writer drains the queue into its backlog while
// Redis is away (runEventWriter), so an outage alone does not fill it.
func (m *Manager) Queue(ev store.Event) {
	if !m.events.push(ev) {
		m.events.dropped.Add(1)
	}
}

// RecordAgentCall notes, for the event stream and plugins, a call that starts work in a
// sandbox: a command, a code cell or a file upload through the agent API.
func (m *Manager) RecordAgentCall(sb *store.Sandbox, typ string, data map[string]any) {
	m.Queue(store.Event{Type: typ, Tenant: sb.Tenant, SandboxID: sb.ID, Time: time.Now().UTC(), Data: data})
}

// runEventWriter writes queued events (proxied requests' access events, agent calls,
// audit and MCP records) to Redis in pipelined batches, and at each flush the access
// feature's activity (Host.FlushActivity). While Redis is unreachable they are kept (up
// to eventBacklogMax, oldest dropped first) and written once it answers again, in their
// order; live subscribers (plugins) get each event once, when it is first taken from the
// queue. A batch that failed half-way is written again whole, so an event may be stored
// twice after an outage, never lost while the backlog has room.
func (m *Manager) runEventWriter() {
	var backlog []store.Event
	fresh := make([]store.Event, 0, 256)
	lost := int64(0)
	flush := func() {
		m.host.FlushActivity()
		if len(fresh) > 0 {
			for _, ev := range fresh {
				m.host.PublishEvent(ev)
			}
			backlog = append(backlog, fresh...)
			fresh = fresh[:0]
		}
		if over := len(backlog) - eventBacklogMax; over > 0 {
			backlog = append(backlog[:0:0], backlog[over:]...)
			m.events.dropped.Add(int64(over))
			lost += int64(over)
		}
		for len(backlog) > 0 {
			n := min(len(backlog), 512)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := m.store.AppendEvents(ctx, backlog[:n])
			cancel()
			if err != nil {
				if !errors.Is(err, store.ErrUnavailable) {
					m.log.Warn("access events lost", "count", n, "err", err)
					backlog = backlog[n:]
					continue
				}
				if !errors.Is(err, store.ErrFailFast) {
					m.log.Debug("redis unreachable: access events kept for later", "pending", len(backlog))
				}
				return
			}
			backlog = backlog[n:]
		}
		backlog = nil // release a backlog grown during an outage
		if lost > 0 {
			m.log.Warn("access events dropped while redis was unreachable (backlog full)", "count", lost)
			lost = 0
		}
	}
	t := time.NewTicker(writerTick)
	defer t.Stop()
	for {
		select {
		case <-m.events.wake:
			fresh = m.events.take(fresh)
			flush()
		case <-t.C:
			fresh = m.events.take(fresh)
			flush()
		case <-m.group.Done():
			fresh = m.events.take(fresh)
			flush()
			if len(backlog) > 0 {
				m.log.Warn("access events lost at shutdown: redis unreachable", "count", len(backlog))
			}
			return
		}
	}
}
