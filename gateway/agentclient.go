package gateway

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
)

// The gateway's own calls to agents and enforcers (readiness pings, late binding, the
// signed policy API) go through one agentclient.Client (Service.agents): keep-alive
// connections, the token header, timeouts and error kinds in one place, shared with the
// runtimes. Proxied user traffic does not: it is forwarded as it came.

// callAgent sends one JSON request to a sandbox's agent with the agent's own token.
func (s *Service) callAgent(ctx context.Context, sb *store.Sandbox, method, path string, body any) error {
	_, err := s.agents.Agent(ctx, sb.Address, sb.AgentToken, method, path, body, 5*time.Second)
	return err
}

// pingAgent calls the agent's /ping with its token.
func (s *Service) pingAgent(ctx context.Context, addr, token string, timeout time.Duration) error {
	return s.agents.Ping(ctx, addr, token, timeout)
}
