package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/sandgate/sandgate/gateway/pool"
	"github.com/sandgate/sandgate/gateway/store"
)

// ReasonMemberDied is the Failed reason of a claimed pool member that died or refused
// its binding after the claim.
const ReasonMemberDied = pool.ReasonMemberDied

func unavailable(id string) error {
	return Errorf(KindUnavailable, CodeUnavailable, "sandbox %s died after it was claimed and is marked Failed; claim another", id)
}

// beforeAgentCall runs before any call the gateway forwards to a sandbox (agent or any
// other port): a claimed member's late bindings hold from its very first call, so the
// call waits for them here (pool.Manager.BeforeCall); a member that died after its claim
// answers SANDBOX::UNAVAILABLE. It costs nothing for a sandbox that was not claimed from
// a pool.
func beforeAgentCall(ctx context.Context, members *pool.Manager, sb *store.Sandbox) error {
	err := members.BeforeCall(ctx, sb)
	if errors.Is(err, pool.ErrMemberDied) {
		return unavailable(sb.ID)
	}
	return err
}

// Failed is told that the sandbox did not answer the forwarded request. For a sandbox
// that the runtime reports stopped it marks it Failed (a claimed pool member:
// MEMBER_DIED; another: why it ended, deaths.go) and returns the SANDBOX::UNAVAILABLE
// error to answer with; else nil (the caller answers its usual upstream error).
func (u *Upstream) Failed(ctx context.Context, cause error) error {
	sb, s := u.Sandbox, u.svc
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if sb.Pool == "" {
		return s.coldSandboxDied(ctx, sb)
	}
	if err := s.pool.MemberUnreachable(ctx, sb, cause); err != nil {
		return unavailable(sb.ID)
	}
	return nil
}
