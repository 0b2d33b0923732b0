package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/gateway"
)

// sandboxListQuery reads GET /v1/sandboxes?state=&metadata=&page=&pageSize=: the list
// filters (listQuery) and the page.
func sandboxListQuery(r *http.Request) (gateway.ListQuery, error) {
	lq, err := listQuery(r)
	if err == nil {
		lq.Page, lq.PageSize, err = pageNumbers(r.URL.Query())
	}
	return lq, err
}

// listQuery reads the filters of a list (and of the live list): state (repeated or
// comma-separated) and metadata (URL-encoded k=v&k2=v2).
func listQuery(r *http.Request) (gateway.ListQuery, error) {
	q := r.URL.Query()
	lq := gateway.ListQuery{Page: 1, PageSize: gateway.DefaultPageSize}
	var err error
	if lq.States, err = stateParam(q, gateway.SandboxStates); err != nil {
		return lq, err
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

// rotateAccess replaces a sandbox's access secret (the access feature's RotateAccess).
// The route table names it rather than h.svc.Access().RotateAccess, which would ask the
// Service for its feature while the table is built (the OpenAPI test builds it with none).
func (h *Handler) rotateAccess(ctx context.Context, c gateway.Caller, id string) error {
	return h.svc.Access().RotateAccess(ctx, c, id)
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

// endpointQuery is how r reached the gateway, which the endpoints it answers name.
func endpointQuery(r *http.Request) gateway.EndpointQuery {
	q := gateway.EndpointQuery{RequestHost: r.Host, Scheme: "http"}
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		q.Scheme = "https"
	}
	return q
}

// createBatch is POST /batches: its answer gives each Running member's agent endpoint,
// so that a client reaches the members without an endpoint call each.
func (h *Handler) createBatch(w http.ResponseWriter, r *http.Request, c gateway.Caller) (int, any, error) {
	q := endpointQuery(r)
	return decodeAndCall(http.StatusAccepted, func(ctx context.Context, c gateway.Caller, req gateway.BatchRequest) (*gateway.BatchView, error) {
		return h.svc.Batches().Create(ctx, c, req, &q)
	})(w, r, c)
}

// getBatch is GET /batches/{id}; with agentEndpoints=true the Running members' agent
// endpoints too (for members that came up cold after the create answered).
func (h *Handler) getBatch(_ http.ResponseWriter, r *http.Request, c gateway.Caller) (int, any, error) {
	var at *gateway.EndpointQuery
	if v := r.URL.Query().Get("agentEndpoints"); v != "" {
		want, err := strconv.ParseBool(v)
		if err != nil {
			return 0, nil, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "agentEndpoints %q: want true or false", v)
		}
		if want {
			q := endpointQuery(r)
			at = &q
		}
	}
	b, err := h.svc.Batches().Get(r.Context(), c, r.PathValue("id"), at)
	return http.StatusOK, b, err
}

func (h *Handler) getEndpoint(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	port, err := gateway.ParsePort(r.PathValue("port"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	q := endpointQuery(r)
	if e := r.URL.Query().Get("expires"); e != "" {
		n, err := strconv.ParseInt(e, 10, 64)
		if err != nil {
			h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "expires %q: want unix seconds", e))
			return
		}
		t := time.Unix(n, 0)
		q.Expires = &t
	}
	h.answer(w, r, http.StatusOK)(h.svc.GetEndpoint(r.Context(), c, r.PathValue("id"), port, q))
}
