package usage

import (
	"context"

	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// Host is what the usage feature needs of the gateway's core. The core implements it;
// the store, the runtime, the agent client and the event-driven series the Manager is
// given directly.
type Host interface {
	// Lookup returns the record of a sandbox caller may see (another tenant's answers
	// like a missing one).
	Lookup(ctx context.Context, caller principal.Caller, id string) (*store.Sandbox, error)
	// EnforcesEgress says whether sandboxes run an egress enforcer whose denials are
	// worth reading.
	EnforcesEgress() bool
	// PluginStats are the call statistics of the plugins loaded on this replica.
	PluginStats() []metrics.Plugin
}
