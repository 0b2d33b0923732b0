package gateway

import (
	"time"

	"github.com/sandgate/sandgate/gateway/store"
)

// ToolCall is one MCP tool call served at /mcp, for the audit stream.
type ToolCall struct {
	Tool      string
	SandboxID string // "" for calls about no one sandbox
	Code      string // the error code when the call failed, "" on success
	Duration  time.Duration
}

// RecordToolCall writes an "mcp.tool.called" event to the caller's audit stream. The
// tool's arguments are left out: they carry file contents and commands, which may hold
// secrets, and the API calls the tool made are audited by themselves.
func (s *Service) RecordToolCall(caller Caller, call ToolCall) {
	data := map[string]any{"tool": call.Tool, "keyId": caller.KeyID, "ok": call.Code == "", "durationMs": float64(call.Duration.Microseconds()) / 1000}
	if call.Code != "" {
		data["code"] = call.Code
	}
	s.eventLog.Queue(store.Event{Type: "mcp.tool.called", Tenant: caller.Tenant, SandboxID: call.SandboxID, Time: time.Now().UTC(), Data: data})
}
