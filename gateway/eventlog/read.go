package eventlog

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
)

// ScanMax bounds how many stream entries one page request reads while filtering; past
// it the page ends early with a cursor to continue from.
const ScanMax = 20000

// followWait is how long one blocking read of a live event stream waits.
const followWait = 5 * time.Second

// followKeepAlive is how long a follower may go without an event before idle is called.
const followKeepAlive = 15 * time.Second

// Query selects events of one tenant.
type Query struct {
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
func (q Query) Matches(ev store.Event) bool {
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

// Page is one page of events.
type Page struct {
	Items []store.Event `json:"items"`
	// NextCursor continues in the same order; absent at the end of the stream.
	NextCursor string `json:"nextCursor,omitempty"`
}

// ValidCursor reports whether c is a stream id ("ms-seq" or "ms"), the cursor of both
// the event and the audit streams.
func ValidCursor(c string) bool {
	ms, seq, found := strings.Cut(c, "-")
	if _, err := strconv.ParseUint(ms, 10, 64); err != nil {
		return false
	}
	if found {
		if _, err := strconv.ParseUint(seq, 10, 64); err != nil {
			return false
		}
	}
	return true
}

// Read returns a page of a tenant's events after the exclusive cursor, oldest first
// (newest first with Newest), filtered.
func (m *Manager) Read(ctx context.Context, q Query) (*Page, error) {
	if q.Limit <= 0 || q.Limit > 1000 {
		q.Limit = 100
	}
	page := &Page{Items: []store.Event{}}
	cursor, scanned := q.Cursor, 0
	const chunk = 500
	for scanned < ScanMax {
		var evs []store.Event
		var err error
		if q.Newest {
			evs, err = m.store.ReadEventsBefore(ctx, q.Tenant, cursor, chunk)
		} else {
			evs, err = m.store.ReadEvents(ctx, q.Tenant, cursor, chunk)
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

// Follow calls send with every event of the query written after the exclusive cursor
// ("" = from now on), as they are written on any gateway, until ctx ends or send fails.
// idle is called when nothing came for a while (keep-alives).
func (m *Manager) Follow(ctx context.Context, q Query, idle func() error, send func(store.Event) error) error {
	cursor := q.Cursor
	if cursor == "" {
		last, err := m.store.LastEventID(ctx, q.Tenant)
		if err != nil {
			return err
		}
		cursor = last
	}
	quiet := time.Now()
	for ctx.Err() == nil {
		evs, err := m.store.WaitEvents(ctx, q.Tenant, cursor, followWait, 200)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			m.log.Warn("event stream read", "tenant", q.Tenant, "err", err)
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
		if time.Since(quiet) >= followKeepAlive {
			if err := idle(); err != nil {
				return err
			}
			quiet = time.Now()
		}
	}
	return nil
}
