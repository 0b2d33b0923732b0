package policy

import (
	"context"
	"slices"
	"testing"
	"time"
)

// benchDecisions times each call too, so that p50 and p99 latencies are
// reported beside ns/op (the target is p50 < 50 µs for an access decision).
func benchDecisions(b *testing.B, decide func() Decision, wantAllow bool) {
	b.Helper()
	if d := decide(); d.Allow != wantAllow || d.Cause != nil {
		b.Fatalf("unexpected decision: %+v", d)
	}
	latencies := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		decide()
		latencies = append(latencies, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[len(latencies)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(latencies[len(latencies)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkAccess: one access decision through the prepared query (target:
// p50 < 50 µs). sandgate/* run the default policy; raw-allow-all runs the
// same engine path with a policy that allows everything, i.e. the engine's
// own overhead, as the baseline.
func BenchmarkAccess(b *testing.B) {
	ctx := context.Background()
	memberCreate := AccessInput{
		Principal: apiKey("member", "t1"), Tenant: "t1", Action: "sandbox.create",
		Resource: Resource{Kind: "sandbox"}, Request: Request{Method: "POST", Path: "/v1/sandboxes"},
	}
	// The hot path of every proxied request: a sandbox token on its own sandbox.
	tokenProxy := AccessInput{
		Principal: Principal{Kind: "sandbox_token", Tenant: "t1", Sandbox: "8f0c5a1e-3b7d-4c2e-9a6f-1d2e3f4a5b6c"},
		Tenant:    "t1", Action: "sandbox.proxy",
		Resource: Resource{Kind: "sandbox", ID: "8f0c5a1e-3b7d-4c2e-9a6f-1d2e3f4a5b6c", Tenant: "t1", Port: 44772},
		Request:  Request{Method: "POST", Path: "/command"},
	}
	e := newTestEngine(b, Options{})
	// evaluated bypasses the decision cache: the prepared query's own cost.
	evaluated := func(in AccessInput) func() Decision {
		return func() Decision { return e.evalAccess(ctx, e.current.Load(), in) }
	}
	b.Run("sandgate/member-create", func(b *testing.B) {
		benchDecisions(b, evaluated(memberCreate), true)
	})
	b.Run("sandgate/token-proxy", func(b *testing.B) {
		benchDecisions(b, evaluated(tokenProxy), true)
	})
	b.Run("sandgate/viewer-denied", func(b *testing.B) {
		in := memberCreate
		in.Principal.Role = "viewer"
		benchDecisions(b, evaluated(in), false)
	})
	// What a proxied request pays when the same caller asked for the same path before.
	b.Run("sandgate/token-proxy-cached", func(b *testing.B) {
		benchDecisions(b, func() Decision { return e.Access(ctx, tokenProxy) }, true)
	})

	dir := b.TempDir()
	writeFiles(b, dir, map[string]string{"access.rego": `package sandgate.access

decision := {"allow": true, "code": "OK", "message": "allowed"}
`})
	allowAll := newTestEngine(b, Options{Dir: dir})
	b.Run("raw-allow-all", func(b *testing.B) {
		benchDecisions(b, func() Decision { return allowAll.evalAccess(ctx, allowAll.current.Load(), memberCreate) }, true)
	})
}

// BenchmarkAdmit: admission with every quota set (once per create).
func BenchmarkAdmit(b *testing.B) {
	e := newTestEngine(b, Options{})
	ctx := context.Background()
	in := AdmissionInput{
		Tenant: TenantQuotas{ID: "t1", Quotas: Quotas{MaxConcurrent: 100, MaxCPUMillis: 64000, MaxMemoryBytes: 64 << 30,
			MaxTimeoutSeconds: 86400, MaxBatchSize: 50, AllowedImages: []string{"python:*", "node:*"}}},
		Usage:   Usage{Sandboxes: 10, CPUMillis: 5000, MemoryBytes: 10 << 30},
		Request: CreateRequest{Image: "python:3.12", CPUMillis: 500, MemoryBytes: 512 << 20, TimeoutSeconds: ptr[int64](3600), Count: 1},
	}
	benchDecisions(b, func() Decision { return e.Admit(ctx, in) }, true)
}

// BenchmarkEgress: effective policy for a sandbox with a few rules (once
// per create).
func BenchmarkEgress(b *testing.B) {
	e := newTestEngine(b, Options{Data: map[string]any{"gateway_addresses": []string{"127.0.0.1"}}})
	ctx := context.Background()
	in := EgressInput{Tenant: "t1", Sandbox: "sb", NetworkPolicy: &NetworkPolicy{DefaultAction: "deny", Egress: []EgressRule{
		{"allow", "pypi.org"}, {"allow", "*.pythonhosted.org"}, {"allow", "10.0.0.0/8"}, {"deny", "evil.example"},
	}}}
	benchDecisions(b, func() Decision { _, d := e.Egress(ctx, in); return d }, true)
}
