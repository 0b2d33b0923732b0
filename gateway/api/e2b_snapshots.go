package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/gateway"
)

// Snapshots and forks through the E2B door. E2B's snapshot is a template: its id is
// what a create names as templateID. The core's snapshot is one too (a create's
// snapshotId); the door answers once the core's background commit has ended, as E2B's
// calls do, and a fork once its copies have started.

// e2bSnapshotInfo is E2B's SnapshotInfo.
type e2bSnapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// e2bSnapshotBody is the body of POST /sandboxes/{id}/snapshots; E2B's memory mode is
// read and ignored (a snapshot keeps the filesystem only).
type e2bSnapshotBody struct {
	Name string `json:"name"`
}

// e2bSettlePoll is how often the door looks again at a snapshot being committed or a
// fork's copies starting.
const e2bSettlePoll = 200 * time.Millisecond

// e2bCreateSnapshot is POST /sandboxes/{id}/snapshots: 201 once the snapshot is Ready.
func (h *Handler) e2bCreateSnapshot(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var body e2bSnapshotBody
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &body); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	sb, _, err := h.e2bLookup(r, c)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	snap, err := h.svc.State().CreateSnapshot(r.Context(), c, sb.ID, gateway.SnapshotRequest{Name: body.Name})
	for err == nil && snap.Status.State == gateway.SnapshotCreating {
		if err = e2bSleep(r.Context()); err == nil {
			snap, err = h.svc.State().GetSnapshot(r.Context(), c, snap.ID)
		}
	}
	if err == nil && snap.Status.State != gateway.SnapshotReady {
		err = gateway.Errorf(gateway.KindInternal, gateway.CodeRuntimeError, "snapshot %s of sandbox %s is %s: %s", snap.ID, sb.ID, snap.Status.State, snap.Status.Message)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, e2bSnapshotOf(*snap))
}

// e2bSleep waits one poll, or answers the request's end.
func e2bSleep(ctx context.Context) error {
	t := time.NewTimer(e2bSettlePoll)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return gateway.Errorf(gateway.KindTimeout, gateway.CodeUnavailable, "the request ended before the work it started did: %v", ctx.Err())
	}
}

func e2bSnapshotOf(v gateway.SnapshotView) e2bSnapshotInfo {
	info := e2bSnapshotInfo{SnapshotID: v.ID, Names: []string{}}
	if v.Name != "" {
		info.Names = append(info.Names, v.Name)
	}
	return info
}

// e2bListSnapshots is GET /snapshots?sandboxID=&name=&limit=&nextToken=: the caller's
// Ready snapshots (of that name or id), newest first, a page at a time (the next page's
// token in the x-next-token header).
func (h *Handler) e2bListSnapshots(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	q := r.URL.Query()
	sq := gateway.SnapshotQuery{SandboxID: q.Get("sandboxID"), States: []string{gateway.SnapshotReady}, Page: 1}
	var err error
	if sq.PageSize, err = intParam(q, "limit", e2bDefaultLimit, 1, e2bMaxLimit); err != nil {
		h.writeError(w, r, err)
		return
	}
	if tok := q.Get("nextToken"); tok != "" {
		n, err := strconv.Atoi(tok)
		if err != nil || n < 2 {
			h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "nextToken %q is not one this gateway gave", tok))
			return
		}
		sq.Page = n
	}
	page, err := h.svc.State().ListSnapshots(r.Context(), c, sq)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if page.Pagination.HasNextPage {
		w.Header().Set("X-Next-Token", strconv.Itoa(sq.Page+1))
	}
	name := q.Get("name")
	out := make([]e2bSnapshotInfo, 0, len(page.Items))
	for _, v := range page.Items {
		if name == "" || v.Name == name || v.ID == name {
			out = append(out, e2bSnapshotOf(v))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// e2bDeleteTemplate is DELETE /templates/{id}, which deletes a snapshot: the door's
// other templates are the operator's configuration, not the caller's to delete.
func (h *Handler) e2bDeleteTemplate(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	if err := h.svc.State().DeleteSnapshot(r.Context(), c, r.PathValue("id")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bForkBody is the body of POST /sandboxes/{id}/fork.
type e2bForkBody struct {
	Timeout *int64 `json:"timeout"`
	Count   *int   `json:"count"`
}

// e2bForkResult is E2B's SandboxForkResult: a copy, or why it did not start.
type e2bForkResult struct {
	Sandbox *e2bSandbox `json:"sandbox,omitempty"`
	Error   *e2bError   `json:"error,omitempty"`
}

// e2bFork is POST /sandboxes/{id}/fork: the core's fork (a snapshot and a batch of
// copies of it), answered 201 once every copy has started or failed.
func (h *Handler) e2bFork(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var body e2bForkBody
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &body); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	count := 1
	if body.Count != nil {
		count = *body.Count
	}
	timeout, err := h.e2bTimeout(body.Timeout)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	sb, _, err := h.e2bLookup(r, c)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	b, err := h.svc.State().Fork(r.Context(), c, sb.ID, gateway.ForkRequest{Count: count, Timeout: &timeout, Metadata: sb.Metadata})
	for err == nil && !b.Done() {
		if err = e2bSleep(r.Context()); err == nil {
			b, err = h.svc.Batches().Get(r.Context(), c, b.ID, nil)
		}
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := make([]e2bForkResult, 0, len(b.Members))
	for _, m := range b.Members {
		if m.Status.State == gateway.StateRunning {
			if copyRec, err := h.svc.Lookup(r.Context(), c, m.ID); err == nil {
				s := h.e2bSandboxOf(copyRec)
				out = append(out, e2bForkResult{Sandbox: &s})
				continue
			}
		}
		why := m.Status.Message
		if m.Error != nil && m.Error.Message != "" {
			why = m.Error.Message
		}
		out = append(out, e2bForkResult{Error: &e2bError{Code: http.StatusInternalServerError, Message: "copy " + m.ID + " did not start: " + why}})
	}
	writeJSON(w, http.StatusCreated, out)
}
