package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sandgate/sandgate/plugins"
)

// BenchmarkDecideTTL measures a synchronous decide_ttl call on a warm pool,
// input encoding and result parsing included. Targets: noop < 10 µs, the
// examples < 100 µs.
func BenchmarkDecideTTL(b *testing.B) {
	for _, bc := range []struct{ example, settings string }{
		{"noop", `{}`},
		{"ttl-on-activity", `{"extendMinutes":15,"maxMinutesAhead":120}`},
		{"ttl-business-hours", `{"utcOffsetMinutes":120}`},
	} {
		b.Run(bc.example, func(b *testing.B) {
			h := newHost(b, plugins.HostOptions{})
			if err := h.Load(context.Background(), plugins.Plugin{Tenant: "acme", Name: "p", Module: wasm(b, bc.example),
				Config: plugins.Config{Hooks: []string{plugins.HookDecideTTL}, Settings: json.RawMessage(bc.settings), Limits: benchLimits}}); err != nil {
				b.Fatal(err)
			}
			now := time.Date(2026, 1, 5, 8, 0, 0, 0, time.UTC)
			in := plugins.TTLInput{SandboxID: "3f6c1c1e-8d1a-4c53-9a55-2a3c0f0f9a11", Reason: plugins.ReasonActivity, Now: now,
				CurrentExpiresAt: now.Add(time.Minute), MaxExpiresAt: now.Add(24 * time.Hour),
				Activity: &plugins.Activity{Port: 8080, Method: "GET", Path: "/index.html"}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := h.DecideTTL(ctx, "acme", in); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportPercentiles(b, h, "acme", "p")
		})
	}
}

// BenchmarkOnEvent measures event delivery end to end: OnEvent queues, the
// plugin's worker delivers; ns/op is the cost per event at full throughput.
// p50-ns is the median hook call alone.
func BenchmarkOnEvent(b *testing.B) {
	ev, err := plugins.MarshalEvent(plugins.Event{ID: "0b8a3c1e-5a7d-4f0e-b0a4-6f3c2d1e9a88", Type: plugins.EventPreviewAccessed,
		Tenant: "acme", SandboxID: "3f6c1c1e-8d1a-4c53-9a55-2a3c0f0f9a11", Time: time.Now(),
		Data: plugins.PreviewAccess{Port: 8080, Method: "GET", Path: "/index.html", Status: 200, Bytes: 1234, DurationMs: 2, Credential: "cookie"}})
	if err != nil {
		b.Fatal(err)
	}
	for _, example := range []string{"noop", "audit-jsonl"} {
		b.Run(example, func(b *testing.B) {
			// One host per benchmark round, with a queue that holds them all.
			h := newHost(b, plugins.HostOptions{QueueSize: b.N + 1, Audit: func(string, []byte) {}})
			if err := h.Load(context.Background(), plugins.Plugin{Tenant: "acme", Name: "p", Module: wasm(b, example),
				Config: plugins.Config{Hooks: []string{plugins.HookOnEvent}, Limits: benchLimits}}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				h.OnEvent("acme", ev)
			}
			for {
				st, _ := h.Stats("acme", "p")
				if st.Invocations+st.Drops >= uint64(b.N) {
					if st.Drops > 0 || st.Errors > 0 {
						b.Fatalf("%d drops, %d errors", st.Drops, st.Errors)
					}
					break
				}
				time.Sleep(50 * time.Microsecond)
			}
			b.StopTimer()
			reportPercentiles(b, h, "acme", "p")
		})
	}
}

func reportPercentiles(b *testing.B, h *plugins.Host, tenant, name string) {
	st, err := h.Stats(tenant, name)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(st.P50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(st.P99.Nanoseconds()), "p99-ns")
}

// BenchmarkLoad measures loading a plugin whose module is already compiled
// (compilation cache warm): checks plus the first instantiation.
func BenchmarkLoad(b *testing.B) {
	h := newHost(b, plugins.HostOptions{})
	module := wasm(b, "noop")
	ctx := context.Background()
	keep := plugins.Plugin{Tenant: "acme", Name: "keep", Module: module, Config: plugins.Config{Hooks: []string{plugins.HookOnEvent}}}
	if err := h.Load(ctx, keep); err != nil { // holds the compiled module
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		if err := h.Load(ctx, plugins.Plugin{Tenant: "acme", Name: "p", Version: fmt.Sprint(i), Module: module,
			Config: plugins.Config{Hooks: []string{plugins.HookOnEvent}}}); err != nil {
			b.Fatal(err)
		}
	}
}

// benchLimits gives benchmark calls a deadline far above their cost, so
// that a busy machine slows a benchmark down instead of failing it.
var benchLimits = plugins.Limits{TimeoutMs: 5000}
