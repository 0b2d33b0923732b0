package eventlog

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// auditStreamMax bounds each tenant's audit stream; older records are trimmed
// approximately, like the event stream.
const auditStreamMax = 100000

// auditQueueMax bounds the records waiting for the audit writer; more are dropped and
// counted.
const auditQueueMax = 8192

// AuditRecord is one entry of a tenant's audit stream.
type AuditRecord struct {
	// ID is the stream id; it is the cursor and the SSE event id.
	ID string `json:"id"`
	// Time is when the gateway received the record.
	Time time.Time `json:"time"`
	// Source is "plugin" for records a plugin emitted with emit_audit.
	Source string `json:"source"`
	// Record is the record itself, as the plugin wrote it.
	Record json.RawMessage `json:"record"`
}

// AuditPage is one page of the audit stream.
type AuditPage struct {
	Items []AuditRecord `json:"items"`
	// NextCursor continues the listing in the same order; absent at the end.
	NextCursor string `json:"nextCursor,omitempty"`
}

// AuditQuery selects a page: records after Cursor (a stream id; empty: from the start,
// or from the newest with Newest), at most Limit of them.
type AuditQuery struct {
	Cursor string
	Limit  int
	Newest bool
}

// auditEntry is a record waiting for the audit writer.
type auditEntry struct {
	tenant, source string
	at             time.Time
	record         []byte
}

// auditQueue holds the audit records waiting for the writer (runAuditWriter), which
// starts with the first use (runningAudit): the plugin host may record before the
// gateway starts.
type auditQueue struct {
	start sync.Once
	// entries wait here for the writer; full means dropped and counted.
	entries chan auditEntry
	dropped atomic.Int64
	// wake is closed (and replaced) after each batch written, waking SSE readers.
	wakeMu sync.Mutex
	wake   chan struct{}
}

// runningAudit is the audit queue, its writer started.
func (m *Manager) runningAudit() *auditQueue {
	q := &m.audit
	q.start.Do(func() {
		q.entries = make(chan auditEntry, auditQueueMax)
		q.wake = make(chan struct{})
		m.group.Go(func() { m.runAuditWriter(q) })
	})
	return q
}

// StartAudit starts the audit writer now rather than with the first record.
func (m *Manager) StartAudit() { m.runningAudit() }

func (m *Manager) auditStream(tenant string) string { return m.store.Key("audit", tenant) }

// RecordAudit takes an audit record a plugin of tenant emitted (the plugin host's Audit
// callback). It never blocks: records are written to the tenant's audit stream in
// batches in the background; a full queue drops and counts.
func (m *Manager) RecordAudit(tenant string, record []byte) {
	m.RecordAuditFrom(tenant, "plugin", time.Now().UTC(), record)
}

// RecordAuditFrom queues one audit record of source for tenant, received at at (see
// RecordAudit).
func (m *Manager) RecordAuditFrom(tenant, source string, at time.Time, record []byte) {
	q := m.runningAudit()
	select {
	case q.entries <- auditEntry{tenant: tenant, source: source, at: at, record: record}:
	default:
		if n := q.dropped.Add(1); n&(n-1) == 0 {
			m.log.Warn("audit records dropped: the writer is behind", "dropped", n)
		}
	}
}

// runAuditWriter appends queued audit records to their tenants' streams in pipelined
// batches and wakes live readers after each batch.
func (m *Manager) runAuditWriter(q *auditQueue) {
	batch := make([]auditEntry, 0, 256)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pipe := m.store.Client().Pipeline()
		for _, e := range batch {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: m.auditStream(e.tenant), MaxLen: auditStreamMax, Approx: true,
				Values: []any{"source", e.source, "time", e.at.Format(time.RFC3339Nano), "record", e.record}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			m.log.Warn("audit records lost", "count", len(batch), "err", err)
		}
		batch = batch[:0]
		q.wakeMu.Lock()
		close(q.wake)
		q.wake = make(chan struct{})
		q.wakeMu.Unlock()
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case ev := <-q.entries:
			batch = append(batch, ev)
			if len(batch) == cap(batch) {
				flush()
			}
		case <-t.C:
			flush()
		case <-m.group.Done():
			for len(q.entries) > 0 {
				batch = append(batch, <-q.entries)
			}
			flush()
			return
		}
	}
}

// AuditUpdates returns a channel closed when this replica next writes audit records; a
// live reader waits on it (and polls, for records other replicas write).
func (m *Manager) AuditUpdates() <-chan struct{} {
	q := m.runningAudit()
	q.wakeMu.Lock()
	defer q.wakeMu.Unlock()
	return q.wake
}

func invalid(format string, args ...any) *fault.Error {
	return fault.Errorf(fault.KindInvalid, fault.CodeInvalidParameter, format, args...)
}

// ReadAudit returns a page of the caller's tenant's audit stream, oldest first (or
// newest first with q.Newest); the cursor is exclusive.
func (m *Manager) ReadAudit(ctx context.Context, caller principal.Caller, q AuditQuery) (*AuditPage, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	if q.Limit > 1000 {
		return nil, invalid("limit must be between 1 and 1000, got %d", q.Limit)
	}
	if q.Cursor != "" && !ValidCursor(q.Cursor) {
		return nil, invalid("cursor %q is not a cursor this API returned", q.Cursor)
	}
	rdb := m.store.Client()
	var msgs []redis.XMessage
	var err error
	if q.Newest {
		end := "+"
		if q.Cursor != "" {
			end = "(" + q.Cursor
		}
		msgs, err = rdb.XRevRangeN(ctx, m.auditStream(caller.Tenant), end, "-", int64(q.Limit)+1).Result()
	} else {
		start := "-"
		if q.Cursor != "" {
			start = "(" + q.Cursor
		}
		msgs, err = rdb.XRangeN(ctx, m.auditStream(caller.Tenant), start, "+", int64(q.Limit)+1).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: read audit stream: %v", store.ErrUnavailable, err)
	}
	page := &AuditPage{Items: make([]AuditRecord, 0, min(len(msgs), q.Limit))}
	more := len(msgs) > q.Limit
	if more {
		msgs = msgs[:q.Limit]
	}
	for _, msg := range msgs {
		page.Items = append(page.Items, auditRecord(msg))
	}
	if more {
		page.NextCursor = msgs[len(msgs)-1].ID
	}
	return page, nil
}

func auditRecord(m redis.XMessage) AuditRecord {
	r := AuditRecord{ID: m.ID}
	r.Source, _ = m.Values["source"].(string)
	if at, ok := m.Values["time"].(string); ok {
		r.Time, _ = time.Parse(time.RFC3339Nano, at)
	}
	if rec, ok := m.Values["record"].(string); ok && json.Valid([]byte(rec)) {
		r.Record = json.RawMessage(rec)
	} else {
		r.Record = json.RawMessage("null")
	}
	return r
}

// AuditTail returns the stream id of the tenant's newest audit record ("0-0" when none),
// where a live reader with no cursor starts.
func (m *Manager) AuditTail(ctx context.Context, caller principal.Caller) (string, error) {
	msgs, err := m.store.Client().XRevRangeN(ctx, m.auditStream(caller.Tenant), "+", "-", 1).Result()
	if err != nil {
		return "", fmt.Errorf("%w: read audit stream: %v", store.ErrUnavailable, err)
	}
	if len(msgs) == 0 {
		return "0-0", nil
	}
	return msgs[0].ID, nil
}
