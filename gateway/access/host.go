package access

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// Host is what the access feature needs of the gateway's core. The core implements it;
// the store, the policy engine and the metrics the Manager is given directly.
type Host interface {
	// Now is the gateway's clock, on which links expire and renewals are decided (a
	// test setting alone moves it).
	Now() time.Time
	// Authenticate resolves an API key to its caller.
	Authenticate(ctx context.Context, apiKey string) (principal.Caller, error)
	// AdminKey is the configured platform admin key, "" when there is none.
	AdminKey() string
	// Lookup returns the record of a sandbox caller may see; another tenant's is not found.
	Lookup(ctx context.Context, caller principal.Caller, id string) (*store.Sandbox, error)
	// DropRoute drops a sandbox from the core's route cache.
	DropRoute(id string)
	// Emit writes an event of sb to its tenant's stream and hands it to plugins.
	Emit(ctx context.Context, sb *store.Sandbox, typ string, data map[string]any)
	// QueueEvent hands an event to the core's batched event writer, without blocking.
	QueueEvent(ev store.Event)
}
