package recovery

import (
	"context"

	"github.com/sandgate/sandgate/gateway/store"
)

// Host is what the recovery needs of the gateway's core. The core implements it; the
// store and the runtime the Manager is given directly.
type Host interface {
	// Emit writes an event of a sandbox (the sandbox.deleted of one whose record the
	// store finally removed).
	Emit(ctx context.Context, sb *store.Sandbox, typ string, data map[string]any)
	// DropRoute drops a sandbox from the core's route cache.
	DropRoute(id string)
	// ResumeBatch makes again the members of batch b taken over from a dead gateway.
	ResumeBatch(ctx context.Context, b *store.Batch, members []string) error
	// StoreLost is told that the store lost its contents: what the core read from it
	// (API key bindings, policy overrides) is to be read again.
	StoreLost()
	// BackgroundError counts err against job and logs what failed.
	BackgroundError(job, what string, err error, args ...any)
}
