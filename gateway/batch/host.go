package batch

import (
	"context"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// Plan is a batch request the core checked and admitted: the pool its warm members are
// claimed from (nil: every member starts cold), the template each member is made of and
// the claim's own fields (timeout, env, metadata, entrypoint) laid over it.
type Plan[T any] struct {
	Pool     *store.Pool
	Template T
	Claim    T
}

// Host is what the batch feature needs of the gateway's core, whose create request is T
// and endpoint query Q. The core implements it; the store and the metrics the Manager is
// given directly.
type Host[T, Q any] interface {
	// Admit checks a request's pool or template and its claim fields, and runs the
	// admission policy for req.Count sandboxes of it.
	Admit(ctx context.Context, caller principal.Caller, req Request[T]) (Plan[T], error)
	// Claim claims up to n warm members of plan.Pool for the batch; emitted returns once
	// their events are written.
	Claim(ctx context.Context, caller principal.Caller, plan Plan[T], n int, batchID string) (got []*store.Sandbox, emitted func(), err error)
	// CreateCold makes member id of the batch cold, from tmpl with claim laid over it,
	// and returns its record once its agent answers. On an error it leaves nothing
	// running.
	CreateCold(ctx context.Context, caller principal.Caller, tmpl, claim T, id, batchID string) (*store.Sandbox, error)
	// Discard removes a sandbox made for a batch deleted meanwhile.
	Discard(ctx context.Context, id string)
	// DeleteMember deletes one member of a batch as the caller; nil when it is gone
	// already.
	DeleteMember(ctx context.Context, caller principal.Caller, id, batchID string) error
	// MemberState is a member's status as the sandbox API shows it, and whether it was
	// claimed from a pool.
	MemberState(sb *store.Sandbox) (status apiproto.Status, claimed bool)
	// AgentEndpoint is a member's agent endpoint for the caller, as the endpoint route
	// answers it; an error when the caller may not reach the sandbox's ports or its value
	// cannot be derived now.
	AgentEndpoint(ctx context.Context, caller principal.Caller, sb *store.Sandbox, at Q) (*apiproto.Endpoint, error)
}
