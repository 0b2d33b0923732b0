package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/internal/listing"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
)

// SandboxRecord is the record of one sandbox as the core keeps it (in Redis, served
// through the record cache), which Lookup hands to the proxy; Sandbox is its API view.
type SandboxRecord = store.Sandbox

// Sandbox states of the OpenSandbox protocol.
const (
	// StatePending: created or claimed, not yet answering (a cold start, a late binding).
	StatePending = "Pending"
	// StateRunning: its agent answers; the proxy serves it.
	StateRunning = "Running"
	// StatePaused: frozen by pause (or idle pause); resume or the next request thaws it.
	StatePaused = "Paused"
	// StateTerminated: deleted or expired; the record stays a while for readers.
	StateTerminated = "Terminated"
	// StateFailed: it did not start, or its container vanished; Reason says which.
	StateFailed = "Failed"
	// StateStopping: its delete is under way (deleting.go); the record goes when the
	// delete completes, and nothing reports the sandbox failed meanwhile.
	StateStopping = "Stopping"
	// StatePausing and StateResuming are the protocol's transitional states. The core
	// never records them (a pause or resume completes within its request); they are
	// named for clients that match on every state.
	StatePausing, StateResuming = "Pausing", "Resuming"
)

// SandboxStates are every state a sandbox can be listed in, for the list's filter.
var SandboxStates = []string{StatePending, StateRunning, StatePausing, StatePaused, StateResuming, StateStopping, StateTerminated, StateFailed}

// Status is a sandbox's state with its explanation, and Pagination one page of a list:
// shapes the Go SDK reads too, declared once in the leaf package apiproto.
type (
	Status     = apiproto.Status
	Pagination = apiproto.Pagination
)

// Sandbox is the API view of a sandbox.
type Sandbox struct {
	ID         string            `json:"id"`
	Image      ImageSpec         `json:"image"`
	Status     Status            `json:"status"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Entrypoint []string          `json:"entrypoint"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
	// SnapshotID is present when the sandbox was created from a snapshot.
	SnapshotID string `json:"snapshotId,omitempty"`
	// Extensions are the record's extensions, for a door that answers from them (the
	// E2B door's template); OpenSandbox's Sandbox does not carry them.
	Extensions map[string]string `json:"-"`
}

// Endpoint tells a client where one port of a sandbox is reached and with which headers
// (declared in apiproto, for the gateway and the Go SDK alike).
type Endpoint = apiproto.Endpoint

// Caller is who makes a request, as authenticated by the HTTP layer (principal.Caller).
type Caller = principal.Caller

// View turns a record into its API form.
func View(sb *store.Sandbox) Sandbox {
	t := sb.LastTransitionAt
	return Sandbox{
		ID:         sb.ID,
		Image:      ImageSpec{URI: sb.Image},
		Status:     Status{State: sb.State, Reason: sb.Reason, Message: sb.Message, LastTransitionAt: &t},
		Metadata:   sb.Metadata,
		Entrypoint: sb.Entrypoint,
		ExpiresAt:  sb.ExpiresAt,
		CreatedAt:  sb.CreatedAt,
		SnapshotID: sb.SnapshotID,
		Extensions: sb.Extensions,
	}
}

// Lookup returns the record of a sandbox the caller may see; another tenant's is not found.
func (s *Service) Lookup(ctx context.Context, caller Caller, id string) (*store.Sandbox, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, notFound(id)
	}
	sb, err := s.store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, err
	}
	if !caller.Admin && sb.Tenant != caller.Tenant {
		return nil, notFound(id)
	}
	return sb, nil
}

// lookupRouted is Lookup served from the route cache while its record is fresh (as the
// proxy routes): a batch's members ask for their endpoints right after the claim put
// their records there, and need no Redis read each.
func (s *Service) lookupRouted(ctx context.Context, caller Caller, id string) (*store.Sandbox, error) {
	if sb, fresh := s.feed.Fresh(id); fresh {
		if !caller.Admin && sb.Tenant != caller.Tenant {
			return nil, notFound(id)
		}
		return sb, nil
	}
	return s.Lookup(ctx, caller, id)
}

// Get returns one sandbox.
func (s *Service) Get(ctx context.Context, caller Caller, id string) (*Sandbox, error) {
	sb, err := s.Lookup(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	v := View(sb)
	return &v, nil
}

// ListQuery filters and pages a list.
type ListQuery struct {
	States   []string
	Metadata map[string]string
	Page     int
	PageSize int
}

// ListResponse is the body of GET /v1/sandboxes.
type ListResponse struct {
	Items      []Sandbox  `json:"items"`
	Pagination Pagination `json:"pagination"`
}

// List returns the caller's sandboxes, newest first, filtered and paged.
func (s *Service) List(ctx context.Context, caller Caller, q ListQuery) (*ListResponse, error) {
	all, err := s.store.ListSandboxes(ctx, listing.Tenant(caller))
	if err != nil {
		return nil, err
	}
	states := listing.NewStateFilter(q.States)
	items := make([]Sandbox, 0)
	for _, sb := range all {
		if !states.Admits(sb.State) {
			continue
		}
		match := true
		for k, v := range q.Metadata {
			if got, ok := sb.Metadata[k]; !ok || got != v {
				match = false
				break
			}
		}
		if match {
			items = append(items, View(sb))
		}
	}
	page, pagination := listing.Page(items, func(sb Sandbox) time.Time { return sb.CreatedAt }, q.Page, q.PageSize)
	return &ListResponse{Items: page, Pagination: pagination}, nil
}

// Delete removes a sandbox and its record (deleting.go).
func (s *Service) Delete(ctx context.Context, caller Caller, id string) error {
	if _, err := uuid.Parse(id); err != nil {
		return notFound(id)
	}
	sb, err := s.markStopping(ctx, id, func(sb *store.Sandbox) error {
		if !caller.Admin && sb.Tenant != caller.Tenant {
			return notFound(id)
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return notFound(id)
	}
	if err != nil {
		return err
	}
	return s.removeStopping(ctx, sb, map[string]any{"key": caller.KeyID})
}

// PatchMetadata applies a JSON merge patch (null deletes a key) to the metadata.
func (s *Service) PatchMetadata(ctx context.Context, caller Caller, id string, patch map[string]*string) (*Sandbox, error) {
	if _, err := s.Lookup(ctx, caller, id); err != nil {
		return nil, err
	}
	for k, v := range patch {
		if err := validateMetadataKey(k, false); err != nil {
			return nil, err
		}
		if v != nil {
			if err := validateMetadata(map[string]string{k: *v}, false); err != nil {
				return nil, err
			}
		}
	}
	sb, err := s.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
		if sb.Metadata == nil {
			sb.Metadata = map[string]string{}
		}
		for k, v := range patch {
			if v == nil {
				delete(sb.Metadata, k)
			} else {
				sb.Metadata[k] = *v
			}
		}
		if len(sb.Metadata) == 0 {
			sb.Metadata = nil
		}
		return validateMetadataSize(sb.Metadata)
	})
	if err != nil {
		return nil, s.mapStoreErr(id, err)
	}
	v := View(sb)
	return &v, nil
}

// Renew moves the expiry to expiresAt, which must lie in the future and within MaxTimeout.
// A sandbox without expiry (created without timeout) has none to move: renewing it
// would shorten its life, so it answers 409.
func (s *Service) Renew(ctx context.Context, caller Caller, id string, expiresAt time.Time) (time.Time, error) {
	rec, err := s.Lookup(ctx, caller, id)
	if err != nil {
		return time.Time{}, err
	}
	if rec.ExpiresAt == nil {
		return time.Time{}, Errorf(KindConflict, CodeInvalidExpiration, "sandbox %s has no expiry (it was created without timeout) and runs until deleted; there is nothing to renew", id)
	}
	now := time.Now()
	if !expiresAt.After(now) {
		return time.Time{}, Errorf(KindInvalid, CodeInvalidExpiration, "expiresAt %s is not in the future", expiresAt.UTC().Format(time.RFC3339))
	}
	if expiresAt.Sub(now) > s.cfg.MaxTimeout {
		return time.Time{}, Errorf(KindInvalid, CodeInvalidExpiration, "expiresAt %s is more than the maximum lifetime of %s away", expiresAt.UTC().Format(time.RFC3339), s.cfg.MaxTimeout)
	}
	exp := expiresAt.UTC()
	// A tenant's decide_ttl plugin may shorten, move or refuse the renewal; when it
	// fails, the request is granted as asked.
	decide := s.access.TTLDecider()
	if cur, err := s.Lookup(ctx, caller, id); err == nil && decide != nil && cur.ExpiresAt != nil {
		maxExp := now.Add(s.cfg.MaxTimeout)
		got, ok, err := decide(ctx, cur, access.TTLActivity{Renew: true, Requested: exp}, exp, maxExp)
		switch {
		case err != nil:
			s.log.Warn("TTL plugin failed on renew; granting the request", "sandbox", id, "err", err)
		case !ok:
			return *cur.ExpiresAt, nil
		case got.After(now):
			if got.After(maxExp) {
				got = maxExp
			}
			exp = got.UTC()
		}
	}
	sb, err := s.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
		if sb.State == StateFailed || sb.State == StateTerminated || sb.State == StateStopping {
			return Errorf(KindConflict, CodeNotRunning, "sandbox %s is %s and cannot be renewed", id, sb.State)
		}
		if sb.ExpiresAt == nil {
			return Errorf(KindConflict, CodeInvalidExpiration, "sandbox %s has no expiry (it was created without timeout) and runs until deleted; there is nothing to renew", id)
		}
		sb.ExpiresAt = &exp
		return nil
	})
	if err != nil {
		return time.Time{}, s.mapStoreErr(id, err)
	}
	return *sb.ExpiresAt, nil
}

// Pause freezes a running sandbox.
func (s *Service) Pause(ctx context.Context, caller Caller, id string) error {
	return s.transition(ctx, caller, id, StateRunning, CodeNotRunning, StatePaused, s.runtime.Pause)
}

// Resume thaws a paused sandbox.
func (s *Service) Resume(ctx context.Context, caller Caller, id string) error {
	return s.transition(ctx, caller, id, StatePaused, CodeNotPaused, StateRunning, s.runtime.Resume)
}

func (s *Service) transition(ctx context.Context, caller Caller, id, from, code, to string, act func(context.Context, string) error) error {
	sb, err := s.Lookup(ctx, caller, id)
	if err != nil {
		return err
	}
	if sb.State != from {
		return Errorf(KindConflict, code, "sandbox %s is %s, not %s", id, sb.State, from)
	}
	if err := act(ctx, id); err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			// Not every sandbox can be frozen (on Kubernetes, one whose agent cannot): the caller's to know.
			return &Error{Kind: KindUnsupported, Code: CodeUnsupported, Message: err.Error(), Cause: err}
		}
		if errors.Is(err, runtimes.ErrWrongState) {
			// The engine is ahead of the record (a second pause of a sandbox whose
			// record the reconciler has not caught up with yet): the caller's conflict.
			return &Error{Kind: KindConflict, Code: code, Message: fmt.Sprintf("sandbox %s is not %s", id, from), Cause: err}
		}
		return &Error{Kind: KindInternal, Code: CodeRuntimeError, Message: "the runtime refused the change", Cause: err}
	}
	_, err = s.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
		if sb.State == to {
			return errAlreadySettled // a concurrent request made the same change
		}
		if sb.State != from {
			// Changed meanwhile (a delete under way is Stopping): that change stands.
			return Errorf(KindConflict, code, "sandbox %s is %s, not %s", id, sb.State, from)
		}
		sb.State, sb.LastTransitionAt = to, time.Now().UTC()
		return nil
	})
	if errors.Is(err, errAlreadySettled) {
		return nil
	}
	return s.mapStoreErr(id, err)
}

func (s *Service) mapStoreErr(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return notFound(id)
	}
	return err
}

// Credential headers: the SDKs send exactly these names to the agent and to the enforcer.
const (
	HeaderAgentToken  = agentproto.HeaderAgentToken
	HeaderEgressToken = agentproto.HeaderEgressToken
	HeaderAccessToken = "X-Sandgate-Access-Token"
)

// AccessHeaderFor names the header that carries a sandbox's access credential for port.
func AccessHeaderFor(port int) string {
	switch port {
	case runtimes.AgentPort:
		return HeaderAgentToken
	case runtimes.EgressPort:
		return HeaderEgressToken
	}
	return HeaderAccessToken
}

// LinkQueryParam carries a signed link's token in a URL.
const LinkQueryParam = "sandgate_token"

// EndpointQuery are the options of an endpoint request.
type EndpointQuery struct {
	// RequestHost is the Host the caller used, the fallback for PublicAddress.
	RequestHost string
	// Scheme is how the caller reached the gateway ("http" or "https").
	Scheme string
	// Expires, when set, asks for a signed browser link valid until then.
	Expires *time.Time
}

// GetEndpoint returns the gateway route to port of a sandbox and the headers to send.
// Agent and egress ports always use path mode, so that SDKs need no wildcard DNS; other
// ports use host mode when a preview domain is configured. With Expires, URL carries a
// signed link a browser can open without any header.
func (s *Service) GetEndpoint(ctx context.Context, caller Caller, id string, port int, q EndpointQuery) (*Endpoint, error) {
	if port < 1 || port > 65535 {
		return nil, invalid("port %d: must be 1-65535", port)
	}
	sb, err := s.lookupRouted(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	return s.endpointOf(ctx, caller, sb, port, q)
}

// endpointOf is GetEndpoint for a record in hand, which the caller may read.
func (s *Service) endpointOf(ctx context.Context, caller Caller, sb *store.Sandbox, port int, q EndpointQuery) (*Endpoint, error) {
	host := s.cfg.PublicAddress
	if host == "" {
		host = q.RequestHost
	}
	value, err := s.access.HeaderValue(ctx, sb, caller.KeyID)
	if err != nil {
		return nil, err
	}
	ep := &Endpoint{Headers: map[string]string{AccessHeaderFor(port): value}}
	if s.cfg.PreviewDomain != "" && port != runtimes.AgentPort && port != runtimes.EgressPort {
		ep.Endpoint = fmt.Sprintf("%s-%d.%s", sb.ID, port, s.cfg.PreviewDomain)
		if _, p, err := net.SplitHostPort(host); err == nil {
			ep.Endpoint += ":" + p
		}
	} else {
		ep.Endpoint = fmt.Sprintf("%s/sandboxes/%s/proxy/%d", host, sb.ID, port)
	}
	if q.Expires != nil {
		if !q.Expires.After(time.Now()) {
			return nil, invalid("expires %d is not in the future", q.Expires.Unix())
		}
		if q.Expires.Sub(time.Now()) > s.cfg.MaxTimeout {
			return nil, invalid("expires %d is more than %s away", q.Expires.Unix(), s.cfg.MaxTimeout)
		}
		tok, err := s.access.SignLink(ctx, sb.ID, port, *q.Expires)
		if err != nil {
			return nil, err
		}
		scheme := q.Scheme
		if scheme == "" {
			scheme = "http"
		}
		exp := q.Expires.UTC()
		ep.URL = fmt.Sprintf("%s://%s/?%s=%s", scheme, ep.Endpoint, LinkQueryParam, tok)
		ep.ExpiresAt = &exp
	}
	return ep, nil
}
