package gateway

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/gateway/tenantplugins"
	"github.com/sandgate/sandgate/plugins"
)

// The plugin feature's vocabulary, named here for the core and its callers (package
// gateway/tenantplugins).
type (
	// PluginStatus is a plugin as the API shows it, PluginStats how its calls went on
	// the replica that answers.
	PluginStatus = tenantplugins.Status
	PluginStats  = tenantplugins.Stats
)

// MaxPluginUploadBytes bounds a whole plugin upload request (module, config and
// multipart framing).
const MaxPluginUploadBytes = tenantplugins.MaxUploadBytes

// Plugins is the feature of tenants' WASM plugins. gateway/api calls it for
// /v1/plugins; without an attached host its operations answer CodePluginsDisabled.
func (s *Service) Plugins() *tenantplugins.Manager { return s.tenantPlugins }

// AttachPlugins wires host into the service: every event of a tenant reaches that
// tenant's on_event plugins, renew-on-access asks the tenant's decide_ttl plugin first,
// plugins' audit records are written to the tenant's audit stream (give host
// Events().RecordAudit as its Audit callback, whose writer starts now), and the plugins
// stored in Redis are loaded now and kept in sync in the background. Call it once,
// before Start; Stop ends the background work, after which the caller closes host.
func (s *Service) AttachPlugins(ctx context.Context, host *plugins.Host) {
	s.eventLog.StartAudit()
	s.access.SetTTLDecider(pluginTTLDecider(s.tenantPlugins))
	s.tenantPlugins.Attach(ctx, host)
}

// pluginTTLDecider asks the sandbox's tenant's decide_ttl plugin. A tenant without one
// gets the built-in rule without a warning; any other failure is returned so that the
// access feature logs it and applies the built-in rule (on an explicit renewal, Renew
// grants the request as asked).
func pluginTTLDecider(m *tenantplugins.Manager) access.TTLDecider {
	return func(ctx context.Context, sb *store.Sandbox, act access.TTLActivity, builtin, maxExp time.Time) (time.Time, bool, error) {
		if !m.Attached() || sb.ExpiresAt == nil {
			return builtin, true, nil
		}
		in := plugins.TTLInput{
			SandboxID:        sb.ID,
			Reason:           plugins.ReasonActivity,
			Now:              act.At,
			CurrentExpiresAt: *sb.ExpiresAt,
			MaxExpiresAt:     maxExp,
			Activity:         &plugins.Activity{Port: act.Port, Method: act.Method, Path: act.Path},
		}
		if act.Renew {
			in.Reason, in.RequestedExpiresAt, in.Activity = plugins.ReasonRenew, act.Requested, nil
		}
		return m.DecideTTL(ctx, sb.Tenant, in, builtin)
	}
}
