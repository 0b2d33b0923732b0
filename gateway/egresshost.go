package gateway

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/gateway/egress"
	"github.com/sandgate/sandgate/gateway/store"
)

// ReasonEnforcerLost is the Failed reason of a sandbox whose egress enforcer died and
// could not be restored (package gateway/egress).
const ReasonEnforcerLost = egress.ReasonEnforcerLost

// Egress is the feature of egress policies and the credential vault: a sandbox's policy
// at create, claim and through its egress API, enforcer restores, vault requests.
// gateway/api calls it directly for the egress and vault APIs.
func (s *Service) Egress() *egress.Manager { return s.egress }

// egressHost is the core as the egress feature sees it (egress.Host).
type egressHost struct{ s *Service }

// Emit writes an event to the sandbox's tenant's stream and hands it to plugins.
func (h egressHost) Emit(ctx context.Context, sb *store.Sandbox, typ string, data map[string]any) {
	h.s.emit(ctx, sb, typ, data)
}

// Audit queues a record into the tenant's audit stream (package gateway/eventlog).
func (h egressHost) Audit(tenant, source string, at time.Time, record []byte) {
	h.s.eventLog.RecordAuditFrom(tenant, source, at, record)
}

// Expiring reports whether rec is the reaper's to remove (reaper.go).
func (h egressHost) Expiring(rec *store.Sandbox, now time.Time) bool { return h.s.expiring(rec, now) }

// DropRoute drops a sandbox from the route cache.
func (h egressHost) DropRoute(id string) { h.s.feed.Drop(id) }

// BackgroundError counts and logs an error of background work (failures.go).
func (h egressHost) BackgroundError(job, what string, err error) { h.s.backgroundError(job, what, err) }

var _ egress.Host = egressHost{}
