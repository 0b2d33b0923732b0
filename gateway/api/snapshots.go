package api

import (
	"context"
	"net/http"

	"github.com/sandgate/sandgate/gateway"
)

// createSnapshot serves POST /v1/sandboxes/{id}/snapshots; the body ({name?}) may be empty.
func (h *Handler) createSnapshot(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var req gateway.SnapshotRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &req); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	h.answer(w, r, http.StatusAccepted)(h.svc.State().CreateSnapshot(r.Context(), c, r.PathValue("id"), req))
}

// snapshotListQuery reads GET /v1/snapshots?sandboxId=&state=&page=&pageSize=.
func snapshotListQuery(r *http.Request) (gateway.SnapshotQuery, error) {
	q := r.URL.Query()
	sq := gateway.SnapshotQuery{SandboxID: q.Get("sandboxId")}
	var err error
	if sq.States, err = stateParam(q, gateway.SnapshotStates); err != nil {
		return sq, err
	}
	sq.Page, sq.PageSize, err = pageNumbers(q)
	return sq, err
}

// The snapshot and fork routes below reach the state feature (Service.State) when a
// request comes, not when the routes are built.

func (h *Handler) fork(ctx context.Context, c gateway.Caller, id string, req gateway.ForkRequest) (*gateway.BatchView, error) {
	return h.svc.State().Fork(ctx, c, id, req)
}

func (h *Handler) listSnapshots(ctx context.Context, c gateway.Caller, q gateway.SnapshotQuery) (*gateway.SnapshotList, error) {
	return h.svc.State().ListSnapshots(ctx, c, q)
}

func (h *Handler) getSnapshot(ctx context.Context, c gateway.Caller, id string) (*gateway.SnapshotView, error) {
	return h.svc.State().GetSnapshot(ctx, c, id)
}

func (h *Handler) deleteSnapshot(ctx context.Context, c gateway.Caller, id string) error {
	return h.svc.State().DeleteSnapshot(ctx, c, id)
}
