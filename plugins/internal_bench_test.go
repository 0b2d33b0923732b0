package plugins

import (
	"context"
	"os"
	"testing"
)

// BenchmarkInstantiate measures creating one instance of a compiled Go
// plugin: the Go runtime's start (_initialize), the ABI version check and
// sandgate_configure. This is what a call pays when no warm instance is left.
func BenchmarkInstantiate(b *testing.B) {
	for _, example := range []string{"noop", "ttl-business-hours"} {
		b.Run(example, func(b *testing.B) {
			module, err := os.ReadFile("examples/" + example + "/" + example + ".wasm")
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			h, err := NewHost(ctx, HostOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close(ctx)
			r, err := h.resolve(Config{Hooks: []string{HookDecideTTL}})
			if err != nil {
				b.Fatal(err)
			}
			c, err := h.acquireCompiled(ctx, module, r)
			if err != nil {
				b.Fatal(err)
			}
			defer h.releaseCompiled(ctx, c)
			owner := &slot{host: h, tenant: "acme", name: example}
			var pages uint32
			for b.Loop() {
				inst, err := h.instantiate(ctx, c, owner, r.settings)
				if err != nil {
					b.Fatal(err)
				}
				pages = inst.mod.Memory().Size() / 65536
				inst.close(ctx)
			}
			b.ReportMetric(float64(pages)/pagesPerMiB, "MiB/instance")
		})
	}
}

// BenchmarkCallOnEvent measures one synchronous on_event call on a warm
// instance, without the queue: the cost a plugin adds per event.
func BenchmarkCallOnEvent(b *testing.B) {
	event := []byte(`{"id":"0b8a3c1e-5a7d-4f0e-b0a4-6f3c2d1e9a88","type":"preview.accessed","tenant":"acme","sandboxId":"3f6c1c1e-8d1a-4c53-9a55-2a3c0f0f9a11","time":"2026-01-05T10:00:00.123456789Z","data":{"port":8080,"method":"GET","path":"/index.html","status":200,"bytes":1234,"durationMs":2,"credential":"cookie"}}`)
	for _, example := range []string{"noop", "audit-jsonl"} {
		b.Run(example, func(b *testing.B) {
			module, err := os.ReadFile("examples/" + example + "/" + example + ".wasm")
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			h, err := NewHost(ctx, HostOptions{Audit: func(string, []byte) {}})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close(ctx)
			if err := h.Load(ctx, Plugin{Tenant: "acme", Name: "p", Module: module, Config: Config{Hooks: []string{HookOnEvent}, Limits: Limits{TimeoutMs: 5000}}}); err != nil {
				b.Fatal(err)
			}
			h.mu.Lock()
			s := h.slots[slotKey{"acme", "p"}]
			h.mu.Unlock()
			v := s.acquire()
			defer v.release()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.invoke(ctx, HookOnEvent, event, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
