// Package principal is who calls the gateway, as the core and its feature packages see
// it: the Caller an API key or a console session resolves to, the roles of keys, and the
// kind of credential a request carried (the access policy's principal.kind). Package
// gateway re-exports Caller, the roles and the default tenant. It is a leaf: it imports
// nothing of sandgate, so that a feature package names the caller without importing
// the core.
package principal

import "context"

// DefaultTenant owns everything created with the platform admin key.
const DefaultTenant = "default"

// AdminKeyID is the key id of the configured platform admin key.
const AdminKeyID = "admin"

// Key roles.
const (
	RoleAdmin       = "admin"
	RoleTenantAdmin = "tenant-admin"
	RoleMember      = "member"
	RoleViewer      = "viewer"
)

// Caller is who makes a request: the tenant its key belongs to and the key's role.
type Caller struct {
	Tenant string
	// Admin sees every tenant.
	Admin bool
	// KeyID names the credential for audit ("admin" for the configured key).
	KeyID string
	// KeyRole is the key's role within its tenant (tenant-admin, member, viewer).
	KeyRole string
}

// Role is the policy role of a caller's key.
func (c Caller) Role() string {
	if c.Admin {
		return RoleAdmin
	}
	if c.KeyRole != "" {
		return c.KeyRole
	}
	return RoleMember
}

// Credential kinds a request can carry (the access policy's principal.kind).
const (
	CredAPIKey       = "api_key"
	CredSandboxToken = "sandbox_token"
	CredSignedLink   = "signed_link"
	CredCookie       = "cookie"
	CredAnonymous    = "anonymous"
	// CredSession is a request authenticated by a console session.
	CredSession = "session"
)

// credentialKey marks a request context with the kind of credential that authenticated
// it, so that access decisions and audit records name a console session as one.
type credentialKey struct{}

// WithCredential returns ctx marked as authenticated by a credential of kind.
func WithCredential(ctx context.Context, kind string) context.Context {
	return context.WithValue(ctx, credentialKey{}, kind)
}

// CredentialOf is the kind of credential ctx was marked with, CredAPIKey when none.
func CredentialOf(ctx context.Context) string {
	if k, ok := ctx.Value(credentialKey{}).(string); ok && k != "" {
		return k
	}
	return CredAPIKey
}
