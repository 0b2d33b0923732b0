package gateway

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/state"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// The state feature's vocabulary, named here for the core and its callers (package
// gateway/state).
type (
	// SnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots.
	SnapshotRequest = state.SnapshotRequest
	// SnapshotQuery filters and pages GET /v1/snapshots.
	SnapshotQuery = state.SnapshotQuery
	// SnapshotView is the API form of a snapshot and SnapshotList the body of GET
	// /v1/snapshots, declared once for the gateway and the Go SDK in apiproto.
	SnapshotView = apiproto.Snapshot
	SnapshotList = apiproto.SnapshotPage
	// ForkRequest is the body of POST /v1/sandboxes/{id}/fork.
	ForkRequest = state.ForkRequest
	// VolumeRequest is one entry of a create's volumes, HostVolume and PVCVolume its
	// backends.
	VolumeRequest = state.VolumeRequest
	HostVolume    = state.HostVolume
	PVCVolume     = state.PVCVolume
	// NamedVolume is one of a tenant's named volumes, as the API of volumes shows it.
	NamedVolume = state.NamedVolume
	// VolumeOwner is who a new named volume's root directory belongs to.
	VolumeOwner = runtimes.VolumeOwner
)

// Snapshot states.
const (
	SnapshotCreating = state.SnapshotCreating
	SnapshotReady    = state.SnapshotReady
	SnapshotFailed   = state.SnapshotFailed
	SnapshotDeleting = state.SnapshotDeleting
)

// SnapshotStates are every state a snapshot can be listed in, for the list's filter.
var SnapshotStates = state.SnapshotStates

// ExtensionIdlePause is the extension of a sandbox's idle period in seconds, and
// ReasonIdle the status reason of a sandbox paused for want of traffic.
const (
	ExtensionIdlePause = state.ExtensionIdlePause
	ReasonIdle         = state.ReasonIdle
)

// MaxVolumes bounds the volumes of one sandbox whatever the tenant's quota.
const MaxVolumes = state.MaxVolumes

// IsClaimName reports whether name may name a tenant's named volume (a DNS label).
func IsClaimName(name string) bool { return state.IsClaimName(name) }

// State is the feature of snapshots, forks, volumes and idle pause. gateway/api calls
// it directly for the snapshot and fork APIs and for the proxy's wake before a request.
func (s *Service) State() *state.Manager { return s.state }

// resolveSnapshot turns a create's snapshotId into the create of its image: the image,
// and the source's entrypoint, resource limits and egress policy where the request gives
// none. The snapshot must be the caller's and Ready.
func (s *Service) resolveSnapshot(ctx context.Context, caller Caller, req CreateRequest) (CreateRequest, error) {
	if req.SnapshotID == "" {
		return req, nil
	}
	snap, err := s.state.ReadySnapshot(ctx, caller, req.SnapshotID, req.Image != nil && req.Image.URI != "")
	if err != nil {
		return req, err
	}
	return fromSnapshot(req, snap), nil
}

// fromSnapshot is req made from snap's image, with the source's entrypoint, resource
// limits and egress policy where req gives none.
func fromSnapshot(req CreateRequest, snap *store.Snapshot) CreateRequest {
	req.Image = &ImageSpec{URI: snap.Image}
	if len(req.Entrypoint) == 0 {
		req.Entrypoint = snap.Entrypoint
	}
	if len(req.ResourceLimits) == 0 {
		req.ResourceLimits = snap.ResourceLimits
	}
	if len(req.NetworkPolicy) == 0 && len(snap.EgressPolicy) > 0 {
		req.NetworkPolicy = snap.EgressPolicy
	}
	req.SnapshotID = ""
	return req
}

// stateHost is the core as the state feature sees it (state.Host).
type stateHost struct{ s *Service }

// Lookup returns the record of a sandbox caller may see.
func (h stateHost) Lookup(ctx context.Context, caller Caller, id string) (*store.Sandbox, error) {
	return h.s.Lookup(ctx, caller, id)
}

// TenantQuotas are the tenant's quotas (admission.Manager.TenantQuotas).
func (h stateHost) TenantQuotas(ctx context.Context, tenant string) (store.Quotas, error) {
	return h.s.admission.TenantQuotas(ctx, tenant)
}

// ClusterID is this deployment's id (clusterid.go).
func (h stateHost) ClusterID(ctx context.Context) (string, error) { return h.s.recovery.ClusterID(ctx) }

// CheckClaimInput checks a fork's timeout and metadata as a batch's (input.go).
func (h stateHost) CheckClaimInput(timeout *int64, metadata map[string]string) error {
	return h.s.validateClaimInput(CreateRequest{Timeout: timeout, Metadata: metadata})
}

// StartBatch starts a fork's batch from its snapshot (package gateway/batch).
func (h stateHost) StartBatch(ctx context.Context, owner Caller, snap *store.Snapshot, req ForkRequest) (*BatchView, error) {
	tmpl := fromSnapshot(CreateRequest{}, snap)
	return h.s.batches.Create(ctx, owner, BatchRequest{Count: req.Count, Template: &tmpl, Timeout: req.Timeout, Metadata: req.Metadata}, nil)
}

// Emit writes an event to the sandbox's tenant's stream and hands it to plugins.
func (h stateHost) Emit(ctx context.Context, sb *store.Sandbox, typ string, data map[string]any) {
	h.s.emit(ctx, sb, typ, data)
}

// Audit queues a record into the tenant's audit stream (package gateway/eventlog).
func (h stateHost) Audit(tenant, source string, at time.Time, record []byte) {
	h.s.eventLog.RecordAuditFrom(tenant, source, at, record)
}

// DropRoute drops a sandbox from the route cache.
func (h stateHost) DropRoute(id string) { h.s.feed.Drop(id) }

// StoreError maps a store failure on a sandbox to the caller's error (sandboxes.go).
func (h stateHost) StoreError(id string, err error) error { return h.s.mapStoreErr(id, err) }

// HoldLease takes or renews the lease of the core's background jobs (lease.go).
func (h stateHost) HoldLease(ctx context.Context, job string) bool { return h.s.holdLease(ctx, job) }

var _ state.Host = stateHost{}
