package access

import (
	"context"
	"testing"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/runtimes"
)

// TestAuthorizeProxy: the access decision of proxied requests under the embedded Rego:
// the owning tenant's key and the sandbox's own credentials pass; another tenant's key,
// or a credential bound to another sandbox or port, finds nothing; a viewer is refused; an anonymous caller needs a credential except on a public sandbox's
// workload ports, never its platform ports.
func TestAuthorizeProxy(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	private := s.putSandbox(t, "t1", nil, nil)
	public := s.putSandbox(t, "t1", map[string]string{ExtensionPublic: "true"}, nil)
	member := &principal.Caller{Tenant: "t1", KeyID: "k1", KeyRole: principal.RoleMember}
	stranger := &principal.Caller{Tenant: "t2", KeyID: "k2", KeyRole: principal.RoleMember}
	viewer := &principal.Caller{Tenant: "t1", KeyID: "k3", KeyRole: principal.RoleViewer}

	tests := []struct {
		name   string
		public bool
		port   int
		access ProxyAccess
		kind   fault.Kind // "" = allowed
		code   string
	}{
		{"owner's key", false, runtimes.AgentPort, ProxyAccess{Kind: principal.CredAPIKey, Caller: member}, "", ""},
		{"another tenant's key", false, 8000, ProxyAccess{Kind: principal.CredAPIKey, Caller: stranger}, fault.KindNotFound, fault.CodeNotFound},
		{"sandbox token", false, runtimes.AgentPort, ProxyAccess{Kind: principal.CredSandboxToken, Sandbox: "self"}, "", ""},
		{"signed link, its port", false, 8000, ProxyAccess{Kind: principal.CredSignedLink, Sandbox: "self", Port: 8000}, "", ""},
		{"signed link, another port", false, 8001, ProxyAccess{Kind: principal.CredSignedLink, Sandbox: "self", Port: 8000}, fault.KindNotFound, fault.CodeNotFound},
		{"cookie of another sandbox", false, 8000, ProxyAccess{Kind: principal.CredCookie, Sandbox: "other", Port: 8000}, fault.KindNotFound, fault.CodeNotFound},
		{"viewer's key", false, 8000, ProxyAccess{Kind: principal.CredAPIKey, Caller: viewer}, fault.KindForbidden, CodeAccessDenied},
		{"anonymous", false, 8000, ProxyAccess{Kind: principal.CredAnonymous}, fault.KindUnauthenticated, fault.CodeMissingAPIKey},
		{"anonymous, public workload port", true, 8000, ProxyAccess{Kind: principal.CredAnonymous}, "", ""},
		{"anonymous, public sandbox's agent", true, runtimes.AgentPort, ProxyAccess{Kind: principal.CredAnonymous}, fault.KindUnauthenticated, fault.CodeMissingAPIKey},
		{"anonymous, public sandbox's enforcer", true, runtimes.EgressPort, ProxyAccess{Kind: principal.CredAnonymous}, fault.KindUnauthenticated, fault.CodeMissingAPIKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := private
			if tt.public {
				sb = public
			}
			a := tt.access
			if a.Sandbox == "self" {
				a.Sandbox = sb.ID
			}
			a.Method, a.Path = "GET", "/"
			err := s.m.AuthorizeProxy(ctx, sb, tt.port, a)
			if tt.kind == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			wantCode(t, err, tt.kind, tt.code)
		})
	}
}
