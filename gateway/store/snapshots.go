package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Snapshot is the record of one snapshot: a sandbox's filesystem kept as a runtime image
// owned by a tenant. It outlives its sandbox.
type Snapshot struct {
	ID        string `json:"id"`
	Tenant    string `json:"tenant"`
	SandboxID string `json:"sandboxId"`
	Name      string `json:"name,omitempty"`
	// State is Creating, Ready, Failed or Deleting.
	State            string    `json:"state"`
	Reason           string    `json:"reason,omitempty"`
	Message          string    `json:"message,omitempty"`
	LastTransitionAt time.Time `json:"lastTransitionAt"`
	CreatedAt        time.Time `json:"createdAt"`
	// Image is the runtime's reference of the snapshot (a local image on Docker).
	Image string `json:"image"`
	// SourceImage, Entrypoint, ResourceLimits and EgressPolicy are the source's, the
	// defaults of a sandbox created from the snapshot.
	SourceImage    string            `json:"sourceImage,omitempty"`
	Entrypoint     []string          `json:"entrypoint,omitempty"`
	ResourceLimits map[string]string `json:"resourceLimits,omitempty"`
	EgressPolicy   json.RawMessage   `json:"egressPolicy,omitempty"`
}

// Snapshots live in one hash, field tenant/id → JSON, like pools.
func (s *Store) snapshotsKey() string { return s.Key("snapshots") }

func snapshotField(tenant, id string) string { return tenant + "/" + id }

// PutSnapshot writes a snapshot record (create or replace).
func (s *Store) PutSnapshot(ctx context.Context, snap *Snapshot) error {
	body, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	return wrap(s.rdb.HSet(ctx, s.snapshotsKey(), snapshotField(snap.Tenant, snap.ID), body).Err())
}

// CreateSnapshot writes a new snapshot record unless the tenant already keeps max
// snapshots (max 0: no limit); ErrQuota then.
func (s *Store) CreateSnapshot(ctx context.Context, snap *Snapshot, max int64) error {
	body, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	n, err := createSnapshotScript.Run(ctx, s.rdb, []string{s.snapshotsKey()}, snapshotField(snap.Tenant, snap.ID), body, snap.Tenant+"/", max).Int()
	if err != nil {
		return wrap(err)
	}
	if n < 0 {
		return fmt.Errorf("snapshots of tenant %s: %w", snap.Tenant, ErrQuota)
	}
	return nil
}

// The count and the write are one step, so that gateways creating at once cannot
// together pass the quota.
var createSnapshotScript = redis.NewScript(`
-- KEYS: snapshots hash; ARGV: field, json, tenantPrefix, max (0 = none)
local max = tonumber(ARGV[4])
-- A snapshot already written (by this create sent again, its answer late) counts already.
if max > 0 and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  local n = 0
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(f, 1, #ARGV[3]) == ARGV[3] then n = n + 1 end
  end
  if n >= max then return -1 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// GetSnapshot reads one snapshot of tenant; ErrNotFound when the tenant has none of that id.
func (s *Store) GetSnapshot(ctx context.Context, tenant, id string) (*Snapshot, error) {
	body, err := s.rdb.HGet(ctx, s.snapshotsKey(), snapshotField(tenant, id)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("snapshot %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, wrap(err)
	}
	var snap Snapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		return nil, fmt.Errorf("decode snapshot: %w", err)
	}
	return &snap, nil
}

// ListSnapshots returns the snapshots of tenant ("" = every tenant).
func (s *Store) ListSnapshots(ctx context.Context, tenant string) ([]*Snapshot, error) {
	all, err := s.rdb.HGetAll(ctx, s.snapshotsKey()).Result()
	if err != nil {
		return nil, wrap(err)
	}
	out := []*Snapshot{}
	for field, body := range all {
		if tenant != "" && !strings.HasPrefix(field, tenant+"/") {
			continue
		}
		var snap Snapshot
		if json.Unmarshal([]byte(body), &snap) == nil {
			out = append(out, &snap)
		}
	}
	return out, nil
}

// DeleteSnapshot removes a snapshot record.
func (s *Store) DeleteSnapshot(ctx context.Context, tenant, id string) error {
	return wrap(s.rdb.HDel(ctx, s.snapshotsKey(), snapshotField(tenant, id)).Err())
}
