package gateway

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
)

// TestOpenUpstream runs the data plane's one call on a real sandbox of the in-process
// runtime: each credential form, each refusal with its kind and code, a signed link's
// exchange, the agent's token and the enforcer's own APIs, and where a request goes.
func TestOpenUpstream(t *testing.T) {
	c := newTestCore(t, Config{})
	ctx := context.Background()
	created, err := c.svc.Create(ctx, admin, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.svc.Route(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	const port = 8080
	accessValue, err := c.svc.Access().HeaderValue(ctx, sb, admin.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	link, err := c.svc.Access().SignLink(ctx, sb.ID, port, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	otherPortLink, err := c.svc.Access().SignLink(ctx, sb.ID, port+1, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cookie, err := c.svc.Access().SessionCookie(ctx, sb.ID, port, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	originRefused := Errorf(KindForbidden, CodeOriginRefused, "not the preview's origin")
	key := func(k string) access.Credential { return access.Credential{Form: access.PresentedAPIKey, Value: k} }
	for _, tt := range []struct {
		name     string
		bearer   string
		id       string
		port     int
		method   string
		path     string
		cred     access.Credential
		wantKind Kind
		wantCode string
		want     func(t *testing.T, up *Upstream)
	}{
		{name: "an id that is no UUID is not found", id: "nope", cred: key("admin-key"), wantKind: KindNotFound, wantCode: CodeNotFound},
		{name: "an unknown sandbox is not found before any credential is looked at", id: uuid.NewString(), wantKind: KindNotFound, wantCode: CodeNotFound},
		{name: "no credential is refused as unauthenticated", wantKind: KindUnauthenticated, wantCode: CodeMissingAPIKey},
		{name: "a wrong API key is refused", cred: key("wrong"), wantKind: KindUnauthenticated, wantCode: CodeInvalidAPIKey},
		{name: "a wrong token header is forbidden", cred: access.Credential{Form: access.PresentedToken, Value: "wrong"}, wantKind: KindForbidden, wantCode: CodeForbidden},
		{name: "a link for another port is refused", cred: access.Credential{Form: access.PresentedLink, Value: otherPortLink}, wantKind: KindUnauthenticated},
		{name: "a valid cookie from another origin is refused", cred: access.Credential{Form: access.PresentedCookies, Cookies: []string{"junk", cookie}, CookieOrigin: originRefused}, wantKind: KindForbidden, wantCode: CodeOriginRefused},
		{name: "the admin key goes to the sandbox's address", cred: key("admin-key"), want: func(t *testing.T, up *Upstream) {
			if want := net.JoinHostPort(sb.Address, strconv.Itoa(port)); up.Address != want {
				t.Errorf("address = %q, want %q", up.Address, want)
			}
			if up.Access.Kind != principal.CredAPIKey || up.Access.Caller == nil || !up.Access.Caller.Admin {
				t.Errorf("access = %+v, want the admin's API key", up.Access)
			}
			if up.AgentToken != "" || up.Egress != EgressForward || up.LinkCookie != "" {
				t.Errorf("upstream = %+v: a workload port gets no token, no egress answer, no link exchange", up)
			}
		}},
		{name: "an access value in a token header is the sandbox's token", cred: access.Credential{Form: access.PresentedToken, Value: accessValue}, want: func(t *testing.T, up *Upstream) {
			if up.Access.Kind != principal.CredSandboxToken {
				t.Errorf("credential = %q, want %q", up.Access.Kind, principal.CredSandboxToken)
			}
		}},
		{name: "an API key in a token header is the key", cred: access.Credential{Form: access.PresentedToken, Value: "admin-key"}, want: func(t *testing.T, up *Upstream) {
			if up.Access.Kind != principal.CredAPIKey {
				t.Errorf("credential = %q, want %q", up.Access.Kind, principal.CredAPIKey)
			}
		}},
		{name: "the preview's cookie among others opens it", cred: access.Credential{Form: access.PresentedCookies, Cookies: []string{"junk", cookie}}, want: func(t *testing.T, up *Upstream) {
			if up.Access.Kind != principal.CredCookie {
				t.Errorf("credential = %q, want %q", up.Access.Kind, principal.CredCookie)
			}
		}},
		{name: "a signed link's GET is traded for a cookie", cred: access.Credential{Form: access.PresentedLink, Value: link}, want: func(t *testing.T, up *Upstream) {
			if up.LinkCookie == "" || up.LinkExpires.IsZero() || up.Address != "" {
				t.Errorf("upstream = %+v, want a cookie to set and nothing to forward to", up)
			}
			if err := c.svc.Access().VerifyCookie(ctx, up.LinkCookie, sb.ID, port); err != nil {
				t.Errorf("the traded cookie: %v", err)
			}
		}},
		{name: "a signed link's POST is forwarded", method: "POST", cred: access.Credential{Form: access.PresentedLink, Value: link}, want: func(t *testing.T, up *Upstream) {
			if up.LinkCookie != "" || up.Address == "" {
				t.Errorf("upstream = %+v, want it forwarded", up)
			}
		}},
		{name: "the agent's port carries the agent's token", port: agentproto.AgentPort, cred: key("admin-key"), want: func(t *testing.T, up *Upstream) {
			if up.AgentToken == "" || up.AgentToken != up.Sandbox.AgentCredential() {
				t.Errorf("agent token = %q, want the sandbox's", up.AgentToken)
			}
		}},
		{name: "an API key in Authorization is dropped", bearer: "admin-key", cred: access.Credential{Form: access.PresentedToken, Value: accessValue}, want: func(t *testing.T, up *Upstream) {
			if !up.DropAuthorization {
				t.Error("the gateway's API key would reach the sandbox")
			}
		}},
		{name: "the sandbox's own Authorization is kept", bearer: "their-token", cred: key("admin-key"), want: func(t *testing.T, up *Upstream) {
			if up.DropAuthorization {
				t.Error("a token that is no API key of the gateway's would be dropped")
			}
		}},
		{name: "the enforcer's /policy is the gateway's to answer", port: agentproto.EgressPort, path: "/policy", cred: key("admin-key"), want: wantEgress(EgressPolicy, "/policy")},
		{name: "the enforcer's vault is the gateway's to answer", port: agentproto.EgressPort, method: "PUT", path: "/credential-vault/a%20b", cred: key("admin-key"), want: wantEgress(EgressVault, "/credential-vault/a b")},
		{name: "the enforcer's other paths are forwarded", port: agentproto.EgressPort, path: "/healthz", cred: key("admin-key"), want: wantEgress(EgressForward, "/healthz")},
		{name: "a method of neither enforcer API is forwarded", port: agentproto.EgressPort, method: "OPTIONS", path: "/policy", cred: key("admin-key"), want: wantEgress(EgressForward, "")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := UpstreamRequest{Sandbox: tt.id, Port: tt.port, Method: tt.method, Path: tt.path, Credential: tt.cred, Bearer: tt.bearer}
			if req.Sandbox == "" {
				req.Sandbox = sb.ID
			}
			if req.Port == 0 {
				req.Port = port
			}
			if req.Method == "" {
				req.Method = "GET"
			}
			up, err := c.svc.OpenUpstream(ctx, req)
			if tt.want == nil {
				wantCode(t, err, tt.wantKind, tt.wantCode)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer up.Release(UpstreamAnswer{})
			tt.want(t, up)
		})
	}
}

func wantEgress(api EgressAPI, path string) func(t *testing.T, up *Upstream) {
	return func(t *testing.T, up *Upstream) {
		if up.Egress != api || up.EgressPath != path {
			t.Errorf("egress = %v %q, want %v %q", up.Egress, up.EgressPath, api, path)
		}
	}
}

// TestOpenUpstreamRefusesSandboxesNotRunning: a paused sandbox's ports do not answer
// (SANDBOX::NOT_RUNNING), after the credential and the access decision.
func TestOpenUpstreamRefusesSandboxesNotRunning(t *testing.T) {
	c := newTestCore(t, Config{})
	ctx := context.Background()
	created, err := c.svc.Create(ctx, admin, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.svc.Pause(ctx, admin, created.ID); err != nil {
		t.Skipf("the in-process runtime cannot pause: %v", err)
	}
	req := UpstreamRequest{Sandbox: created.ID, Port: 8080, Method: "GET", Path: "/"}
	_, err = c.svc.OpenUpstream(ctx, req)
	wantCode(t, err, KindUnauthenticated, CodeMissingAPIKey)
	req.Credential = access.Credential{Form: access.PresentedEstablished, Established: &access.ProxyAccess{Kind: principal.CredAPIKey, Caller: &admin}}
	_, err = c.svc.OpenUpstream(ctx, req)
	wantCode(t, err, KindUnavailable, CodeNotRunning)
}
