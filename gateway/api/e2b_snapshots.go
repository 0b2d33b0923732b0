package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway"
)

// Snapshots and forks through the E2B door. E2B's snapshot is a template: its id is
// what a create names as templateID. The core's snapshot is one too (a create's
// snapshotId); the door answers once the core's background commit has ended, as E2B's
// calls do, and a fork once its copies have started.
//
// A named snapshot is E2B's namespaced template name, namespace/alias:tag. The namespace
// is the caller's tenant's (e2bNamespace), the tag "default" when none is given; the
// core keeps alias:tag as the snapshot's name. A name resolves only among the snapshots
// of the caller's own tenant, the newest Ready one of that name first: a name with
// another namespace resolves to nothing (404, as a name nobody has), so one tenant's
// names never reach another's snapshots, whatever the names.

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
	var name string
	if body.Name != "" {
		n, err := parseE2BName(body.Name)
		if err == nil && n.namespace != "" && n.namespace != e2bNamespace(c.Tenant) {
			err = fmt.Errorf("name %q: the namespace must be your own, %s", body.Name, e2bNamespace(c.Tenant))
		}
		if err != nil {
			h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "%v", err))
			return
		}
		if n.tag == "" {
			n.tag = e2bDefaultTag
		}
		name = n.alias + ":" + n.tag
	}
	snap, err := h.svc.State().CreateSnapshot(r.Context(), c, sb.ID, gateway.SnapshotRequest{Name: name})
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
	writeJSON(w, http.StatusCreated, e2bSnapshotOf(*snap, e2bNamespace(c.Tenant)))
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

// e2bSnapshotOf is the SnapshotInfo of v, a snapshot of namespace's tenant: a named
// one's id is namespace/alias:tag and its name namespace/alias, as E2B answers them;
// an unnamed one's id is the core's.
func e2bSnapshotOf(v gateway.SnapshotView, namespace string) e2bSnapshotInfo {
	if n, ok := e2bStoredName(v.Name); ok {
		return e2bSnapshotInfo{SnapshotID: namespace + "/" + n.alias + ":" + n.tag, Names: []string{namespace + "/" + n.alias}}
	}
	return e2bSnapshotInfo{SnapshotID: v.ID, Names: []string{}}
}

// e2bDefaultTag is the tag of a name that gives none.
const e2bDefaultTag = "default"

var (
	// e2bNamePartRe is a namespace or an alias of an E2B name; e2bTagRe a tag.
	e2bNamePartRe = regexp.MustCompile(`^[a-z0-9_-]+$`)
	e2bTagRe      = regexp.MustCompile(`^[a-z0-9_.-]+$`)
)

// e2bName is an E2B template name, [namespace/]alias[:tag], lower-cased; namespace and
// tag are empty when the name gives none.
type e2bName struct {
	namespace, alias, tag string
}

// parseE2BName reads s as an E2B template name.
func parseE2BName(s string) (e2bName, error) {
	var n e2bName
	ident, tag, hasTag := strings.Cut(strings.TrimSpace(s), ":")
	ns, alias, hasNS := strings.Cut(ident, "/")
	if !hasNS {
		ns, alias = "", ident
	}
	clean := func(v string) string { return strings.ToLower(strings.TrimSpace(v)) }
	n.alias, n.namespace, n.tag = clean(alias), clean(ns), clean(tag)
	switch {
	case !e2bNamePartRe.MatchString(n.alias):
		return n, fmt.Errorf("name %q: the alias must be letters, digits, '-' and '_'", s)
	case hasNS && !e2bNamePartRe.MatchString(n.namespace):
		return n, fmt.Errorf("name %q: the namespace must be letters, digits, '-' and '_'", s)
	case hasTag && !e2bTagRe.MatchString(n.tag):
		return n, fmt.Errorf("name %q: the tag must be letters, digits, '-', '_' and '.'", s)
	}
	return n, nil
}

// e2bStoredName reads a core snapshot's name as the door keeps one, alias:tag (a bare
// alias is of the default tag); ok is false for a name no E2B name leads to (made
// through the OpenSandbox door, or none).
func e2bStoredName(name string) (e2bName, bool) {
	if name == "" {
		return e2bName{}, false
	}
	n, err := parseE2BName(name)
	if err != nil || n.namespace != "" || strings.Contains(name, "/") {
		return e2bName{}, false
	}
	if n.tag == "" {
		n.tag = e2bDefaultTag
	}
	return n, true
}

// e2bNamespace is the namespace of tenant's names: its id when that is a valid
// namespace (tenants' ids are UUIDs), else a digest of it.
func e2bNamespace(tenant string) string {
	if e2bNamePartRe.MatchString(tenant) {
		return tenant
	}
	sum := sha256.Sum256([]byte(tenant))
	return "t-" + hex.EncodeToString(sum[:12])
}

// admits reports whether a snapshot named stored (its core name) answers to n: the same
// alias, and the same tag when n gives one (defaultTag stands in for a missing one
// when anyTag is false).
func (n e2bName) admits(stored string, anyTag bool) bool {
	got, ok := e2bStoredName(stored)
	if !ok || got.alias != n.alias {
		return false
	}
	if n.tag == "" {
		return anyTag || got.tag == e2bDefaultTag
	}
	return got.tag == n.tag
}

// e2bAnswersTo is the filter of the snapshots template names for caller: the one of
// that id (bare, or with the default tag: an unnamed snapshot's E2B id is id:default),
// else those of that name in the caller's namespace (anyTag: a name without a tag
// takes every tag, else only the default one). A name of another namespace, or that is
// no name, admits none.
func (h *Handler) e2bAnswersTo(c gateway.Caller, template string, anyTag bool) func(gateway.SnapshotView) bool {
	if id, ok := e2bSnapshotIDOf(template); ok {
		return func(v gateway.SnapshotView) bool { return v.ID == id }
	}
	n, err := parseE2BName(template)
	if err != nil || (n.namespace != "" && n.namespace != e2bNamespace(c.Tenant)) {
		return func(gateway.SnapshotView) bool { return false }
	}
	return func(v gateway.SnapshotView) bool { return n.admits(v.Name, anyTag) }
}

// e2bSnapshotsNamed are the caller's tenant's Ready snapshots template names
// (e2bAnswersTo), newest first.
func (h *Handler) e2bSnapshotsNamed(ctx context.Context, c gateway.Caller, template string, anyTag bool) ([]gateway.SnapshotView, error) {
	q := gateway.SnapshotQuery{States: []string{gateway.SnapshotReady}, Tenant: c.Tenant, Page: 1, PageSize: e2bMaxLimit,
		Admits: h.e2bAnswersTo(c, template, anyTag)}
	var out []gateway.SnapshotView
	for {
		page, err := h.svc.State().ListSnapshots(ctx, c, q)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if !page.Pagination.HasNextPage {
			return out, nil
		}
		q.Page++
	}
}

// e2bSnapshotIDOf is the core's snapshot id a template names when it is a snapshot id,
// bare or with the default tag (an unnamed snapshot's E2B id is id:default).
func e2bSnapshotIDOf(template string) (string, bool) {
	id, tag, hasTag := strings.Cut(template, ":")
	if _, err := uuid.Parse(id); err != nil || (hasTag && !strings.EqualFold(tag, e2bDefaultTag)) {
		return "", false
	}
	return id, true
}

// e2bListSnapshots is GET /snapshots?sandboxID=&name=&limit=&nextToken=: the caller's
// tenant's Ready snapshots (of that id, or of that name: any tag when it gives none),
// newest first, a page at a time (the next page's token in the x-next-token header).
func (h *Handler) e2bListSnapshots(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	q := r.URL.Query()
	sq := gateway.SnapshotQuery{SandboxID: q.Get("sandboxID"), States: []string{gateway.SnapshotReady}, Tenant: c.Tenant, Page: 1}
	if name := q.Get("name"); name != "" {
		sq.Admits = h.e2bAnswersTo(c, name, true)
	}
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
	out := make([]e2bSnapshotInfo, 0, len(page.Items))
	for _, v := range page.Items {
		out = append(out, e2bSnapshotOf(v, e2bNamespace(c.Tenant)))
	}
	writeJSON(w, http.StatusOK, out)
}

// e2bDeleteTemplate is DELETE /templates/{id}, which deletes a snapshot by id, or the
// caller's snapshots of a name (every tag of it when the name gives none): the door's
// other templates are the operator's configuration, not the caller's to delete.
func (h *Handler) e2bDeleteTemplate(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	template := r.PathValue("id")
	ids := []string{template}
	if id, ok := e2bSnapshotIDOf(template); ok {
		ids = []string{id}
	} else if _, err := parseE2BName(template); err == nil {
		named, err := h.e2bSnapshotsNamed(r.Context(), c, template, true)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		if len(named) == 0 {
			h.writeError(w, r, gateway.Errorf(gateway.KindNotFound, gateway.CodeSnapshotNotFound, "template %s not found", template))
			return
		}
		ids = ids[:0]
		for _, v := range named {
			ids = append(ids, v.ID)
		}
	}
	for _, id := range ids {
		if err := h.svc.State().DeleteSnapshot(r.Context(), c, id); err != nil {
			h.writeError(w, r, err)
			return
		}
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
