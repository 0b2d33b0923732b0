package pool

import (
	"context"

	"github.com/sandgate/sandgate/gateway/createreq"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// Host is what the pool feature needs of the gateway's core. The core implements it;
// the store and the runtime the Manager is given directly.
type Host interface {
	// MemberStarter decodes and checks a pool's template once, and returns what starts
	// one member of it (an error: the template no longer passes the core's checks).
	MemberStarter(p *store.Pool) (StartMember, error)
	// BindMember applies a claim's late binding to a member: env and entrypoint through
	// its agent, the network policy through its enforcer (the core's egress policy).
	BindMember(ctx context.Context, sb *store.Sandbox, lb *store.LateBind) error
	// RouteClaimed puts a claimed member's record into the core's route cache.
	RouteClaimed(sb *store.Sandbox)
	// DropRoute drops a sandbox from the core's route cache.
	DropRoute(id string)
	// SandboxDied is told that a sandbox not taken from a pool stopped.
	SandboxDied(ctx context.Context, sb *store.Sandbox)
	// ImageError is the user-safe error for the runtime's failure err with image.
	ImageError(image string, err error) error
	// ResolveTemplate is a pool's template as it is to be checked and stored: a
	// snapshotId made the template of the caller's own Ready snapshot's image, another
	// tenant's snapshot image refused.
	ResolveTemplate(ctx context.Context, caller principal.Caller, tmpl createreq.Request) (createreq.Request, error)
	// CheckTemplate checks a pool's template as the core checks a create (its
	// networkPolicy as the egress policy judges a template's), and refuses what a warm
	// member cannot have (volumes).
	CheckTemplate(ctx context.Context, caller principal.Caller, tmpl createreq.Request) error
	// ImageBuilding refuses an image the gateway is still building in the background.
	ImageBuilding(image string) error
	// CheckClaim checks what a claim req adds to a pool's template tmpl, as the core
	// checks a create's fields (timeout, metadata, env, entrypoint, credentialProxy: one
	// the template's members lack) and its networkPolicy as the egress policy judges a
	// claim's.
	CheckClaim(ctx context.Context, caller principal.Caller, tmpl, req createreq.Request) error
	// Admit checks tmpl as a create and runs admission for count sandboxes of it.
	Admit(ctx context.Context, caller principal.Caller, tmpl createreq.Request, count int) error
	// CreateCold checks tmpl as a create and starts it cold, recorded under id and,
	// when set, batch.
	CreateCold(ctx context.Context, caller principal.Caller, tmpl createreq.Request, id, batch string) (*store.Sandbox, error)
	// EmitPerSandbox writes ev once for each of sbs, in one round trip; EmitAll writes
	// evs.
	EmitPerSandbox(ctx context.Context, ev store.Event, sbs []*store.Sandbox)
	EmitAll(ctx context.Context, evs []store.Event)
}

// StartMember starts one member of a pool's template, with the pool's tenant, name and
// version, and returns its record once its agent answers, not yet added to the pool.
// On an error it leaves nothing running.
type StartMember func(ctx context.Context) (*store.Sandbox, error)
