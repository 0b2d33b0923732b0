package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/open-policy-agent/opa/v1/ast"
)

// quietLogger keeps expected refusals and failures out of test output.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTestEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	e, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func apiKey(role, tenant string) Principal {
	return Principal{Kind: "api_key", ID: "key-1", Tenant: tenant, Role: role}
}

func sandboxOf(tenant string) Resource {
	return Resource{Kind: "sandbox", ID: "sb-1", Tenant: tenant}
}

var hexHash = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestAccessDefaultPolicy(t *testing.T) {
	e := newTestEngine(t, Options{Data: map[string]any{"suspended_tenants": []string{"frozen"}}})
	tests := []struct {
		name     string
		in       AccessInput
		wantCode string
	}{
		{"admin anything anywhere", AccessInput{Principal: apiKey("admin", ""), Action: "tenant.create", Resource: Resource{Kind: "tenant", ID: "t9"}}, CodeOK},
		{"admin other tenant sandbox", AccessInput{Principal: apiKey("admin", "ops"), Tenant: "t2", Action: "sandbox.delete", Resource: sandboxOf("t2")}, CodeOK},
		{"tenant-admin creates keys", AccessInput{Principal: apiKey("tenant-admin", "t1"), Tenant: "t1", Action: "key.create", Resource: Resource{Kind: "key"}}, CodeOK},
		{"tenant-admin manages plugins", AccessInput{Principal: apiKey("tenant-admin", "t1"), Tenant: "t1", Action: "plugin.delete", Resource: Resource{Kind: "plugin", ID: "p", Tenant: "t1"}}, CodeOK},
		{"tenant-admin cannot update tenant", AccessInput{Principal: apiKey("tenant-admin", "t1"), Tenant: "t1", Action: "tenant.update", Resource: Resource{Kind: "tenant", ID: "t1"}}, CodeDenied},
		{"tenant-admin cannot write policy", AccessInput{Principal: apiKey("tenant-admin", "t1"), Action: "policy.write"}, CodeDenied},
		{"tenant-admin other tenant", AccessInput{Principal: apiKey("tenant-admin", "t1"), Tenant: "t1", Action: "sandbox.get", Resource: sandboxOf("t2")}, CodeNotFound},
		{"member creates sandbox", AccessInput{Principal: apiKey("member", "t1"), Tenant: "t1", Action: "sandbox.create", Resource: Resource{Kind: "sandbox"}}, CodeOK},
		{"member proxies own sandbox", AccessInput{Principal: apiKey("member", "t1"), Tenant: "t1", Action: "sandbox.proxy", Resource: Resource{Kind: "sandbox", ID: "sb-1", Tenant: "t1", Port: 44772}}, CodeOK},
		{"member deletes pool", AccessInput{Principal: apiKey("member", "t1"), Tenant: "t1", Action: "pool.delete", Resource: Resource{Kind: "pool", ID: "py", Tenant: "t1"}}, CodeOK},
		{"member runs batch", AccessInput{Principal: apiKey("member", "t1"), Tenant: "t1", Action: "batch.create"}, CodeOK},
		{"member cannot create keys", AccessInput{Principal: apiKey("member", "t1"), Tenant: "t1", Action: "key.create"}, CodeDenied},
		{"member cannot list keys", AccessInput{Principal: apiKey("member", "t1"), Tenant: "t1", Action: "key.list"}, CodeDenied},
		{"member other tenant", AccessInput{Principal: apiKey("member", "t1"), Tenant: "t1", Action: "sandbox.delete", Resource: sandboxOf("t2")}, CodeNotFound},
		{"viewer gets sandbox", AccessInput{Principal: apiKey("viewer", "t1"), Tenant: "t1", Action: "sandbox.get", Resource: sandboxOf("t1")}, CodeOK},
		{"viewer reads audit", AccessInput{Principal: apiKey("viewer", "t1"), Tenant: "t1", Action: "audit.read"}, CodeOK},
		{"viewer cannot create", AccessInput{Principal: apiKey("viewer", "t1"), Tenant: "t1", Action: "sandbox.create"}, CodeDenied},
		{"viewer cannot proxy", AccessInput{Principal: apiKey("viewer", "t1"), Tenant: "t1", Action: "sandbox.proxy", Resource: sandboxOf("t1")}, CodeDenied},
		{"unknown role", AccessInput{Principal: apiKey("root", "t1"), Tenant: "t1", Action: "sandbox.get", Resource: sandboxOf("t1")}, CodeDenied},
		{"sandbox token own sandbox", AccessInput{Principal: Principal{Kind: "sandbox_token", Tenant: "t1", Sandbox: "sb-1"}, Action: "sandbox.proxy", Resource: Resource{Kind: "sandbox", ID: "sb-1", Tenant: "t1", Port: 44772}}, CodeOK},
		{"sandbox token other sandbox", AccessInput{Principal: Principal{Kind: "sandbox_token", Tenant: "t1", Sandbox: "sb-1"}, Action: "sandbox.proxy", Resource: Resource{Kind: "sandbox", ID: "sb-2", Tenant: "t1", Port: 44772}}, CodeDenied},
		{"sandbox token cannot delete", AccessInput{Principal: Principal{Kind: "sandbox_token", Tenant: "t1", Sandbox: "sb-1"}, Action: "sandbox.delete", Resource: sandboxOf("t1")}, CodeDenied},
		{"signed link its port", AccessInput{Principal: Principal{Kind: "signed_link", Tenant: "t1", Sandbox: "sb-1", Port: 3000}, Action: "sandbox.proxy", Resource: Resource{Kind: "sandbox", ID: "sb-1", Tenant: "t1", Port: 3000}}, CodeOK},
		{"signed link other port", AccessInput{Principal: Principal{Kind: "signed_link", Tenant: "t1", Sandbox: "sb-1", Port: 3000}, Action: "sandbox.proxy", Resource: Resource{Kind: "sandbox", ID: "sb-1", Tenant: "t1", Port: 3001}}, CodeDenied},
		{"signed link without port", AccessInput{Principal: Principal{Kind: "signed_link", Tenant: "t1", Sandbox: "sb-1"}, Action: "sandbox.proxy", Resource: Resource{Kind: "sandbox", ID: "sb-1", Tenant: "t1", Port: 3000}}, CodeDenied},
		{"cookie its port", AccessInput{Principal: Principal{Kind: "cookie", Tenant: "t1", Sandbox: "sb-1", Port: 5173}, Action: "sandbox.proxy", Resource: Resource{Kind: "sandbox", ID: "sb-1", Tenant: "t1", Port: 5173}}, CodeOK},
		{"public sandbox anonymous", AccessInput{Principal: Principal{Kind: "anonymous"}, Action: "sandbox.proxy", Resource: Resource{Kind: "sandbox", ID: "sb-1", Tenant: "t1", Public: true, Port: 8080}}, CodeOK},
		{"public sandbox anonymous get", AccessInput{Principal: Principal{Kind: "anonymous"}, Action: "sandbox.get", Resource: Resource{Kind: "sandbox", ID: "sb-1", Tenant: "t1", Public: true}}, CodeNotFound},
		{"private sandbox anonymous", AccessInput{Principal: Principal{Kind: "anonymous"}, Action: "sandbox.proxy", Resource: Resource{Kind: "sandbox", ID: "sb-1", Tenant: "t1", Port: 8080}}, CodeNotFound},
		{"invalid action", AccessInput{Principal: apiKey("admin", ""), Action: "delete-everything"}, CodeInvalidAction},
		{"tenant-admin mints admin key", AccessInput{Principal: apiKey("tenant-admin", "t1"), Tenant: "t1", Action: "key.create", Resource: Resource{Kind: "key", Tenant: "t1"}, Request: Request{Method: "POST", Body: map[string]any{"role": "admin"}}}, CodeRoleEscalation},
		{"tenant-admin mints member key", AccessInput{Principal: apiKey("tenant-admin", "t1"), Tenant: "t1", Action: "key.create", Resource: Resource{Kind: "key", Tenant: "t1"}, Request: Request{Method: "POST", Body: map[string]any{"role": "member"}}}, CodeOK},
		{"suspended tenant", AccessInput{Principal: apiKey("tenant-admin", "frozen"), Tenant: "frozen", Action: "sandbox.create"}, CodeTenantSuspended},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := e.Access(context.Background(), tt.in)
			if d.Code != tt.wantCode || d.Allow != (tt.wantCode == CodeOK) {
				t.Fatalf("decision = %+v, want code %s", d, tt.wantCode)
			}
			if d.Message == "" || d.DecisionID == "" || !hexHash.MatchString(d.InputHash) || d.PolicyVersion != e.Version() || d.Cause != nil {
				t.Errorf("incomplete decision: %+v", d)
			}
		})
	}
}

func TestAccessDecisionIdentity(t *testing.T) {
	e := newTestEngine(t, Options{})
	in := AccessInput{Principal: apiKey("member", "t1"), Tenant: "t1", Action: "sandbox.list"}
	a, b := e.Access(context.Background(), in), e.Access(context.Background(), in)
	if a.InputHash != b.InputHash {
		t.Errorf("same input hashed differently: %s vs %s", a.InputHash, b.InputHash)
	}
	if a.DecisionID == b.DecisionID {
		t.Errorf("two decisions share id %s", a.DecisionID)
	}
	in.Action = "sandbox.get"
	if c := e.Access(context.Background(), in); c.InputHash == a.InputHash {
		t.Errorf("different inputs share hash %s", c.InputHash)
	}
}

func ptr[T any](v T) *T { return &v }

func TestAdmitDefaultPolicy(t *testing.T) {
	e := newTestEngine(t, Options{Data: map[string]any{"denied_images": []string{"docker.io/evil/*"}}})
	request := CreateRequest{Image: "python:3.12", CPUMillis: 500, MemoryBytes: 512 << 20, TimeoutSeconds: ptr[int64](600)}
	tests := []struct {
		name      string
		quotas    Quotas
		usage     Usage
		edit      func(*CreateRequest)
		wantCodes []string
	}{
		{name: "no quotas", edit: func(r *CreateRequest) { r.Count = 100; r.TimeoutSeconds = nil }},
		{name: "concurrent ok", quotas: Quotas{MaxConcurrent: 3}, usage: Usage{Sandboxes: 2}},
		{name: "concurrent full", quotas: Quotas{MaxConcurrent: 3}, usage: Usage{Sandboxes: 3}, wantCodes: []string{CodeQuotaConcurrent}},
		{name: "concurrent batch", quotas: Quotas{MaxConcurrent: 3}, usage: Usage{Sandboxes: 1}, edit: func(r *CreateRequest) { r.Count = 3 }, wantCodes: []string{CodeQuotaConcurrent}},
		{name: "cpu", quotas: Quotas{MaxCPUMillis: 1000}, usage: Usage{CPUMillis: 600}, wantCodes: []string{CodeQuotaCPU}},
		{name: "memory", quotas: Quotas{MaxMemoryBytes: 1 << 30}, usage: Usage{MemoryBytes: 1 << 30}, wantCodes: []string{CodeQuotaMemory}},
		{name: "timeout too long", quotas: Quotas{MaxTimeoutSeconds: 300}, wantCodes: []string{CodeQuotaTimeout}},
		{name: "no expiry under max timeout", quotas: Quotas{MaxTimeoutSeconds: 3600}, edit: func(r *CreateRequest) { r.TimeoutSeconds = nil }, wantCodes: []string{CodeQuotaTimeout}},
		{name: "batch size", quotas: Quotas{MaxBatchSize: 5}, edit: func(r *CreateRequest) { r.Count = 6 }, wantCodes: []string{CodeQuotaBatchSize}},
		{name: "image allowed", quotas: Quotas{AllowedImages: []string{"python:*"}}},
		{name: "image not allowed", quotas: Quotas{AllowedImages: []string{"node:*"}}, wantCodes: []string{CodeImageNotAllowed}},
		{name: "platform denied image", edit: func(r *CreateRequest) { r.Image = "docker.io/evil/miner" }, wantCodes: []string{CodeImageNotAllowed}},
		{name: "runtime required", quotas: Quotas{Runtime: "runsc"}, edit: func(r *CreateRequest) { r.Runtime = "runc" }, wantCodes: []string{CodeRuntimeRequired}},
		{name: "runtime matches", quotas: Quotas{Runtime: "runsc"}, edit: func(r *CreateRequest) { r.Runtime = "runsc" }},
		{name: "negative cpu", edit: func(r *CreateRequest) { r.CPUMillis = -5 }, wantCodes: []string{CodeInvalidRequest}},
		{name: "all at once", quotas: Quotas{MaxConcurrent: 1, MaxBatchSize: 1, Runtime: "runsc"}, usage: Usage{Sandboxes: 1}, edit: func(r *CreateRequest) { r.Count = 2 },
			wantCodes: []string{CodeRuntimeRequired, CodeQuotaBatchSize, CodeQuotaConcurrent}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := request
			if tt.edit != nil {
				tt.edit(&req)
			}
			d := e.Admit(context.Background(), AdmissionInput{Tenant: TenantQuotas{ID: "t1", Quotas: tt.quotas}, Usage: tt.usage, Request: req})
			var got []string
			for _, v := range d.Violations {
				got = append(got, v.Code)
				if v.Message == "" {
					t.Errorf("violation %s without message", v.Code)
				}
			}
			if diff := cmp.Diff(tt.wantCodes, got); diff != "" {
				t.Fatalf("violations (-want +got):\n%s\ndecision: %+v", diff, d)
			}
			if d.Allow != (len(tt.wantCodes) == 0) {
				t.Fatalf("allow = %v with violations %v", d.Allow, got)
			}
			if !d.Allow && (d.Code != tt.wantCodes[0] || d.Message != d.Violations[0].Message) {
				t.Errorf("decision code/message %q/%q do not repeat the first violation", d.Code, d.Message)
			}
			if d.Allow && d.Code != CodeOK {
				t.Errorf("allowed with code %q", d.Code)
			}
		})
	}
}

func TestAdmitMessageNamesLimitAndUsage(t *testing.T) {
	e := newTestEngine(t, Options{})
	d := e.Admit(context.Background(), AdmissionInput{
		Tenant:  TenantQuotas{ID: "acme", Quotas: Quotas{MaxConcurrent: 10}},
		Usage:   Usage{Sandboxes: 9},
		Request: CreateRequest{Image: "python:3.12", Count: 2},
	})
	want := "tenant acme may run at most 10 sandboxes at once; 9 are running and 2 more were requested"
	if d.Message != want {
		t.Errorf("message = %q, want %q", d.Message, want)
	}
	if d.Outcome() != Limited {
		t.Errorf("outcome = %v, want Limited", d.Outcome())
	}
}

func TestEgressDefaultPolicy(t *testing.T) {
	e := newTestEngine(t, Options{Data: map[string]any{
		"gateway_addresses": []string{"127.0.0.1", "::1"},
		"always_deny":       []string{"evil.example"},
		"always_allow":      []string{"pypi.org"},
	}})
	platform := []EgressRule{
		{ActionDeny, "169.254.0.0/16"}, {ActionDeny, "fe80::/10"},
		{ActionDeny, "127.0.0.1"}, {ActionDeny, "::1"},
		{ActionDeny, "evil.example"}, {ActionAllow, "pypi.org"},
	}
	tests := []struct {
		name     string
		np       *NetworkPolicy
		want     NetworkPolicy
		wantCode string
	}{
		{
			name: "no policy: platform default",
			want: NetworkPolicy{DefaultAction: ActionDeny, Egress: platform},
		},
		{
			name: "sandbox rules after platform rules, normalized",
			np:   &NetworkPolicy{DefaultAction: "Allow", Egress: []EgressRule{{"DENY", "Example.COM."}, {"allow", "*.github.com"}}},
			want: NetworkPolicy{DefaultAction: ActionAllow, Egress: append(append([]EgressRule{}, platform...), EgressRule{ActionDeny, "example.com"}, EgressRule{ActionAllow, "*.github.com"})},
		},
		{
			name: "missing default action denies",
			np:   &NetworkPolicy{Egress: []EgressRule{{"allow", "10.0.0.0/8"}}},
			want: NetworkPolicy{DefaultAction: ActionDeny, Egress: append(append([]EgressRule{}, platform...), EgressRule{ActionAllow, "10.0.0.0/8"})},
		},
		{name: "scheme rejected", np: &NetworkPolicy{Egress: []EgressRule{{"allow", "http://x"}}}, wantCode: CodeInvalidEgress},
		{name: "bad action rejected", np: &NetworkPolicy{Egress: []EgressRule{{"log", "x.com"}}}, wantCode: CodeInvalidEgress},
		{name: "bad default rejected", np: &NetworkPolicy{DefaultAction: "maybe"}, wantCode: CodeInvalidEgress},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, d := e.Egress(context.Background(), EgressInput{Tenant: "t1", Sandbox: "sb-1", NetworkPolicy: tt.np})
			if tt.wantCode != "" {
				if d.Allow || d.Code != tt.wantCode {
					t.Fatalf("decision = %+v, want code %s", d, tt.wantCode)
				}
				if diff := cmp.Diff(DenyAll(), got); diff != "" {
					t.Errorf("denied egress must deny all (-want +got):\n%s", diff)
				}
				return
			}
			if !d.Allow || d.Code != CodeOK {
				t.Fatalf("decision = %+v", d)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("effective policy (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEgressMaxRulesFromPlatformData(t *testing.T) {
	e := newTestEngine(t, Options{Data: map[string]any{"max_rules": 2}})
	np := &NetworkPolicy{Egress: []EgressRule{{"allow", "a.com"}, {"allow", "b.com"}, {"allow", "c.com"}}}
	_, d := e.Egress(context.Background(), EgressInput{NetworkPolicy: np})
	if d.Allow || d.Code != CodeInvalidEgress || d.Message != "networkPolicy.egress: 3 rules given; at most 2 are allowed" {
		t.Fatalf("decision = %+v", d)
	}
}

func TestNewRejectsInvalidPlatformData(t *testing.T) {
	_, err := New(context.Background(), Options{Logger: quietLogger(), Data: map[string]any{"always_allow": []string{"http://pypi.org"}}})
	if err == nil {
		t.Fatal("New accepted an always_allow entry with a scheme")
	}
}

func TestDecisionOutcome(t *testing.T) {
	tests := []struct {
		d    Decision
		want Outcome
	}{
		{Decision{Allow: true, Code: CodeOK}, Allowed},
		{Decision{Code: CodeNotFound}, Hidden},
		{Decision{Code: CodeQuotaCPU}, Limited},
		{Decision{Code: CodeInvalidEgress}, Invalid},
		{Decision{Code: CodeInvalidRequest}, Invalid},
		{Decision{Code: CodeInvalidAction}, Invalid},
		{Decision{Code: CodeDenied}, Denied},
		{Decision{Code: CodeEvaluationFailed}, Denied},
		{Decision{Code: "CUSTOM::RULE"}, Denied},
	}
	for _, tt := range tests {
		t.Run(tt.d.Code, func(t *testing.T) {
			if got := tt.d.Outcome(); got != tt.want {
				t.Errorf("Outcome() = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestAccessInputValueMatchesJSON holds the hand-built OPA value of an
// access input to what its JSON form parses to.
func TestAccessInputValueMatchesJSON(t *testing.T) {
	inputs := map[string]AccessInput{
		"empty":   {},
		"api key": {Principal: apiKey("member", "t1"), Tenant: "t1", Action: "sandbox.create", Resource: Resource{Kind: "sandbox"}},
		"bound": {Principal: Principal{Kind: "signed_link", ID: "l", Tenant: "t1", Sandbox: "sb", Port: 3000}, Action: "sandbox.proxy",
			Resource: Resource{Kind: "sandbox", ID: "sb", Tenant: "t1", Public: true, Port: 3000}, Request: Request{Method: "GET", Path: "/"}},
		"body": {Principal: Principal{Kind: "anonymous"}, Action: "x.y", Request: Request{Method: "POST", Body: map[string]any{"n": 1.5, "list": []any{"a", true, nil}}}},
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			raw, err := json.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := ast.ValueFromReader(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			got, err := in.astValue()
			if err != nil {
				t.Fatal(err)
			}
			if want.Compare(got) != 0 {
				t.Errorf("astValue = %v, want %v", got, want)
			}
		})
	}
}

func TestDecisionLogValue(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	d := Decision{DecisionID: "id-1", InputHash: "abc", Code: CodeEvaluationFailed, PolicyVersion: "3-x", Cause: io.ErrUnexpectedEOF}
	logger.Info("decided", "decision", d)
	var line struct {
		Decision map[string]any `json:"decision"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"decision_id": "id-1", "input_hash": "abc", "allow": false, "code": CodeEvaluationFailed, "policy_version": "3-x", "cause": "unexpected EOF"}
	if diff := cmp.Diff(want, line.Decision); diff != "" {
		t.Errorf("logged decision (-want +got):\n%s", diff)
	}
}
