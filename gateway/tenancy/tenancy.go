// Package tenancy is the gateway's feature of tenants and their API keys, for the
// platform admin: create, read, list and change tenants and their quotas (tenants.go);
// issue, list and revoke keys (keys.go). Tenants and keys are records in Redis (package
// gateway/store); a key's secret is shown once, when it is issued, and only its hash and
// prefix are kept. It reaches the core only through Host (host.go): telling the access
// feature that a revoked key's cached values die with it; the store it is given
// directly. It imports neither package gateway nor gateway/api.
package tenancy

import (
	"log/slog"

	"github.com/sandgate/sandgate/gateway/store"
)

// Codes of tenants and keys, re-exported by package gateway.
const (
	CodeTenantNotFound = "TENANT::NOT_FOUND"
	CodeTenantInvalid  = "TENANT::INVALID_PARAMETER"
	CodeKeyNotFound    = "KEY::NOT_FOUND"
)

// Manager owns the tenant and key operations. It holds no state of its own beyond the
// store's, and is safe for concurrent use.
type Manager struct {
	store *store.Store
	host  Host
	log   *slog.Logger
}

// New builds a Manager over the store the gateway keeps tenants and keys in.
func New(st *store.Store, host Host, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{store: st, host: host, log: log}
}
