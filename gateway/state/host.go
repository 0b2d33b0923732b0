package state

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// Host is what the state feature needs of the gateway's core. The core implements it;
// the store and the runtime the Manager is given directly.
type Host interface {
	// Lookup returns the record of a sandbox caller may see (another tenant's answers
	// like a missing one).
	Lookup(ctx context.Context, caller principal.Caller, id string) (*store.Sandbox, error)
	// TenantQuotas are tenant's quotas (snapshots, batch size).
	TenantQuotas(ctx context.Context, tenant string) (store.Quotas, error)
	// ClusterID is this deployment's id, part of every snapshot image's name.
	ClusterID(ctx context.Context) (string, error)
	// CheckClaimInput checks a fork's timeout and metadata as a batch's.
	CheckClaimInput(timeout *int64, metadata map[string]string) error
	// StartBatch starts a batch of the fork's count sandboxes from snap (Ready), owned
	// by owner, answered like a batch.
	StartBatch(ctx context.Context, owner principal.Caller, snap *store.Snapshot, req ForkRequest) (*apiproto.Batch, error)
	// Emit writes an event of sb to its tenant's stream and hands it to plugins.
	Emit(ctx context.Context, sb *store.Sandbox, typ string, data map[string]any)
	// Audit queues a record from source into tenant's audit stream.
	Audit(tenant, source string, at time.Time, record []byte)
	// DropRoute drops a sandbox from the core's route cache.
	DropRoute(id string)
	// StoreError is the caller's error for the store's failure err on sandbox id.
	StoreError(id string, err error) error
	// HoldLease takes or renews the lease the core's background jobs share; job names
	// the one asking, for the count of background errors.
	HoldLease(ctx context.Context, job string) bool
}
