package gateway

import (
	"context"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/gateway/usage"
)

// DefaultUsageInterval is the resolution of the per-sandbox history.
const DefaultUsageInterval = usage.DefaultInterval

// The usage feature's vocabulary, named here for the core and its callers (package
// gateway/usage).
type (
	// UsagePoint is one point of a sandbox's resource history (fields the source cannot
	// tell are null) and SandboxUsage the body of GET /sandboxes/{id}/metrics, declared
	// once for the gateway and the Go SDK in apiproto.
	UsagePoint   = apiproto.UsagePoint
	SandboxUsage = apiproto.SandboxUsage
	// FleetHistory is the body of GET /v1/fleet/metrics, FleetPoint one point of it and
	// FleetPool one pool's fill at a point.
	FleetHistory = usage.FleetHistory
	FleetPoint   = usage.FleetPoint
	FleetPool    = usage.FleetPool
)

// Usage is the feature of resource use and metrics: per-sandbox histories, the fleet's
// history and the Prometheus series. gateway/api calls it for the metrics APIs, the
// Caddy glue for the series to register.
func (s *Service) Usage() *usage.Manager { return s.resourceUse }

// usageHost is the core as the usage feature sees it (usage.Host).
type usageHost struct{ s *Service }

// Lookup returns the record of a sandbox caller may see.
func (h usageHost) Lookup(ctx context.Context, caller Caller, id string) (*store.Sandbox, error) {
	return h.s.Lookup(ctx, caller, id)
}

// EnforcesEgress says whether sandboxes run an egress enforcer (package gateway/egress).
func (h usageHost) EnforcesEgress() bool { return h.s.egress.Enforces() }

// PluginStats reads the call statistics of the plugins loaded on this replica (package
// gateway/tenantplugins).
func (h usageHost) PluginStats() []metrics.Plugin { return h.s.tenantPlugins.CallStats() }

var _ usage.Host = usageHost{}
