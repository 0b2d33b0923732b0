package gateway

import (
	"context"
	"errors"
	"strconv"

	"github.com/sandgate/sandgate/gateway/batch"
	"github.com/sandgate/sandgate/gateway/pool"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// The batch feature's vocabulary, named here for the core and its callers (package
// gateway/batch, declared in apiproto for the gateway and the Go SDK alike).
type (
	// BatchRequest is the body of POST /v1/batches: count sandboxes of a template, or
	// claimed from a pool (poolRef), with the claim's own timeout, env and metadata.
	BatchRequest = batch.Request[CreateRequest]
	// BatchView is the API form of a batch, BatchMember one of its sandboxes and
	// BatchSummary its members counted by outcome.
	BatchView    = batch.View
	BatchMember  = batch.Member
	BatchSummary = batch.Summary
	// Batches is the batch feature over the core's create request and endpoint query.
	Batches = batch.Manager[CreateRequest, EndpointQuery]
)

// Batches is the feature of batches of N sandboxes, claimed or cold. gateway/api calls it
// for /v1/batches, the state feature for a fork's batch, the takeover for the queued
// members of a gateway that is gone.
func (s *Service) Batches() *Batches { return s.batches }

// batchHost is the core as the batch feature sees it (batch.Host): the claim and the
// cold create stay the core's.
type batchHost struct{ s *Service }

// Admit checks a batch's pool (pool.Manager.ClaimTarget) or template and the claim's fields, and runs
// admission for req.Count sandboxes.
func (h batchHost) Admit(ctx context.Context, caller Caller, req BatchRequest) (batch.Plan[CreateRequest], error) {
	s := h.s
	claimReq := CreateRequest{Timeout: req.Timeout, Env: req.Env, Metadata: req.Metadata, Entrypoint: req.Entrypoint}
	plan := batch.Plan[CreateRequest]{Claim: claimReq}
	if req.PoolRef != "" {
		p, tmpl, err := s.pool.ClaimTarget(ctx, caller, req.PoolRef, claimReq)
		if err != nil {
			return plan, err
		}
		plan.Pool, plan.Template = p, tmpl
	} else {
		plan.Template = *req.Template
		if err := s.validateClaimInput(claimReq); err != nil {
			return plan, err
		}
		merged := plan.Template
		merged.Metadata = pool.MergeMaps(plan.Template.Metadata, req.Metadata)
		if _, err := s.validateCreate(merged); err != nil {
			return plan, err
		}
	}
	return plan, s.pool.AdmitClaim(ctx, caller, plan.Template, claimReq, req.Count)
}

// Claim claims up to n warm members of the plan's pool in one script (pool.Manager.Take).
func (h batchHost) Claim(ctx context.Context, caller Caller, plan batch.Plan[CreateRequest], n int, batchID string) ([]*store.Sandbox, func(), error) {
	return h.s.pool.Take(ctx, caller, plan.Pool, plan.Template, plan.Claim, n, batchID)
}

// CreateCold starts a member of a template with the claim's fields, cold
// (pool.Manager.ColdFromTemplate).
func (h batchHost) CreateCold(ctx context.Context, caller Caller, tmpl, claim CreateRequest, id, batchID string) (*store.Sandbox, error) {
	return h.s.pool.ColdFromTemplate(ctx, caller, tmpl, claim, id, batchID)
}

// Discard removes a sandbox made for a batch deleted meanwhile (create.go).
func (h batchHost) Discard(ctx context.Context, id string) { h.s.discard(ctx, id) }

// DeleteMember marks a member Stopping and removes it (deleting.go), its event naming
// the batch.
func (h batchHost) DeleteMember(ctx context.Context, caller Caller, id, batchID string) error {
	sb, err := h.s.markStopping(ctx, id, nil)
	if errors.Is(err, store.ErrNotFound) {
		return nil // deleted meanwhile
	}
	if err != nil {
		return err
	}
	return h.s.removeStopping(ctx, sb, map[string]any{"key": caller.KeyID, "batch": batchID})
}

// MemberState is the member's status as the sandbox API shows it, and whether it came
// from a pool (its metadata names one).
func (h batchHost) MemberState(sb *store.Sandbox) (Status, bool) {
	return View(sb).Status, sb.Metadata[MetadataPool] != ""
}

var agentPortString = strconv.Itoa(runtimes.AgentPort)

// AgentEndpoint is the member's agent endpoint for the caller: the endpoint route's Rego
// decision (sandbox.proxy on that sandbox) and its key-bound value (package
// gateway/access).
func (h batchHost) AgentEndpoint(ctx context.Context, caller Caller, sb *store.Sandbox, at EndpointQuery) (*Endpoint, error) {
	path := "/v1/sandboxes/" + sb.ID + "/endpoints/" + agentPortString
	if err := h.s.Authorize(ctx, caller, "sandbox.proxy", Resource{Kind: "sandbox", ID: sb.ID, Tenant: caller.Tenant}, "GET", path, nil); err != nil {
		return nil, err
	}
	return h.s.endpointOf(ctx, caller, sb, runtimes.AgentPort, at)
}

var _ batch.Host[CreateRequest, EndpointQuery] = batchHost{}
