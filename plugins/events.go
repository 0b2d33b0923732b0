package plugins

import (
	"encoding/json"
	"time"
)

// Event is the envelope of every event a plugin receives, as the gateway
// marshals it. Data holds the type's own fields (PreviewAccess,
// PolicyDenial, or a plain map for the others).
type Event struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	Tenant    string    `json:"tenant"`
	SandboxID string    `json:"sandboxId,omitempty"`
	Time      time.Time `json:"time"`
	Data      any       `json:"data"`
}

// Event types the gateway emits that plugins are told of by name (the gateway writes
// them with these constants); ABI.md describes each one's data.
const (
	// EventSandboxCreated: a create or a claim answered (data: image, pool?, expiresAt?).
	EventSandboxCreated = "sandbox.created"
	// EventSandboxDeleted: the sandbox is gone (data: reason?, "api", "reaper", …).
	EventSandboxDeleted = "sandbox.deleted"
	// EventSandboxExpired: the reaper removed it at its expiresAt (data: expiresAt).
	EventSandboxExpired = "sandbox.expired"
	// EventCommandStarted: a command or code cell went to the agent (data: command, cwd?,
	// background).
	EventCommandStarted = "command.started"
	// EventFileWritten: an upload went to the agent (data: path, size).
	EventFileWritten = "file.written"
	// EventPreviewAccessed: a request reached a sandbox port (data: PreviewAccess).
	EventPreviewAccessed = "preview.accessed"
	// EventPolicyDenied: the access policy refused an action (data: PolicyDenial).
	EventPolicyDenied = "policy.denied"
)

// MarshalEvent encodes e the way plugins expect it (time in RFC 3339 with
// nanoseconds, UTC; data never null).
func MarshalEvent(e Event) ([]byte, error) {
	e.Time = e.Time.UTC()
	if e.Data == nil {
		e.Data = struct{}{}
	}
	return json.Marshal(e)
}

// PreviewAccess is the data of a preview.accessed event.
type PreviewAccess struct {
	Port       int    `json:"port"`
	Method     string `json:"method"`
	Path       string `json:"path"`
	Status     int    `json:"status"`
	Bytes      int64  `json:"bytes"`
	DurationMs int64  `json:"durationMs"`
	// Credential names how the request was let in: "apiKey",
	// "accessToken", "signedLink" or "cookie".
	Credential string `json:"credential"`
}

// PolicyDenial is the data of a policy.denied event.
type PolicyDenial struct {
	Action  string `json:"action"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// WantsEvents reports whether any plugin of tenant declares on_event, so that a caller
// can skip encoding an event nobody would receive.
func (h *Host) WantsEvents(tenant string) bool {
	return len(h.routes.Load().events[tenant]) > 0
}

// OnEvent queues event (a JSON Event) for every plugin of tenant that
// declares on_event, and returns at once. Each plugin has a bounded queue;
// an event that finds it full is dropped and counted in Stats.Drops. The
// host keeps event: the caller must not modify it afterwards. Routing is by
// the tenant argument alone, so a tenant's plugins never see another
// tenant's events.
func (h *Host) OnEvent(tenant string, event []byte) {
	for _, s := range h.routes.Load().events[tenant] {
		s.enqueue(event)
	}
}
