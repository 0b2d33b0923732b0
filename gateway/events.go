package gateway

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
)

// The event API: a tenant's event stream (sandbox lifecycle, agent calls, preview
// accesses, policy decisions) read page by page with filters, or followed live. It is
// what a console shows as a sandbox's recent activity and as the audit log.

// Event is one entry of a tenant's event stream, as ReadEvents and FollowEvents return it
// (and as plugins receive it).
type Event = store.Event

// eventScanMax bounds how many stream entries one page request reads while filtering;
// past it the page ends early with a cursor to continue from.
const eventScanMax = 20000

// EventQuery selects events of one tenant.
type EventQuery struct {
	Tenant  string
	Sandbox string
	// Types and Exclude are type prefixes ("sandbox." matches sandbox.created); an event
	// must match one of Types (when any) and none of Exclude.
	Types   []string
	Exclude []string
	Cursor  string
	Limit   int
	Newest  bool
}

// Matches reports whether ev passes the query's filters.
func (q EventQuery) Matches(ev store.Event) bool {
	if q.Sandbox != "" && ev.SandboxID != q.Sandbox {
		return false
	}
	for _, p := range q.Exclude {
		if strings.HasPrefix(ev.Type, p) {
			return false
		}
	}
	if len(q.Types) == 0 {
		return true
	}
	for _, p := range q.Types {
		if strings.HasPrefix(ev.Type, p) {
			return true
		}
	}
	return false
}

// EventPage is one page of events.
type EventPage struct {
	Items []store.Event `json:"items"`
	// NextCursor continues in the same order; absent at the end of the stream.
	NextCursor string `json:"nextCursor,omitempty"`
}

// ReadEvents returns a page of a tenant's events after the exclusive cursor, oldest
// first (newest first with Newest), filtered.
func (s *Service) ReadEvents(ctx context.Context, q EventQuery) (*EventPage, error) {
	if q.Limit <= 0 || q.Limit > 1000 {
		q.Limit = 100
	}
	page := &EventPage{Items: []store.Event{}}
	cursor, scanned := q.Cursor, 0
	const chunk = 500
	for scanned < eventScanMax {
		var evs []store.Event
		var err error
		if q.Newest {
			evs, err = s.store.ReadEventsBefore(ctx, q.Tenant, cursor, chunk)
		} else {
			evs, err = s.store.ReadEvents(ctx, q.Tenant, cursor, chunk)
		}
		if err != nil {
			return nil, err
		}
		for _, ev := range evs {
			scanned++
			cursor = ev.ID
			if q.Matches(ev) {
				page.Items = append(page.Items, ev)
				if len(page.Items) == q.Limit {
					page.NextCursor = cursor
					return page, nil
				}
			}
		}
		if len(evs) < chunk {
			return page, nil // end of the stream
		}
	}
	page.NextCursor = cursor
	return page, nil
}

// eventWait is how long one blocking read of a live event stream waits.
const eventWait = 5 * time.Second

// FollowEvents calls send with every event of the query written after the exclusive
// cursor ("" = from now on), as they are written on any gateway, until ctx ends or send
// fails. idle is called when nothing came for a while (keep-alives).
func (s *Service) FollowEvents(ctx context.Context, q EventQuery, idle func() error, send func(store.Event) error) error {
	cursor := q.Cursor
	if cursor == "" {
		last, err := s.store.LastEventID(ctx, q.Tenant)
		if err != nil {
			return err
		}
		cursor = last
	}
	quiet := time.Now()
	for ctx.Err() == nil {
		evs, err := s.store.WaitEvents(ctx, q.Tenant, cursor, eventWait, 200)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Warn("event stream read", "tenant", q.Tenant, "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
		for _, ev := range evs {
			cursor = ev.ID
			if q.Matches(ev) {
				if err := send(ev); err != nil {
					return err
				}
				quiet = time.Now()
			}
		}
		if time.Since(quiet) >= 15*time.Second {
			if err := idle(); err != nil {
				return err
			}
			quiet = time.Now()
		}
	}
	return nil
}

// RecordAgentCall notes, for the audit stream and plugins, a call that starts work in a
// sandbox: a command, a code cell or a file upload through the agent API.
func (s *Service) RecordAgentCall(sb *store.Sandbox, typ string, data map[string]any) {
	ev := store.Event{Type: typ, Tenant: sb.Tenant, SandboxID: sb.ID, Time: time.Now().UTC(), Data: data}
	s.queueEvent(ev)
}

// queueEvent hands ev to the batched event writer without blocking; when the queue is
// full the event is dropped and counted. The writer drains the queue into its backlog
// while Redis is away (runEventWriter), so an outage alone does not fill it.
func (s *Service) queueEvent(ev store.Event) {
	if !s.events.push(ev) {
		s.events.dropped.Add(1)
	}
}

// publishEvent hands ev to the tenant's on_event plugins. It never blocks: the host
// queues the event per plugin and drops (and counts) what does not fit.
func (s *Service) publishEvent(ev store.Event) { s.tenantPlugins.Publish(ev) }

// publishEvents hands a batch of events to their tenants' on_event plugins.
func (s *Service) publishEvents(evs []store.Event) {
	for _, ev := range evs {
		s.publishEvent(ev)
	}
}

func (s *Service) emit(ctx context.Context, sb *store.Sandbox, typ string, data map[string]any) {
	ev := store.Event{Type: typ, Tenant: sb.Tenant, SandboxID: sb.ID, Time: time.Now().UTC(), Data: data}
	if _, err := s.store.AppendEvent(context.WithoutCancel(ctx), ev); err != nil {
		s.log.Warn("append event", "type", typ, "sandbox", sb.ID, "err", err)
	}
	s.publishEvent(ev)
}

// emitAll writes several events in one round trip (a batch claim's sandbox.created).
func (s *Service) emitAll(ctx context.Context, evs []store.Event) {
	if len(evs) == 0 {
		return
	}
	if err := s.store.AppendEvents(context.WithoutCancel(ctx), evs); err != nil {
		s.log.Warn("append events", "count", len(evs), "type", evs[0].Type, "err", err)
	}
	s.publishEvents(evs)
}

// emitPerSandbox writes ev once for each of members, as its SandboxID, in one round
// trip (a batch claim's sandbox.created), before the caller answers, as emitAll does.
func (s *Service) emitPerSandbox(ctx context.Context, ev store.Event, members []*store.Sandbox) {
	ids := make([]string, len(members))
	for i, sb := range members {
		ids[i] = sb.ID
	}
	if err := s.store.AppendPerSandbox(context.WithoutCancel(ctx), ev, ids); err != nil {
		s.log.Warn("append events", "count", len(ids), "type", ev.Type, "err", err)
	}
	for _, id := range ids {
		e := ev
		e.SandboxID = id
		s.publishEvent(e)
	}
}

// Bounds of the event queue (queueEvent): the writer takes a batch when eventBatch
// events are waiting, or at its next tick; beyond eventQueueMax waiting events new
// ones are dropped and counted.
const (
	eventBatch    = 256
	eventQueueMax = 8192
)

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

// eventBacklogMax bounds the events kept in memory while Redis cannot take them (about
// 300 bytes each); beyond it the oldest are dropped and counted.
const eventBacklogMax = 50000

// runEventWriter writes queued events (proxied requests' access events, agent calls,
// audit and MCP records) to Redis in pipelined batches, and at each flush the access
// feature's activity (access.Manager.FlushActivity). While Redis is unreachable they are
// kept (up to eventBacklogMax, oldest dropped first) and written once it answers again,
// in their order; live subscribers (plugins, event streams of this gateway) get each
// event once, when it is first taken from the queue. A batch that failed half-way is
// written again whole, so an event may be stored twice after an outage, never lost
// while the backlog has room.
func (s *Service) runEventWriter() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		var backlog []store.Event
		fresh := make([]store.Event, 0, 256)
		lost := int64(0)
		flush := func() {
			s.access.FlushActivity()
			if len(fresh) > 0 {
				s.publishEvents(fresh)
				backlog = append(backlog, fresh...)
				fresh = fresh[:0]
			}
			if over := len(backlog) - eventBacklogMax; over > 0 {
				backlog = append(backlog[:0:0], backlog[over:]...)
				s.events.dropped.Add(int64(over))
				lost += int64(over)
			}
			for len(backlog) > 0 {
				n := min(len(backlog), 512)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := s.store.AppendEvents(ctx, backlog[:n])
				cancel()
				if err != nil {
					if !errors.Is(err, store.ErrUnavailable) {
						s.log.Warn("access events lost", "count", n, "err", err)
						backlog = backlog[n:]
						continue
					}
					if !errors.Is(err, store.ErrFailFast) {
						s.log.Debug("redis unreachable: access events kept for later", "pending", len(backlog))
					}
					return
				}
				backlog = backlog[n:]
			}
			backlog = nil // release a backlog grown during an outage
			if lost > 0 {
				s.log.Warn("access events dropped while redis was unreachable (backlog full)", "count", lost)
				lost = 0
			}
		}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.events.wake:
				fresh = s.events.take(fresh)
				flush()
			case <-t.C:
				fresh = s.events.take(fresh)
				flush()
			case <-s.stop:
				fresh = s.events.take(fresh)
				flush()
				if len(backlog) > 0 {
					s.log.Warn("access events lost at shutdown: redis unreachable", "count", len(backlog))
				}
				return
			}
		}
	}()
}
