package gateway

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/store"
)

// Access is the feature of previews and access: signed links and cookies, access header
// values, console sessions, the proxy's access decision and proxied requests' activity.
// gateway/api calls it directly for these.
func (s *Service) Access() *access.Manager { return s.access }

// accessHost is the core as the access feature sees it (access.Host).
type accessHost struct{ s *Service }

// Now is the gateway's clock (clock.go).
func (h accessHost) Now() time.Time { return h.s.now() }

// Authenticate resolves an API key (authenticate.go).
func (h accessHost) Authenticate(ctx context.Context, apiKey string) (Caller, error) {
	return h.s.Authenticate(ctx, apiKey)
}

// AdminKey is the configured platform admin key (SetAdminKey).
func (h accessHost) AdminKey() string {
	admin, _ := h.s.adminKey.Load().(string)
	return admin
}

// Lookup returns the record of a sandbox caller may see.
func (h accessHost) Lookup(ctx context.Context, caller Caller, id string) (*store.Sandbox, error) {
	return h.s.Lookup(ctx, caller, id)
}

// DropRoute drops a sandbox from the route cache.
func (h accessHost) DropRoute(id string) { h.s.feed.Drop(id) }

// Emit writes an event to the sandbox's tenant's stream and hands it to plugins.
func (h accessHost) Emit(ctx context.Context, sb *store.Sandbox, typ string, data map[string]any) {
	h.s.emit(ctx, sb, typ, data)
}

// QueueEvent hands an event to the batched event writer (package gateway/eventlog).
func (h accessHost) QueueEvent(ev store.Event) { h.s.eventLog.Queue(ev) }

var _ access.Host = accessHost{}
