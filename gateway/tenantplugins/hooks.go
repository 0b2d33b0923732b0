package tenantplugins

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
)

// Publish hands ev to its tenant's on_event plugins. It never blocks: the host queues
// the event per plugin and drops (and counts) what does not fit.
func (m *Manager) Publish(ev store.Event) {
	if m.host == nil || !m.host.WantsEvents(ev.Tenant) {
		return // the common case on the proxy's hot path: no marshalling for nobody
	}
	id := ev.ID
	if id == "" {
		id = uuid.NewString()
	}
	data := ev.DataMap()
	if data == nil {
		data = map[string]any{}
	}
	body, err := plugins.MarshalEvent(plugins.Event{ID: id, Type: ev.Type, Tenant: ev.Tenant, SandboxID: ev.SandboxID, Time: ev.Time, Data: data})
	if err != nil {
		m.log.Debug("event not encodable for plugins", "type", ev.Type, "err", err)
		return
	}
	m.host.OnEvent(ev.Tenant, body)
}

// DecideTTL asks the tenant's decide_ttl plugin about in. Without a host, or for a
// tenant without such a plugin, it answers builtin, changed, without an error; any
// other failure is returned, for the caller to apply its built-in rule.
func (m *Manager) DecideTTL(ctx context.Context, tenant string, in plugins.TTLInput, builtin time.Time) (time.Time, bool, error) {
	if m.host == nil {
		return builtin, true, nil
	}
	exp, changed, err := m.host.DecideTTL(ctx, tenant, in)
	if errors.Is(err, plugins.ErrNotFound) {
		return builtin, true, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	return exp, changed, nil
}

// CallStats are the call statistics of the plugins loaded on this replica, named
// "tenant/plugin".
func (m *Manager) CallStats() []metrics.Plugin {
	if m.host == nil {
		return nil
	}
	m.mu.Lock()
	tenants := make([]string, 0, len(m.tenants))
	for t := range m.tenants {
		tenants = append(tenants, t)
	}
	m.mu.Unlock()
	var out []metrics.Plugin
	for _, t := range tenants {
		for _, info := range m.host.List(t) {
			st, err := m.host.Stats(t, info.Name)
			if err != nil {
				continue
			}
			out = append(out, metrics.Plugin{Name: t + "/" + info.Name, Calls: st.Invocations, Errors: st.Errors, P50: st.P50, P99: st.P99})
		}
	}
	return out
}
