package eventlog

import (
	"context"

	"github.com/sandgate/sandgate/gateway/store"
)

// Emit writes ev before the caller goes on, and hands it to its tenant's live
// subscribers; a store that cannot take it is logged, not returned (the work the event
// records is done).
func (m *Manager) Emit(ctx context.Context, ev store.Event) {
	if _, err := m.store.AppendEvent(context.WithoutCancel(ctx), ev); err != nil {
		m.log.Warn("append event", "type", ev.Type, "sandbox", ev.SandboxID, "err", err)
	}
	m.host.PublishEvent(ev)
}

// EmitAll writes several events in one round trip, as Emit writes one.
func (m *Manager) EmitAll(ctx context.Context, evs []store.Event) {
	if len(evs) == 0 {
		return
	}
	if err := m.store.AppendEvents(context.WithoutCancel(ctx), evs); err != nil {
		m.log.Warn("append events", "count", len(evs), "type", evs[0].Type, "err", err)
	}
	for _, ev := range evs {
		m.host.PublishEvent(ev)
	}
}

// EmitPerSandbox writes ev once for each of members, as its SandboxID, in one round
// trip (a batch claim's sandbox.created), as EmitAll does.
func (m *Manager) EmitPerSandbox(ctx context.Context, ev store.Event, members []*store.Sandbox) {
	ids := make([]string, len(members))
	for i, sb := range members {
		ids[i] = sb.ID
	}
	if err := m.store.AppendPerSandbox(context.WithoutCancel(ctx), ev, ids); err != nil {
		m.log.Warn("append events", "count", len(ids), "type", ev.Type, "err", err)
	}
	for _, id := range ids {
		e := ev
		e.SandboxID = id
		m.host.PublishEvent(e)
	}
}
