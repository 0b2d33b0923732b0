package egress

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
)

// Host is what the egress feature needs of the gateway's core. The core implements it;
// the store, the runtime, the policy engine, the agent client and the metrics the
// Manager is given directly.
type Host interface {
	// Emit writes an event of sb to its tenant's stream and hands it to plugins.
	Emit(ctx context.Context, sb *store.Sandbox, typ string, data map[string]any)
	// Audit queues one record of source (a vault injection) into tenant's audit stream,
	// without blocking.
	Audit(tenant, source string, at time.Time, record []byte)
	// Expiring reports whether rec is the reaper's to remove (its removal is under way or
	// its expiry has passed): its enforcer is not restored.
	Expiring(rec *store.Sandbox, now time.Time) bool
	// DropRoute drops a sandbox from the core's route cache.
	DropRoute(id string)
	// BackgroundError counts err against the background job and logs what failed.
	BackgroundError(job, what string, err error)
}
