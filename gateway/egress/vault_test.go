package egress

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
)

// TestPolicyBodiesWithTrailingDataRefused: a vault or egress policy body with anything
// after its JSON value (a stray '}' or ']', which json.Decoder.More does not see) is
// refused by the gateway and never relayed. The vault's bodies are the attack: relayed
// unjudged to an enforcer whose decoder accepts them, they would install a plain-http
// binding to a host the egress denies, which the Rego vault policy refuses.
func TestPolicyBodiesWithTrailingDataRefused(t *testing.T) {
	const denied = `{"name": "steal", "match": {"schemes": ["http"], "hosts": ["collect.attacker.test"]}, "auth": {"type": "bearer", "credential": "tok"}}`
	vaultBodies := []struct {
		name string
		op   VaultOp
		body string
	}{
		{"create with a stray brace", VaultCreate, `{"credentials": [{"name": "tok", "source": {"value": "v"}}], "bindings": [` + denied + `]}}`},
		{"create with a stray bracket", VaultCreate, `{"credentials": [{"name": "tok", "source": {"value": "v"}}], "bindings": [` + denied + `]}]`},
		{"change with a stray brace", VaultChange, `{"bindings": {"add": [` + denied + `]}}}`},
		{"change with a stray bracket after white space", VaultChange, "{\"bindings\": {\"add\": [" + denied + "]}}\n]"},
		{"change with a second document", VaultChange, `{"bindings": {"add": []}} {"bindings": {"add": [` + denied + `]}}`},
		{"change that is not JSON", VaultChange, `{"bindings": `},
		{"change with an unknown field", VaultChange, `{"bindings": {"add": [` + denied + `]}, "extra": 1}`},
		{"create with an unknown field in a binding", VaultCreate, `{"credentials": null, "bindings": [{"name": "b", "match": {"hosts": ["a.test"], "extra": 1}, "auth": {"type": "bearer", "credential": "tok"}}]}`},
		{"create with null lists and a stray brace", VaultCreate, `{"credentials": null, "bindings": null}}`},
	}
	s := startManager(t, true)
	// The sandbox has no address, so nothing is ever dialled: a body that got past the
	// gateway's check would come back as another error.
	sb := &store.Sandbox{ID: "trailing-data", Tenant: "t1", EgressToken: "token", State: stateRunning}
	for _, tt := range vaultBodies {
		t.Run("vault "+tt.name, func(t *testing.T) {
			_, err := s.m.Vault(context.Background(), sb, VaultRequest{Op: tt.op, Path: "/credential-vault", Body: []byte(tt.body)})
			wantCode(t, err, fault.KindInvalid, CodeVaultInvalidRequest)
			if e, _ := fault.AsError(err); strings.Contains(e.Message, `"v"`) {
				t.Fatalf("the message quotes the body: %s", e.Message)
			}
		})
	}

	own := policy.NetworkPolicy{DefaultAction: policy.ActionDeny, Egress: []policy.EgressRule{}}
	egressBodies := []struct {
		name  string
		parse func() error
	}{
		{"replace with a stray brace", func() error { _, err := replacedPolicy([]byte(`{"defaultAction": "allow"}}`)); return err }},
		{"replace with a stray bracket", func() error { _, err := replacedPolicy([]byte(`{"defaultAction": "allow"}]`)); return err }},
		{"merge array with a stray bracket", func() error {
			_, err := patchedPolicy(own, []byte(`[{"action": "allow", "target": "a.test"}]]`))
			return err
		}},
		{"merge object with a stray brace", func() error {
			_, err := patchedPolicy(own, []byte(`{"egress": [{"action": "allow", "target": "a.test"}]}}`))
			return err
		}},
		{"remove with a stray bracket", func() error { _, err := deletedPolicy(own, []byte(`["a.test"]]`), nil); return err }},
	}
	for _, tt := range egressBodies {
		t.Run("egress "+tt.name, func(t *testing.T) {
			wantCode(t, tt.parse(), fault.KindInvalid, policy.CodeInvalidEgress)
		})
	}
}

// TestVaultCreateWithNullLists: a create whose lists are null is an empty vault to the
// gateway, as to the enforcer (both decode vaultproto.Create with strictjson): nothing
// to judge, nothing refused.
func TestVaultCreateWithNullLists(t *testing.T) {
	for _, body := range []string{`{"credentials": null, "bindings": null}`, `{"credentials": [], "bindings": null}`} {
		got, err := bindingsOf(VaultCreate, []byte(body))
		if err != nil || len(got) != 0 {
			t.Fatalf("bindingsOf(%s) = %v, %v; want no bindings, no error", body, got, err)
		}
	}
}

// TestBindingsOfDefaults: the bindings judged are the enforcer's, its defaults filled in
// (https on 443, every method, every path) and hosts in their canonical form.
func TestBindingsOfDefaults(t *testing.T) {
	got, err := bindingsOf(VaultChange, []byte(`{"bindings": {"add": [{"name": "a", "match": {"schemes": ["HTTP", "https"], "hosts": [" API.Example.test. "]}, "auth": {"type": "bearer", "credential": "c"}}],
		"replace": [{"name": "b", "match": {"hosts": ["b.test"], "ports": [8443], "methods": ["GET"], "paths": ["/v1/*"]}, "auth": {"type": "header", "name": "X-Key", "credential": "c"}}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d bindings, want 2", len(got))
	}
	a, b := got[0].Match, got[1].Match
	if !slices.Equal(a.Schemes, []string{"http", "https"}) || !slices.Equal(a.Ports, []int{80, 443}) || !slices.Equal(a.Hosts, []string{"api.example.test"}) ||
		len(a.Methods) != 5 || !slices.Equal(a.Paths, []string{"/*"}) {
		t.Errorf("binding a judged as %+v", a)
	}
	if !slices.Equal(b.Schemes, []string{"https"}) || !slices.Equal(b.Ports, []int{8443}) || !slices.Equal(b.Methods, []string{"GET"}) || got[1].Auth.Name != "X-Key" {
		t.Errorf("binding b judged as %+v (auth %+v)", b, got[1].Auth)
	}
}

// TestVault: requests reach the enforcer signed and its answers come back as it gave
// them; a binding Rego refuses never reaches it; changes are events, reads are not.
func TestVault(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, true)
	sb, enf := s.runningSandbox(t, "t1")
	if err := s.m.BindClaim(ctx, sb, json.RawMessage(`{"defaultAction": "deny", "egress": [{"action": "allow", "target": "api.example.test"}]}`)); err != nil {
		t.Fatal(err)
	}
	allowed := `{"credentials": [{"name": "tok", "source": {"value": "secret"}}], "bindings": [{"name": "api", "match": {"hosts": ["api.example.test"]}, "auth": {"type": "bearer", "credential": "tok"}}]}`
	tests := []struct {
		name       string
		req        VaultRequest
		wantStatus int
		wantEvent  bool
	}{
		{"create", VaultRequest{Op: VaultCreate, Path: "/credential-vault", Body: []byte(allowed), KeyID: "k1"}, 201, true},
		{"read", VaultRequest{Op: VaultRead, Path: "/credential-vault/bindings"}, 200, false},
		{"change", VaultRequest{Op: VaultChange, Path: "/credential-vault", Body: []byte(`{"bindings": {"delete": ["api"]}}`), KeyID: "k1"}, 200, true},
		{"replace, which the vault API lacks", VaultRequest{Op: VaultReplace, Path: "/credential-vault", Body: []byte(`{}`)}, 405, true},
		{"delete", VaultRequest{Op: VaultDelete, Path: "/credential-vault"}, 204, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(s.host.events("sandbox.vault.updated"))
			answer, err := s.m.Vault(ctx, sb, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if answer.Status != tt.wantStatus {
				t.Fatalf("status %d, want %d (%s)", answer.Status, tt.wantStatus, answer.Body)
			}
			events := s.host.events("sandbox.vault.updated")
			if got := len(events) > before; got != tt.wantEvent {
				t.Fatalf("event emitted: %v, want %v", got, tt.wantEvent)
			}
			if tt.wantEvent {
				ev := events[len(events)-1]
				if ev.Data["operation"] != string(tt.req.Op) || ev.Data["key"] != tt.req.KeyID || ev.Data["status"] != tt.wantStatus {
					t.Errorf("event data %v", ev.Data)
				}
			}
		})
	}

	enf.set(func(f *fakeEnforcer) { f.vault = nil })
	denied := `{"credentials": [{"name": "tok", "source": {"value": "secret"}}], "bindings": [{"name": "steal", "match": {"schemes": ["http"], "hosts": ["collect.attacker.test"]}, "auth": {"type": "bearer", "credential": "tok"}}]}`
	_, err := s.m.Vault(ctx, sb, VaultRequest{Op: VaultCreate, Path: "/credential-vault", Body: []byte(denied)})
	if e, ok := fault.AsError(err); !ok || e.Kind != fault.KindForbidden {
		t.Fatalf("a binding to a host the egress denies: err = %v, want a denial", err)
	}
	if len(enf.vault) != 0 {
		t.Fatalf("a denied create reached the enforcer: %v", enf.vault)
	}

	_, err = s.m.Vault(ctx, sb, VaultRequest{Op: VaultRead, Path: "/credential-vault/%zz"})
	wantCode(t, err, fault.KindInvalid, fault.CodeInvalidParameter)
	_, err = s.m.Vault(ctx, sb, VaultRequest{Op: "copy", Path: "/credential-vault"})
	wantCode(t, err, fault.KindMethodNotAllowed, CodeVaultInvalidRequest)

	// The egress policy the bindings are judged against cannot be read: nothing is judged,
	// nothing relayed.
	enf.set(func(f *fakeEnforcer) { f.refuse = 503 })
	_, err = s.m.Vault(ctx, sb, VaultRequest{Op: VaultCreate, Path: "/credential-vault", Body: []byte(allowed)})
	wantCode(t, err, fault.KindUpstream, CodeEgressUnavailable)
	enf.set(func(f *fakeEnforcer) { f.refuse, f.unsigned = 0, true })
	_, err = s.m.Vault(ctx, sb, VaultRequest{Op: VaultRead, Path: "/credential-vault"})
	wantCode(t, err, fault.KindUpstream, CodeEgressUnavailable)

	for _, p := range []string{"/credential-vault", "/credential-vault/bindings/api"} {
		if !IsVaultPath(p) {
			t.Errorf("IsVaultPath(%q) = false", p)
		}
	}
	for _, p := range []string{"/policy", "/credential-vaults", "/"} {
		if IsVaultPath(p) {
			t.Errorf("IsVaultPath(%q) = true", p)
		}
	}
}

// TestDrainVaultAudit: a running sandbox with the vault has its injection records moved
// into its tenant's audit stream; a sandbox without the vault is not asked.
func TestDrainVaultAudit(t *testing.T) {
	s := startManager(t, true)
	sb, enf := s.runningSandbox(t, "t1")
	enf.set(func(f *fakeEnforcer) {
		f.audit = []byte(`{"records": [{"time": "2026-01-02T03:04:05Z", "binding": "api", "host": "api.example.test", "method": "GET", "path": "/v1", "status": 200},
			{"time": "2026-01-02T03:04:06Z", "binding": "api", "host": "api.example.test", "method": "POST", "path": "/v1", "status": 201}], "dropped": 3}`)
	})
	s.m.DrainVaultAudit(sb, runtimes.Instance{ID: sb.ID})
	with := runtimes.Instance{ID: sb.ID, Labels: map[string]string{runtimes.LabelCredentialProxy: "true"}}
	s.m.DrainVaultAudit(sb, with)
	waitFor(t, "the audit records", func() bool {
		s.host.mu.Lock()
		defer s.host.mu.Unlock()
		return len(s.host.audits) == 2
	})
	a := s.host.audits[1]
	if a.tenant != "t1" || a.source != "vault" || a.record["type"] != "vault.injection" || a.record["sandboxId"] != sb.ID || a.record["method"] != "POST" {
		t.Errorf("audit record %+v", a)
	}

	enf.set(func(f *fakeEnforcer) { f.audit = []byte(`not json`) })
	s.m.DrainVaultAudit(sb, with)
	s.m.Stop()
	s.m.DrainVaultAudit(sb, with) // once stopped, nothing starts
	if n := len(s.host.audits); n != 2 {
		t.Errorf("%d audit records after an unreadable drain, want 2", n)
	}
}
