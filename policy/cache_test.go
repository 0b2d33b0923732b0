package policy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

func TestAccessCacheFollowsPolicyVersion(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{Dir: t.TempDir()})
	in := AccessInput{Principal: apiKey("member", "t1"), Tenant: "t1", Action: "sandbox.get", Resource: sandboxOf("t1")}
	if d := e.Access(ctx, in); !d.Allow {
		t.Fatalf("default policy: %+v, want allowed", d)
	}
	if e.current.Load().accessCache == nil {
		t.Fatal("the default policy has no decision cache")
	}
	// A new module: the cached allow of the previous version must not answer.
	if err := e.SetModule(ctx, "access.rego", `package sandgate.access

decision := {"allow": false, "code": "DENIED", "message": "closed for maintenance"}
`); err != nil {
		t.Fatal(err)
	}
	if d := e.Access(ctx, in); d.Allow || d.Message != "closed for maintenance" {
		t.Fatalf("after the override: %+v, want the override's denial", d)
	}
	if err := e.RemoveModule(ctx, "access.rego"); err != nil {
		t.Fatal(err)
	}
	if d := e.Access(ctx, in); !d.Allow {
		t.Fatalf("after removing the override: %+v, want allowed", d)
	}
	// New platform data is a new version too.
	if err := e.SetPlatformData(ctx, map[string]any{"suspended_tenants": []string{"t1"}}); err != nil {
		t.Fatal(err)
	}
	if d := e.Access(ctx, in); d.Code != CodeTenantSuspended {
		t.Fatalf("after suspending t1: %+v, want %s", d, CodeTenantSuspended)
	}
}

func TestAccessCacheKeepsFullDecision(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{})
	in := AccessInput{Principal: Principal{Kind: "sandbox_token", Tenant: "t1", Sandbox: "sb-1"}, Action: "sandbox.proxy",
		Resource: Resource{Kind: "sandbox", ID: "sb-2", Tenant: "t1", Port: 44772}, Request: Request{Method: "GET", Path: "/ping"}}
	evaluated := e.evalAccess(ctx, e.current.Load(), in)
	first, cached := e.Access(ctx, in), e.Access(ctx, in)
	for _, d := range []Decision{first, cached} {
		if d.Allow != evaluated.Allow || d.Code != evaluated.Code || d.Message != evaluated.Message || d.InputHash != evaluated.InputHash || d.PolicyVersion != evaluated.PolicyVersion {
			t.Fatalf("decision %+v differs from the evaluated %+v", d, evaluated)
		}
	}
	if first.DecisionID == cached.DecisionID || cached.DecisionID == "" {
		t.Fatalf("a cached decision reuses id %q", cached.DecisionID)
	}
	// Another path is another input.
	in.Request.Path = "/files/info"
	if d := e.Access(ctx, in); d.InputHash == first.InputHash {
		t.Fatal("two paths share a cached decision")
	}
}

func TestCheckAccessDecidesAsAccess(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{Dir: t.TempDir()})
	proxy := func(principal Principal, resourceTenant string) AccessInput {
		return AccessInput{Principal: principal, Tenant: resourceTenant, Action: "sandbox.proxy",
			Resource: Resource{Kind: "sandbox", ID: "sb-1", Tenant: resourceTenant, Port: 8000}, Request: Request{Method: "GET", Path: "/"}}
	}
	tests := []struct {
		name  string
		in    AccessInput
		allow bool
	}{
		{"own sandbox token", proxy(Principal{Kind: "sandbox_token", Tenant: "t1", Sandbox: "sb-1"}, "t1"), true},
		{"another sandbox's token", proxy(Principal{Kind: "sandbox_token", Tenant: "t1", Sandbox: "sb-2"}, "t1"), false},
		{"own tenant's key", proxy(apiKey("member", "t1"), "t1"), true},
		{"another tenant's key", proxy(apiKey("member", "t2"), "t1"), false},
		{"anonymous", proxy(Principal{Kind: "anonymous"}, "t1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// First uncached, then from the cache: the same answer as Access each time.
			for i := 0; i < 2; i++ {
				want, got := e.Access(ctx, tt.in), e.CheckAccess(ctx, tt.in)
				if got.Allow != tt.allow || got.Allow != want.Allow || got.Code != want.Code || got.Message != want.Message || got.PolicyVersion != want.PolicyVersion {
					t.Fatalf("round %d: CheckAccess %+v, Access %+v (want allow %v)", i, got, want, tt.allow)
				}
				if !got.Allow && (got.DecisionID == "" || got.InputHash != want.InputHash) {
					t.Fatalf("round %d: a denial without its identity: %+v", i, got)
				}
			}
		})
	}
	// A new policy version is asked anew, not answered from the old one's cache.
	in := tests[0].in
	if err := e.SetModule(ctx, "access.rego", `package sandgate.access

decision := {"allow": false, "code": "DENIED", "message": "closed for maintenance"}
`); err != nil {
		t.Fatal(err)
	}
	if d := e.CheckAccess(ctx, in); d.Allow || d.Message != "closed for maintenance" {
		t.Fatalf("after the override: %+v, want the override's denial", d)
	}
}

func TestNondeterministicPolicyIsNotCached(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{Dir: t.TempDir()})
	// Each evaluation draws anew (rand.intn is cached within one evaluation only).
	if err := e.SetModule(ctx, "access.rego", `package sandgate.access

decision := {"allow": true, "code": "OK", "message": sprintf("draw %d", [rand.intn("d", 1000000000)])}
`); err != nil {
		t.Fatal(err)
	}
	if e.current.Load().accessCache != nil {
		t.Fatal("a policy calling rand.intn got a decision cache")
	}
	in := AccessInput{Principal: apiKey("member", "t1"), Tenant: "t1", Action: "sandbox.list"}
	seen := map[string]bool{}
	for range 5 {
		seen[e.Access(ctx, in).Message] = true
	}
	if len(seen) < 2 {
		t.Fatalf("five evaluations of a random policy gave %v", seen)
	}
	for _, src := range []string{
		"package sandgate.access\n\nnow := time.now_ns()\n",
		"package sandgate.access\n\nf(x) := y if { y := http.send({\"method\": \"GET\", \"url\": x}) }\n",
	} {
		if err := e.SetModule(ctx, "nd.rego", src); err != nil {
			t.Fatal(err)
		}
		if e.current.Load().accessCache != nil {
			t.Errorf("a policy with %q got a decision cache", src)
		}
	}
}

// TestDefaultAccessReadsIDsOnlyByRelation holds the built-in access policy to what the
// decision cache assumes of it when no operator module is loaded (accessKey): it reads
// the resource's id and the sandbox a credential is bound to only by comparing them
// with each other and with "" (and the resource id of a tenant, whose key keeps it,
// with the principal's tenant), never the request's method or path, and no data but
// data.sandgate.platform, which no built-in module defines. An edit to access.rego that
// trips this must change the key first.
func TestDefaultAccessReadsIDsOnlyByRelation(t *testing.T) {
	set, err := loadSources("", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var access *ast.Module
	for _, m := range set.modules {
		switch m.Package {
		case "sandgate.access":
			if access != nil {
				t.Fatalf("two built-in modules in package sandgate.access: %s and more", m.Name)
			}
			access = set.parsed[m.Name]
		case "sandgate.platform":
			t.Fatalf("built-in module %s defines data.sandgate.platform, which access.rego reads as data", m.Name)
		}
	}
	if access == nil {
		t.Fatal("no built-in module in package sandgate.access")
	}
	for _, p := range idReadsBeyondRelation(access) {
		t.Error(p)
	}
	// The check itself: each of these reads an id, the request or data in a way the
	// key does not keep.
	for _, rule := range []string{
		`deny contains {"code": "X", "message": input.resource.id} if true`,
		`deny contains {"code": "X", "message": "x"} if startswith(input.principal.sandbox, "sb-")`,
		`deny contains {"code": "X", "message": "x"} if input.request.path == "/command"`,
		`deny contains {"code": "X", "message": "x"} if input.resource.id != ""`,
		`deny contains {"code": "X", "message": "x"} if object.get(input, ["resource", "id"], "") == "sb-1"`,
		`deny contains {"code": "X", "message": "x"} if { some x in [input]; x.resource.id == "sb-1" }`,
		`deny contains {"code": "X", "message": "x"} if data.other.blocked[input.tenant]`,
	} {
		m, err := parseModule("mutant.rego", "package sandgate.access\n\n"+rule+"\n")
		if err != nil {
			t.Fatalf("%s: %v", rule, err)
		}
		if len(idReadsBeyondRelation(m)) == 0 {
			t.Errorf("the check passes %s", rule)
		}
	}
}

// idReadsBeyondRelation lists what in an access module reads a sandbox id, the request
// or data other than by the relations accessKey keeps.
func idReadsBeyondRelation(m *ast.Module) []string {
	var problems []string
	restricted := func(r ast.Ref) bool {
		s := r.String()
		has := func(p string) bool { return s == p || strings.HasPrefix(s, p+".") || strings.HasPrefix(s, p+"[") }
		return has("input.resource.id") || has("input.principal.sandbox") || (has("input.request") && s != "input.request.body.role")
	}
	always := map[string]bool{`equal(input.principal.sandbox, input.resource.id)`: true, `neq(input.principal.sandbox, "")`: true}
	tenantKind := map[string]bool{`neq(input.resource.id, "")`: true, `neq(input.resource.id, input.principal.tenant)`: true}
	wholeInput := map[string]bool{`object.get(input, "tenant", "")`: true, `object.get(input, ["resource", "tenant"], "")`: true}

	// Every restricted ref and every use of input whole (input followed by no path),
	// wherever it stands.
	var restrictedRefs, inputPaths, inputVars int
	ast.WalkRefs(m, func(r ast.Ref) bool {
		switch {
		case r.HasPrefix(ast.InputRootRef) && len(r) > 1:
			inputPaths++
			if restricted(r) {
				restrictedRefs++
			}
		case r.HasPrefix(ast.DefaultRootRef) && !r.HasPrefix(ast.MustParseRef("data.sandgate.platform")) &&
			!r.HasPrefix(m.Package.Path): // the package's own rules
			problems = append(problems, fmt.Sprintf("reads %s: only data.sandgate.platform is known to be data", r))
		}
		return false
	})
	ast.WalkTerms(m, func(x *ast.Term) bool {
		if v, ok := x.Value.(ast.Var); ok && v.Equal(ast.InputRootDocument.Value) {
			inputVars++ // the head of every input ref, and input alone
		}
		return false
	})
	whole := inputVars - inputPaths
	// The uses known to be harmless, body by body (else branches and comprehensions
	// included).
	var allowedRefs, allowedWhole int
	ast.WalkBodies(m, func(b ast.Body) bool {
		kindTenant := false
		for _, e := range b {
			kindTenant = kindTenant || e.String() == `equal(input.resource.kind, "tenant")`
		}
		for _, e := range b {
			if s := e.String(); always[s] || (kindTenant && tenantKind[s]) {
				ast.WalkRefs(e, func(r ast.Ref) bool {
					if restricted(r) {
						allowedRefs++
					}
					return false
				})
			}
			ast.WalkTerms(e, func(x *ast.Term) bool {
				if wholeInput[x.String()] {
					allowedWhole++
				}
				return false
			})
		}
		return false
	})
	if restrictedRefs != allowedRefs {
		problems = append(problems, fmt.Sprintf("reads the sandbox ids or the request %d times, %d of them in the comparisons the cache key keeps", restrictedRefs, allowedRefs))
	}
	if whole != allowedWhole {
		problems = append(problems, fmt.Sprintf("uses input whole %d times, %d of them in object.get of a tenant", whole, allowedWhole))
	}
	return problems
}

// TestAccessCacheByRelation: under the built-in policy, inputs that differ only in their
// sandbox ids share a decision, and one whose ids relate otherwise (a token for another
// sandbox, another tenant's key) does not: it is evaluated and denied. Each decision
// keeps the hash of its own input.
func TestAccessCacheByRelation(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{})
	v := e.current.Load()
	if v.accessCache == nil || !v.accessCache.byRelation {
		t.Fatal("the built-in policy alone has no id-agnostic cache")
	}
	token := func(bound, target, tenant string) AccessInput {
		return AccessInput{Principal: Principal{Kind: "sandbox_token", Sandbox: bound}, Tenant: tenant, Action: "sandbox.proxy",
			Resource: Resource{Kind: "sandbox", ID: target, Tenant: tenant, Port: 44772}, Request: Request{Method: "POST", Path: "/command"}}
	}
	endpoint := func(tenant, target, owner string) AccessInput {
		return AccessInput{Principal: apiKey("member", tenant), Tenant: tenant, Action: "sandbox.proxy",
			Resource: Resource{Kind: "sandbox", ID: target, Tenant: owner}, Request: Request{Method: "GET", Path: "/v1/sandboxes/" + target + "/endpoints/44772"}}
	}
	check := func(in AccessInput, wantAllow bool, wantCode string) {
		t.Helper()
		d := e.Access(ctx, in)
		want := e.evalAccess(ctx, v, in)
		if d.Allow != wantAllow || d.Allow != want.Allow || d.Code != want.Code || d.Message != want.Message || (wantCode != "" && d.Code != wantCode) {
			t.Fatalf("%+v: got %+v, evaluated %+v, want allow %v %s", in, d, want, wantAllow, wantCode)
		}
		if d.InputHash != want.InputHash {
			t.Fatalf("%+v: input hash %s, want its own %s", in, d.InputHash, want.InputHash)
		}
	}
	// Fill the cache with allows first; then the inputs that must not share them.
	for _, sb := range []string{"sb-1", "sb-2", "sb-3"} {
		check(token(sb, sb, "t1"), true, CodeOK)
		check(endpoint("t1", sb, "t1"), true, CodeOK)
	}
	if n := len(v.accessCache.m); n != 2 {
		t.Errorf("six inputs of two relations left %d cache entries, want 2", n)
	}
	check(token("sb-1", "sb-2", "t1"), false, CodeNotFound) // another sandbox's token
	check(token("", "sb-2", "t1"), false, "")               // bound to nothing
	check(token("sb-2", "", "t1"), false, "")
	check(token("sb-9", "sb-9", "t2"), true, CodeOK)
	check(endpoint("t1", "sb-4", "t2"), false, CodeNotFound) // another tenant's sandbox
	check(endpoint("t2", "sb-1", "t1"), false, CodeNotFound)
	check(token("sb-1", "sb-2", "t1"), false, CodeNotFound) // again, from the cache
}

// TestOperatorModuleKeysByID: with any operator module loaded, the cache keys by the
// ids again, so a rule that reads one is obeyed for each sandbox.
func TestOperatorModuleKeysByID(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{Dir: t.TempDir()})
	if err := e.SetModule(ctx, "blocked.rego", `package sandgate.access

deny contains {"code": "BLOCKED", "message": "this sandbox is blocked"} if input.resource.id == "sb-blocked"
`); err != nil {
		t.Fatal(err)
	}
	if c := e.current.Load().accessCache; c == nil || c.byRelation {
		t.Fatalf("cache %+v with an operator module: want one keyed by the ids", c)
	}
	in := AccessInput{Principal: Principal{Kind: "sandbox_token", Sandbox: "sb-ok"}, Tenant: "t1", Action: "sandbox.proxy",
		Resource: Resource{Kind: "sandbox", ID: "sb-ok", Tenant: "t1", Port: 44772}}
	if d := e.Access(ctx, in); !d.Allow {
		t.Fatalf("sb-ok: %+v", d)
	}
	in.Principal.Sandbox, in.Resource.ID = "sb-blocked", "sb-blocked"
	if d := e.Access(ctx, in); d.Allow || d.Code != "BLOCKED" {
		t.Fatalf("sb-blocked after sb-ok was allowed: %+v, want BLOCKED", d)
	}
}
