package principal

import (
	"context"
	"testing"
)

// TestRole: an admin key is admin whatever its role; a key without a role is a member.
func TestRole(t *testing.T) {
	tests := []struct {
		name   string
		caller Caller
		want   string
	}{
		{"admin", Caller{Admin: true, KeyRole: RoleViewer}, RoleAdmin},
		{"tenant-admin", Caller{Tenant: "t1", KeyRole: RoleTenantAdmin}, RoleTenantAdmin},
		{"viewer", Caller{Tenant: "t1", KeyRole: RoleViewer}, RoleViewer},
		{"no role", Caller{Tenant: "t1"}, RoleMember},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.caller.Role(); got != tt.want {
				t.Fatalf("Role() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCredentialOf: a context names the credential it was marked with, an API key when
// it was not marked.
func TestCredentialOf(t *testing.T) {
	ctx := context.Background()
	if got := CredentialOf(ctx); got != CredAPIKey {
		t.Fatalf("unmarked: %q, want %q", got, CredAPIKey)
	}
	if got := CredentialOf(WithCredential(ctx, CredSession)); got != CredSession {
		t.Fatalf("marked: %q, want %q", got, CredSession)
	}
	if got := CredentialOf(WithCredential(ctx, "")); got != CredAPIKey {
		t.Fatalf("marked empty: %q, want %q", got, CredAPIKey)
	}
}
