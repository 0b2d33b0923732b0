package policy

import (
	"context"
	"testing"
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
