package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Tenant is a team using the platform; every sandbox, pool, batch, plugin and audit
// record belongs to one.
type Tenant struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Quotas    Quotas    `json:"quotas"`
	CreatedAt time.Time `json:"createdAt"`
}

// Quotas are a tenant's limits; zero means unlimited (or the platform default).
type Quotas struct {
	MaxConcurrent     int64    `json:"maxConcurrent,omitempty"`
	MaxCPUMillis      int64    `json:"maxCpuMillis,omitempty"`
	MaxMemoryBytes    int64    `json:"maxMemoryBytes,omitempty"`
	MaxTimeoutSeconds int64    `json:"maxTimeoutSeconds,omitempty"`
	MaxBatchSize      int64    `json:"maxBatchSize,omitempty"`
	AllowedImages     []string `json:"allowedImages,omitempty"`
	// CreateRate is sandboxes per second refilled into the tenant's bucket; CreateBurst
	// its size (default: max(1, CreateRate)).
	CreateRate  float64 `json:"createRate,omitempty"`
	CreateBurst float64 `json:"createBurst,omitempty"`
	// Runtime, when set, is the OCI runtime every sandbox of the tenant must use.
	Runtime string `json:"runtime,omitempty"`
	// DefaultCPUMillis and DefaultMemoryBytes apply when a request names no limits.
	DefaultCPUMillis   int64 `json:"defaultCpuMillis,omitempty"`
	DefaultMemoryBytes int64 `json:"defaultMemoryBytes,omitempty"`
	// AllowManualCleanup lets the tenant create sandboxes without timeout (they never
	// expire; deleted by hand) on a gateway that otherwise requires a timeout.
	AllowManualCleanup bool `json:"allowManualCleanup,omitempty"`
	// MaxVolumes and MaxVolumeBytes bound one sandbox's volumes (count, pvc storage);
	// HostVolumePrefixes narrows the platform's host volume prefixes for the tenant and
	// DenyHostVolumes refuses it host volumes (decided by the Rego admission policy).
	MaxVolumes         int64    `json:"maxVolumes,omitempty"`
	MaxVolumeBytes     int64    `json:"maxVolumeBytes,omitempty"`
	HostVolumePrefixes []string `json:"hostVolumePrefixes,omitempty"`
	DenyHostVolumes    bool     `json:"denyHostVolumes,omitempty"`
	// MaxSnapshots bounds the snapshots a tenant keeps.
	MaxSnapshots int64 `json:"maxSnapshots,omitempty"`
}

func (s *Store) tenantsKey() string { return s.Key("tenants") }

// PutTenant creates (create=true; ErrConflict if it exists) or replaces a tenant.
func (s *Store) PutTenant(ctx context.Context, t *Tenant, create bool) error {
	body, err := json.Marshal(t)
	if err != nil {
		return err
	}
	if create {
		n, err := createFieldScript.Run(ctx, s, []string{s.tenantsKey()}, t.ID, body).Int()
		if err != nil {
			return wrap(err)
		}
		if n != 1 {
			return fmt.Errorf("tenant %s: %w", t.ID, ErrConflict)
		}
		return nil
	}
	return wrap(s.rdb.HSet(ctx, s.tenantsKey(), t.ID, body).Err())
}

// GetTenant reads one tenant.
func (s *Store) GetTenant(ctx context.Context, id string) (*Tenant, error) {
	body, err := s.rdb.HGet(ctx, s.tenantsKey(), id).Result()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("tenant %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, wrap(err)
	}
	var t Tenant
	if err := json.Unmarshal([]byte(body), &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListTenants returns every tenant.
func (s *Store) ListTenants(ctx context.Context) ([]*Tenant, error) {
	all, err := s.rdb.HGetAll(ctx, s.tenantsKey()).Result()
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]*Tenant, 0, len(all))
	for _, body := range all {
		var t Tenant
		if json.Unmarshal([]byte(body), &t) == nil {
			out = append(out, &t)
		}
	}
	return out, nil
}

// CountSandboxes returns how many sandboxes a tenant holds.
func (s *Store) CountSandboxes(ctx context.Context, tenant string) (int64, error) {
	n, err := s.rdb.ZCard(ctx, s.tenantIndex(tenant)).Result()
	return n, wrap(err)
}
