package egress

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

func bearer(name, host string, paths ...string) Binding {
	return Binding{Name: name, Match: BindingMatch{Hosts: []string{host}, Paths: paths}, Auth: BindingAuth{Type: AuthBearer, Credential: "tok"}}
}

var tokCred = Credential{Name: "tok", Source: CredentialSource{Type: "inline", Value: "s3cret-value"}}

func TestVaultCreateRefusals(t *testing.T) {
	tests := []struct {
		name string
		req  VaultCreate
		code string
	}{
		{"unknown auth type", VaultCreate{Credentials: []Credential{tokCred}, Bindings: []Binding{{Name: "b", Match: BindingMatch{Hosts: []string{"a.test"}}, Auth: BindingAuth{Type: "oauth", Credential: "tok"}}}}, CodeVaultUnknownAuth},
		{"unknown credential", VaultCreate{Credentials: nil, Bindings: []Binding{bearer("b", "a.test")}}, CodeVaultUnknownCred},
		{"same host and path", VaultCreate{Credentials: []Credential{tokCred}, Bindings: []Binding{bearer("b1", "a.test"), bearer("b2", "a.test")}}, CodeVaultOverlap},
		{"wildcard covers host", VaultCreate{Credentials: []Credential{tokCred}, Bindings: []Binding{bearer("b1", "*.test", "/v1/*"), bearer("b2", "a.test", "/v1/x")}}, CodeVaultOverlap},
		{"path globs share a prefix", VaultCreate{Credentials: []Credential{tokCred}, Bindings: []Binding{bearer("b1", "a.test", "/v1/*"), bearer("b2", "a.test", "/v1/models/*")}}, CodeVaultOverlap},
		{"header name not a token", VaultCreate{Credentials: []Credential{tokCred}, Bindings: []Binding{{Name: "b", Match: BindingMatch{Hosts: []string{"a.test"}}, Auth: BindingAuth{Type: AuthAPIKey, Name: "X Key", Credential: "tok"}}}}, CodeVaultHeaderName},
		{"header that frames the request", VaultCreate{Credentials: []Credential{tokCred}, Bindings: []Binding{{Name: "b", Match: BindingMatch{Hosts: []string{"a.test"}}, Auth: BindingAuth{Type: AuthCustomHeaders, Headers: []HeaderSource{{Name: "Content-Length", Credential: "tok"}}}}}}, CodeVaultHeaderName},
		{"value with CR LF", VaultCreate{Credentials: []Credential{{Name: "tok", Source: CredentialSource{Value: "a\r\nX-Evil: 1"}}}, Bindings: nil}, CodeVaultValue},
		{"value with NUL", VaultCreate{Credentials: []Credential{{Name: "tok", Source: CredentialSource{Value: "a\x00b"}}}, Bindings: nil}, CodeVaultValue},
		{"empty value", VaultCreate{Credentials: []Credential{{Name: "tok"}}, Bindings: nil}, CodeVaultValue},
		{"duplicate credential", VaultCreate{Credentials: []Credential{tokCred, tokCred}, Bindings: nil}, CodeVaultDuplicate},
		{"IP host", VaultCreate{Credentials: []Credential{tokCred}, Bindings: []Binding{bearer("b", "10.0.0.1")}}, CodeVaultMatch},
		{"bad scheme", VaultCreate{Credentials: []Credential{tokCred}, Bindings: []Binding{{Name: "b", Match: BindingMatch{Schemes: []string{"ftp"}, Hosts: []string{"a.test"}}, Auth: BindingAuth{Type: AuthBearer, Credential: "tok"}}}}, CodeVaultMatch},
		{"path without slash", VaultCreate{Credentials: []Credential{tokCred}, Bindings: []Binding{bearer("b", "a.test", "v1/*")}}, CodeVaultMatch},
		{"name with a slash", VaultCreate{Credentials: []Credential{{Name: "a/b", Source: CredentialSource{Value: "v"}}}, Bindings: nil}, CodeVaultInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newVault(tt.req)
			if err == nil || err.Code != tt.code || err.Status != http.StatusBadRequest {
				t.Fatalf("newVault = %v, want 400 %s", err, tt.code)
			}
			if strings.Contains(err.Message, "s3cret-value") || strings.Contains(err.Message, "X-Evil") {
				t.Fatalf("the message quotes a value: %s", err.Message)
			}
		})
	}
}

func TestVaultDisjointBindingsAndMatching(t *testing.T) {
	v, err := newVault(VaultCreate{
		Credentials: []Credential{tokCred, {Name: "k", Source: CredentialSource{Value: "kv"}}},
		Bindings: []Binding{
			bearer("v1", "api.test", "/v1/*"),
			bearer("v2", "api.test", "/v2/*"),
			{Name: "key", Match: BindingMatch{Hosts: []string{"*.other.test"}, Methods: []string{"post"}}, Auth: BindingAuth{Type: AuthAPIKey, Name: "x-api-key", Credential: "k"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		req  vaultRequest
		want string
	}{
		{vaultRequest{"https", "api.test", "GET", "/v1/models", 443}, "v1"},
		{vaultRequest{"https", "api.test", "GET", "/v2/a/b", 443}, "v2"},
		{vaultRequest{"https", "api.test", "GET", "/v3", 443}, ""},
		{vaultRequest{"https", "api.test", "GET", "/v1/x", 8443}, ""},
		{vaultRequest{"http", "api.test", "GET", "/v1/x", 443}, ""},
		{vaultRequest{"https", "a.other.test", "POST", "/", 443}, "key"},
		{vaultRequest{"https", "other.test", "POST", "/", 443}, ""},
		{vaultRequest{"https", "a.other.test", "GET", "/", 443}, ""},
	} {
		got := v.matching(tt.req)
		name := ""
		if len(got) == 1 {
			name = got[0].Name
		}
		if len(got) > 1 || name != tt.want {
			t.Errorf("matching(%+v) = %v, want %q", tt.req, got, tt.want)
		}
	}
	if h := v.headers(v.Bindings[2]); len(h) != 1 || h[0] != [2]string{"x-api-key", "kv"} {
		t.Errorf("apiKey headers = %v", h)
	}
	if !v.names("x.other.test") || v.names("nope.test") {
		t.Error("names() is wrong")
	}
}

func TestVaultMutationRevisions(t *testing.T) {
	v, err := newVault(VaultCreate{Credentials: []Credential{tokCred}, Bindings: []Binding{bearer("b", "a.test")}})
	if err != nil {
		t.Fatal(err)
	}
	stale := int64(0)
	if _, err := v.mutate(VaultMutation{ExpectedRevision: &stale}); err == nil || err.Status != http.StatusConflict || err.Code != CodeVaultStale {
		t.Fatalf("stale revision: %v", err)
	}
	cur := v.Revision
	next, err := v.mutate(VaultMutation{ExpectedRevision: &cur,
		Credentials: &CredentialChanges{Replace: []Credential{{Name: "tok", Source: CredentialSource{Value: "new"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if next.Revision != 2 || next.Credentials[0].Revision != 2 || next.Bindings[0].Revision != 1 || v.Credentials[0].Value != "s3cret-value" {
		t.Fatalf("revisions after replace: %+v (old %+v)", next, v)
	}
	if _, err := next.mutate(VaultMutation{Credentials: &CredentialChanges{Delete: []string{"tok"}}}); err == nil || err.Code != CodeVaultUnknownCred {
		t.Fatalf("deleting a bound credential: %v", err)
	}
	if _, err := next.mutate(VaultMutation{Bindings: &BindingChanges{Replace: []Binding{bearer("zz", "a.test")}}}); err == nil || err.Status != http.StatusNotFound {
		t.Fatalf("replacing a missing binding: %v", err)
	}
	js, _ := json.Marshal(next.view())
	if strings.Contains(string(js), "new") && strings.Contains(string(js), `"value"`) {
		t.Fatalf("the view holds a value: %s", js)
	}
}

func TestVaultStateFileRoundTrip(t *testing.T) {
	s := &stateFile{path: filepath.Join(t.TempDir(), "policy.json")}
	p := Policy{DefaultAction: ActionDeny, Egress: []Rule{{Action: ActionAllow, Target: "a.test"}}}
	if err := s.save(p); err != nil {
		t.Fatal(err)
	}
	v, verr := newVault(VaultCreate{Credentials: []Credential{tokCred}, Bindings: []Binding{bearer("b", "a.test")}})
	if verr != nil {
		t.Fatal(verr)
	}
	if err := s.saveVault(v); err != nil {
		t.Fatal(err)
	}
	// A policy change keeps the vault, and a vault change the policy.
	if err := s.save(Policy{DefaultAction: ActionAllow, Egress: []Rule{}}); err != nil {
		t.Fatal(err)
	}
	again := &stateFile{path: s.path}
	got, ok, err := again.load(DefaultMaxRules)
	if err != nil || !ok || got.DefaultAction != ActionAllow {
		t.Fatalf("load = %+v %v %v", got, ok, err)
	}
	sv := again.savedVault()
	if sv == nil || sv.Revision != 1 || sv.value("tok") != "s3cret-value" || len(sv.Bindings) != 1 {
		t.Fatalf("saved vault = %+v", sv)
	}
}

// TestPolicyBodiesWithTrailingDataRefused: the enforcer refuses a vault or policy body
// with anything after its JSON value, as the gateway does (both decode with
// strictjson.Decode). json.Decoder.More alone does not see a stray '}' or ']': a body
// the gateway cannot parse, and so never judges, must not be one the enforcer installs.
func TestPolicyBodiesWithTrailingDataRefused(t *testing.T) {
	const binding = `{"name": "b", "match": {"schemes": ["http"], "hosts": ["a.test"]}, "auth": {"type": "bearer", "credential": "tok"}}`
	for _, tt := range []struct {
		name string
		body string
		into any
	}{
		{"vault POST with a stray brace", `{"credentials": [{"name": "tok", "source": {"value": "v"}}], "bindings": [` + binding + `]}}`, &VaultCreate{}},
		{"vault POST with a stray bracket", `{"credentials": [{"name": "tok", "source": {"value": "v"}}], "bindings": [` + binding + `]}]`, &VaultCreate{}},
		{"vault PATCH with a stray brace", `{"bindings": {"add": [` + binding + `]}}}`, &VaultMutation{}},
		{"vault PATCH with a stray bracket after white space", "{\"bindings\": {\"add\": [" + binding + "]}}\n]", &VaultMutation{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := decodeVaultJSON([]byte(tt.body), tt.into)
			if err == nil || err.Status != http.StatusBadRequest || err.Code != CodeVaultInvalid {
				t.Fatalf("decodeVaultJSON = %v, want 400 %s", err, CodeVaultInvalid)
			}
		})
	}

	a := &api{maxRules: DefaultMaxRules}
	current := Policy{DefaultAction: ActionDeny, Egress: []Rule{}}
	for _, tt := range []struct {
		name  string
		parse func() (Policy, error)
	}{
		{"policy PUT with a stray brace", func() (Policy, error) { return ParsePolicy([]byte(`{"defaultAction": "allow"}}`), DefaultMaxRules) }},
		{"policy PUT with a stray bracket", func() (Policy, error) { return ParsePolicy([]byte(`{"defaultAction": "allow"}]`), DefaultMaxRules) }},
		{"policy PATCH array with a stray bracket", func() (Policy, error) {
			return a.patched(current, []byte(`[{"action": "allow", "target": "a.test"}]]`))
		}},
		{"policy PATCH object with a stray brace", func() (Policy, error) {
			return a.patched(current, []byte(`{"egress": [{"action": "allow", "target": "a.test"}]}}`))
		}},
		{"policy DELETE with a stray bracket", func() (Policy, error) {
			return a.deleted(current, []byte(`["a.test"]]`), httptest.NewRequest(http.MethodDelete, "/policy", nil))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if p, err := tt.parse(); err == nil {
				t.Fatalf("accepted as %+v", p)
			}
		})
	}
}

// TestVaultCreateBody: a create's credentials and bindings must both be given; null for
// either is the empty list, and a body with nothing to inject makes an empty vault.
func TestVaultCreateBody(t *testing.T) {
	for _, tt := range []struct {
		name, body  string
		credentials int
		bindings    int
		code        string // empty: accepted
	}{
		{"both null", `{"credentials": null, "bindings": null}`, 0, 0, ""},
		{"both empty", `{"credentials": [], "bindings": []}`, 0, 0, ""},
		{"credentials null", `{"credentials": null, "bindings": []}`, 0, 0, ""},
		{"one credential, bindings null", `{"credentials": [{"name": "tok", "source": {"value": "v"}}], "bindings": null}`, 1, 0, ""},
		{"bindings absent", `{"credentials": []}`, 0, 0, CodeVaultInvalid},
		{"both absent", `{}`, 0, 0, CodeVaultInvalid},
		{"unknown field in a credential", `{"credentials": [{"name": "tok", "source": {"value": "v"}, "x": 1}], "bindings": null}`, 0, 0, CodeVaultInvalid},
		{"null with a stray brace", `{"credentials": null, "bindings": null}}`, 0, 0, CodeVaultInvalid},
		{"credentials not a list", `{"credentials": {}, "bindings": null}`, 0, 0, CodeVaultInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, verr := decodeVaultCreate([]byte(tt.body))
			if tt.code != "" {
				if verr == nil || verr.Code != tt.code || verr.Status != http.StatusBadRequest {
					t.Fatalf("decodeVaultCreate = %+v, %v, want 400 %s", req, verr, tt.code)
				}
				return
			}
			if verr != nil {
				t.Fatalf("decodeVaultCreate: %v", verr)
			}
			st, verr := newVault(req)
			if verr != nil {
				t.Fatalf("newVault: %v", verr)
			}
			if v := st.view(); len(v.Credentials) != tt.credentials || len(v.Bindings) != tt.bindings || v.Credentials == nil || v.Bindings == nil {
				t.Fatalf("vault = %+v, want %d credentials and %d bindings, as lists", v, tt.credentials, tt.bindings)
			}
		})
	}
}
