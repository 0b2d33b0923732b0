package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/gateway"
)

// auditKeepAlive is how often an idle live stream sends a comment, so that proxies and
// clients keep the connection; auditPoll is how often it looks for records other
// replicas wrote (records this replica writes wake it at once).
const (
	auditKeepAlive = 15 * time.Second
	auditPoll      = time.Second
)

// readAudit reaches the event feature (Service.Events) when a request comes, not when
// the routes are built.
func (h *Handler) readAudit(ctx context.Context, c gateway.Caller, q gateway.AuditQuery) (*gateway.AuditPage, error) {
	return h.svc.Events().ReadAudit(ctx, c, q)
}

// auditQuery reads GET /v1/audit, a page of the tenant's audit stream: oldest first
// (order=newest for the reverse), at most limit (1–1000, default 100) records after the
// exclusive cursor; the answer's nextCursor continues in the same order.
func auditQuery(r *http.Request) (gateway.AuditQuery, error) {
	v := r.URL.Query()
	q := gateway.AuditQuery{Cursor: v.Get("cursor")}
	var err error
	q.Limit, q.Newest, err = pageParams(v)
	return q, err
}

// pageParams reads the paging parameters the audit and event routes share: limit
// (1–1000, 0 when absent) and order (oldest, the default, or newest).
func pageParams(v url.Values) (limit int, newest bool, err error) {
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			return 0, false, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "limit must be an integer between 1 and 1000, got %q", s)
		}
		limit = n
	}
	switch v.Get("order") {
	case "", "oldest":
	case "newest":
		newest = true
	default:
		return 0, false, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "order must be oldest or newest, got %q", v.Get("order"))
	}
	return limit, newest, nil
}

// streamAudit is the live audit stream (text/event-stream): one "audit" event per record,
// its id the record's cursor. It resumes after Last-Event-ID (or the cursor query
// parameter); without either it starts with the next record written.
func (h *Handler) streamAudit(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	ctx := r.Context()
	cursor := r.Header.Get("Last-Event-ID")
	if cursor == "" {
		cursor = r.URL.Query().Get("cursor")
	}
	if cursor != "" && !gateway.ValidAuditCursor(cursor) {
		h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "cursor %q is not a cursor this API returned", cursor))
		return
	}
	if cursor == "" {
		tail, err := h.svc.Events().AuditTail(ctx, c)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		cursor = tail
	}
	rc := startEventStream(w)
	if _, err := fmt.Fprint(w, "retry: 2000\n: audit stream\n\n"); err != nil {
		return
	}
	_ = rc.Flush()
	keepAlive := time.NewTicker(auditKeepAlive)
	defer keepAlive.Stop()
	poll := time.NewTicker(auditPoll)
	defer poll.Stop()
	for {
		// Take the wake-up channel before reading, so that a batch written in between
		// still wakes us.
		wake := h.svc.Events().AuditUpdates()
		page, err := h.svc.Events().ReadAudit(ctx, c, gateway.AuditQuery{Cursor: cursor, Limit: 100})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			h.log.Warn("audit stream read", "err", err)
		} else {
			for _, rec := range page.Items {
				data, _ := json.Marshal(rec)
				if _, err := fmt.Fprintf(w, "id: %s\nevent: audit\ndata: %s\n\n", rec.ID, data); err != nil {
					return
				}
				cursor = rec.ID
			}
			if len(page.Items) > 0 {
				if rc.Flush() != nil {
					return
				}
				keepAlive.Reset(auditKeepAlive)
			}
			if page.NextCursor != "" {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-poll.C:
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}
