package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// callAgent sends one JSON request to a sandbox's agent with the agent's own token.
func (s *Service) callAgent(ctx context.Context, sb *store.Sandbox, method, path string, body any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	js, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("http://%s:%d%s", sb.Address, runtimes.AgentPort, path), bytes.NewReader(js))
	if err != nil {
		return err
	}
	req.Header.Set(HeaderAgentToken, sb.AgentToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.agentHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("agent %s %s: %s: %s", method, path, resp.Status, msg)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}
