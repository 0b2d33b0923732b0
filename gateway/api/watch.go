package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sandgate/sandgate/gateway"
)

// watchKeepAlive is how often an idle live list sends a comment.
const watchKeepAlive = 15 * time.Second

// watchSandboxes is GET /v1/sandboxes/watch: the caller's sandboxes that pass the list
// filters (state, metadata) as a text/event-stream. First one "sandbox" event per
// sandbox, then "ready"; then "sandbox" on every change and "deleted" ({"id"}) when one
// is removed or no longer passes the filter. Changes come from Redis, so a change made
// through any gateway shows.
func (h *Handler) watchSandboxes(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	q, err := listQuery(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	filter := gateway.WatchFilter{States: q.States, Metadata: q.Metadata}
	ctx := r.Context()
	// Register first, list second: a change in between arrives as a notice.
	feed := h.svc.Changes()
	watcher := feed.Watch()
	defer watcher.Close()
	items, err := feed.Snapshot(ctx, c, filter)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	rc := startEventStream(w)
	shown := map[string]bool{}
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil {
		return
	}
	for _, rec := range items {
		if !writeEvent(w, "sandbox", gateway.View(rec)) {
			return
		}
		shown[rec.ID] = true
	}
	if !writeEvent(w, "ready", struct{}{}) || rc.Flush() != nil {
		return
	}
	keepAlive := time.NewTicker(watchKeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil || rc.Flush() != nil {
				return
			}
			continue
		case <-watcher.Resync:
			// Fell behind or Redis reconnected: list again and send the difference.
			items, err := feed.Snapshot(ctx, c, filter)
			if err != nil {
				h.log.Warn("watch resync", "err", err)
				continue
			}
			now := map[string]bool{}
			for _, rec := range items {
				now[rec.ID] = true
				if !writeEvent(w, "sandbox", gateway.View(rec)) {
					return
				}
			}
			for id := range shown {
				if !now[id] && !writeEvent(w, "deleted", map[string]string{"id": id}) {
					return
				}
			}
			shown = now
		case id := <-watcher.C:
			rec, err := feed.Lookup(ctx, c, id)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				h.log.Warn("watch lookup", "sandbox", id, "err", err)
				continue
			}
			switch {
			case rec != nil && filter.Matches(rec):
				shown[id] = true
				if !writeEvent(w, "sandbox", gateway.View(rec)) {
					return
				}
			case shown[id]:
				delete(shown, id)
				if !writeEvent(w, "deleted", map[string]string{"id": id}) {
					return
				}
			default:
				continue
			}
		}
		if rc.Flush() != nil {
			return
		}
		keepAlive.Reset(watchKeepAlive)
	}
}
