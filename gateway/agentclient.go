package gateway

import (
	"context"
	"time"
)

// The gateway's own calls to agents and enforcers (readiness pings, late binding, the
// signed policy API) go through one agentclient.Client (Service.agents): keep-alive
// connections, the token header, timeouts and error kinds in one place, shared with the
// runtimes. Proxied user traffic does not: it is forwarded as it came.

// agentCallTimeout bounds one call of the gateway's to an agent (late binding, metrics).
const agentCallTimeout = 5 * time.Second

// pingAgent calls the agent's /ping with its token.
func (s *Service) pingAgent(ctx context.Context, addr, token string, timeout time.Duration) error {
	return s.agents.Ping(ctx, addr, token, timeout)
}
