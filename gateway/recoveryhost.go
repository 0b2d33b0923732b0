package gateway

import (
	"context"

	"github.com/sandgate/sandgate/gateway/recovery"
	"github.com/sandgate/sandgate/gateway/store"
)

// recoveryHost is the core as the recovery feature sees it (recovery.Host).
type recoveryHost struct{ s *Service }

// Emit writes an event of a sandbox before the caller goes on.
func (h recoveryHost) Emit(ctx context.Context, sb *store.Sandbox, typ string, data map[string]any) {
	h.s.emit(ctx, sb, typ, data)
}

// DropRoute drops a sandbox from the route cache.
func (h recoveryHost) DropRoute(id string) { h.s.feed.Drop(id) }

// ResumeBatch makes again the members of b taken over from a dead gateway.
func (h recoveryHost) ResumeBatch(ctx context.Context, b *store.Batch, members []string) error {
	return h.s.batches.Resume(ctx, b, members)
}

// StoreLost has the API key bindings and the policy overrides read again.
func (h recoveryHost) StoreLost() {
	h.s.access.KeyBindingsStale()
	h.s.policyAdmin.StoreLost()
}

// BackgroundError counts err against job and logs it (failures.go).
func (h recoveryHost) BackgroundError(job, what string, err error, args ...any) {
	h.s.backgroundError(job, what, err, args...)
}

var _ recovery.Host = recoveryHost{}
