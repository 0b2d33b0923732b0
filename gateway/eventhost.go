package gateway

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/gateway/eventlog"
	"github.com/sandgate/sandgate/gateway/store"
)

// The event feature's vocabulary, named here for the core and its callers (package
// gateway/eventlog).
type (
	// Event is one entry of a tenant's event stream, as the event API returns it (and as
	// plugins receive it).
	Event = store.Event
	// EventQuery selects events of one tenant, EventPage is one page of them.
	EventQuery = eventlog.Query
	EventPage  = eventlog.Page
	// AuditRecord is one entry of a tenant's audit stream, AuditPage one page of it,
	// AuditQuery what selects a page.
	AuditRecord = eventlog.AuditRecord
	AuditPage   = eventlog.AuditPage
	AuditQuery  = eventlog.AuditQuery
)

// ValidAuditCursor reports whether c is a cursor of the event or audit streams.
func ValidAuditCursor(c string) bool { return eventlog.ValidCursor(c) }

// Events is the feature of tenants' event and audit streams: gateway/api reads and
// follows them through it and records agent calls; the Caddy glue gives the plugin host
// its RecordAudit.
func (s *Service) Events() *eventlog.Manager { return s.eventLog }

// emit records an event about sb before the caller goes on (eventlog.Manager.Emit).
func (s *Service) emit(ctx context.Context, sb *store.Sandbox, typ string, data map[string]any) {
	s.eventLog.Emit(ctx, store.Event{Type: typ, Tenant: sb.Tenant, SandboxID: sb.ID, Time: time.Now().UTC(), Data: data})
}

// eventHost is the core as the event feature sees it (eventlog.Host).
type eventHost struct{ s *Service }

// PublishEvent hands ev to its tenant's on_event plugins (package gateway/tenantplugins).
func (h eventHost) PublishEvent(ev store.Event) { h.s.tenantPlugins.Publish(ev) }

// FlushActivity writes the proxied requests' activity the access feature gathered.
func (h eventHost) FlushActivity() { h.s.access.FlushActivity() }

var _ eventlog.Host = eventHost{}
