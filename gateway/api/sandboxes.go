package api

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway"
)

func (h *Handler) createSandbox(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var req gateway.CreateRequest
	if err := decodeJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	resp, err := h.svc.Create(r.Context(), c, req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, resp)
}

func (h *Handler) listSandboxes(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	q := r.URL.Query()
	lq, err := listQuery(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if lq.Page, err = intParam(q, "page", 1, 1, 1<<30); err != nil {
		h.writeError(w, r, err)
		return
	}
	if lq.PageSize, err = intParam(q, "pageSize", 20, 1, 200); err != nil {
		h.writeError(w, r, err)
		return
	}
	resp, err := h.svc.List(r.Context(), c, lq)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// listQuery reads the filters of a list (and of the live list): state (repeated or
// comma-separated) and metadata (URL-encoded k=v&k2=v2).
func listQuery(r *http.Request) (gateway.ListQuery, error) {
	q := r.URL.Query()
	lq := gateway.ListQuery{Page: 1, PageSize: 20}
	for _, st := range q["state"] {
		for _, part := range strings.Split(st, ",") {
			if part = strings.TrimSpace(part); part != "" {
				lq.States = append(lq.States, part)
			}
		}
	}
	if md := q.Get("metadata"); md != "" {
		parsed, err := url.ParseQuery(md)
		if err != nil {
			return lq, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "metadata filter %q: %v (want URL-encoded k=v&k2=v2)", md, err)
		}
		lq.Metadata = map[string]string{}
		for k, vs := range parsed {
			if k == "" {
				return lq, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "metadata filter %q: empty key", md)
			}
			lq.Metadata[k] = vs[len(vs)-1]
		}
	}
	return lq, nil
}

func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	s := q.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "%s %q: want an integer from %d to %d", name, s, lo, hi)
	}
	return n, nil
}

func (h *Handler) getSandbox(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	sb, err := h.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sb)
}

func (h *Handler) deleteSandbox(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	if err := h.svc.Delete(r.Context(), c, r.PathValue("id")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) patchMetadata(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var patch map[string]*string
	if err := decodeJSON(w, r, &patch); err != nil {
		h.writeError(w, r, err)
		return
	}
	sb, err := h.svc.PatchMetadata(r.Context(), c, r.PathValue("id"), patch)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sb)
}

func (h *Handler) pauseSandbox(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	if err := h.svc.Pause(r.Context(), c, r.PathValue("id")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func (h *Handler) resumeSandbox(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	if err := h.svc.Resume(r.Context(), c, r.PathValue("id")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func (h *Handler) renewSandbox(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var body struct {
		ExpiresAt *string `json:"expiresAt"`
	}
	if err := decodeJSON(w, r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	if body.ExpiresAt == nil {
		h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidExpiration, "expiresAt is required (RFC 3339)"))
		return
	}
	t, err := time.Parse(time.RFC3339Nano, *body.ExpiresAt)
	if err != nil {
		h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidExpiration, "expiresAt %q is not an RFC 3339 time", *body.ExpiresAt))
		return
	}
	exp, err := h.svc.Renew(r.Context(), c, r.PathValue("id"), t)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]time.Time{"expiresAt": exp})
}

func (h *Handler) getEndpoint(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	port, err := gateway.ParsePort(r.PathValue("port"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	q := gateway.EndpointQuery{RequestHost: r.Host, Scheme: "http"}
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		q.Scheme = "https"
	}
	if e := r.URL.Query().Get("expires"); e != "" {
		n, err := strconv.ParseInt(e, 10, 64)
		if err != nil {
			h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "expires %q: want unix seconds", e))
			return
		}
		t := time.Unix(n, 0)
		q.Expires = &t
	}
	ep, err := h.svc.GetEndpoint(r.Context(), c, r.PathValue("id"), port, q)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ep)
}

// rotateAccess replaces the sandbox's access secret: every access header handed out
// before stops working.
func (h *Handler) rotateAccess(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	if err := h.svc.RotateAccess(r.Context(), c, r.PathValue("id")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
