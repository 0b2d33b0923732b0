package plugins_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate/plugins"
)

// slowModule builds a valid module of funcs functions of n additions each:
// nothing a plugin could run, but real work for the compiler.
func slowModule(funcs, n int) []byte {
	leb := func(b *bytes.Buffer, v int) {
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if v != 0 {
				c |= 0x80
			}
			b.WriteByte(c)
			if v == 0 {
				return
			}
		}
	}
	section := func(out *bytes.Buffer, id byte, content []byte) {
		out.WriteByte(id)
		leb(out, len(content))
		out.Write(content)
	}
	var out bytes.Buffer
	out.WriteString("\x00asm\x01\x00\x00\x00")
	section(&out, 1, []byte{1, 0x60, 1, 0x7f, 1, 0x7f}) // (i32) -> i32
	var fns bytes.Buffer
	leb(&fns, funcs)
	for range funcs {
		fns.WriteByte(0)
	}
	section(&out, 3, fns.Bytes())
	var body bytes.Buffer
	body.WriteByte(0) // no locals beyond the parameter
	for i := range n {
		// local.get 0; i32.const i; i32.mul; local.set 0 — each step depends on the last
		body.Write([]byte{0x20, 0})
		body.WriteByte(0x41)
		leb(&body, i%64+1)
		body.Write([]byte{0x6c, 0x21, 0})
	}
	body.Write([]byte{0x20, 0, 0x0b})
	var code bytes.Buffer
	leb(&code, funcs)
	for range funcs {
		leb(&code, body.Len())
		code.Write(body.Bytes())
	}
	section(&out, 10, code.Bytes())
	return out.Bytes()
}

func TestModuleTooLarge(t *testing.T) {
	h := newHost(t, plugins.HostOptions{MaxModuleBytes: 1 << 20})
	module := wasm(t, "noop") // a Go-built module weighs more than 1 MiB
	if len(module) <= 1<<20 {
		t.Fatalf("the noop example has %d bytes; the test needs one above 1 MiB", len(module))
	}
	cfg := plugins.Config{Hooks: []string{plugins.HookOnEvent}}
	if err := h.Validate(module, cfg); plugins.ErrorCode(err) != plugins.CodeModuleTooLarge {
		t.Errorf("Validate: code %q, want %q (err: %v)", plugins.ErrorCode(err), plugins.CodeModuleTooLarge, err)
	}
	err := h.Load(context.Background(), plugins.Plugin{Tenant: "acme", Name: "big", Module: module, Config: cfg})
	if plugins.ErrorCode(err) != plugins.CodeModuleTooLarge {
		t.Errorf("Load: code %q, want %q (err: %v)", plugins.ErrorCode(err), plugins.CodeModuleTooLarge, err)
	}
	if got := h.List("acme"); len(got) != 0 {
		t.Errorf("List after a refused load = %v, want none", got)
	}
}

func TestCompileTimeout(t *testing.T) {
	// A host of its own without the shared disk cache: the module must really compile.
	ctx := context.Background()
	h, err := plugins.NewHost(ctx, plugins.HostOptions{CompileTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(ctx) })
	module := slowModule(600, 2000) // 8.4 MB; compiles for a second or more, never within 50 ms
	start := time.Now()
	err = h.Validate(module, plugins.Config{Hooks: []string{plugins.HookOnEvent}})
	if plugins.ErrorCode(err) != plugins.CodeCompileTimeout {
		t.Fatalf("Validate: code %q, want %q after %s (err: %v)", plugins.ErrorCode(err), plugins.CodeCompileTimeout, time.Since(start), err)
	}
	t.Logf("refused after %s", time.Since(start))
}

func TestTooManyPlugins(t *testing.T) {
	h := newHost(t, plugins.HostOptions{MaxPluginsPerTenant: 2})
	ctx := context.Background()
	module := wasm(t, "noop")
	load := func(tenant, name string) error {
		return h.Load(ctx, plugins.Plugin{Tenant: tenant, Name: name, Module: module, Config: plugins.Config{Hooks: []string{plugins.HookOnEvent}}})
	}
	for _, name := range []string{"one", "two"} {
		if err := load("acme", name); err != nil {
			t.Fatalf("Load %s: %v", name, err)
		}
	}
	if err := load("acme", "three"); plugins.ErrorCode(err) != plugins.CodeTooManyPlugins {
		t.Fatalf("third Load: code %q, want %q (err: %v)", plugins.ErrorCode(err), plugins.CodeTooManyPlugins, err)
	}
	// Replacing one of them is no new plugin, and another tenant has its own count.
	if err := load("acme", "two"); err != nil {
		t.Errorf("replacing a plugin at the limit: %v", err)
	}
	if err := load("globex", "one"); err != nil {
		t.Errorf("another tenant's first plugin: %v", err)
	}
	if err := h.Remove("acme", "one"); err != nil {
		t.Fatal(err)
	}
	if err := load("acme", "three"); err != nil {
		t.Errorf("Load after a Remove made room: %v", err)
	}
	if got := len(h.List("acme")); got != 2 {
		t.Errorf("acme has %d plugins, want 2", got)
	}
}

func TestTenantMemoryBudget(t *testing.T) {
	h := newHost(t, plugins.HostOptions{MaxTenantMemoryMiB: 256})
	ctx := context.Background()
	module := wasm(t, "noop")
	load := func(tenant, name string, lim plugins.Limits) error {
		return h.Load(ctx, plugins.Plugin{Tenant: tenant, Name: name, Module: module,
			Config: plugins.Config{Hooks: []string{plugins.HookOnEvent}, Limits: lim}})
	}
	if err := load("acme", "a", plugins.Limits{MemoryMiB: 64, PoolSize: 2}); err != nil { // 128 MiB
		t.Fatal(err)
	}
	if err := load("acme", "b", plugins.Limits{MemoryMiB: 64, PoolSize: 3}); plugins.ErrorCode(err) != plugins.CodeTenantMemory {
		t.Fatalf("second plugin over the budget: code %q, want %q (err: %v)", plugins.ErrorCode(err), plugins.CodeTenantMemory, err)
	}
	if err := load("acme", "b", plugins.Limits{MemoryMiB: 64, PoolSize: 2}); err != nil { // 256 MiB in all
		t.Errorf("second plugin within the budget: %v", err)
	}
	// Replacing a plugin counts its new limits in place of its old ones.
	if err := load("acme", "a", plugins.Limits{MemoryMiB: 32, PoolSize: 2}); err != nil {
		t.Errorf("shrinking a plugin: %v", err)
	}
	if err := load("acme", "a", plugins.Limits{MemoryMiB: 128, PoolSize: 2}); plugins.ErrorCode(err) != plugins.CodeTenantMemory {
		t.Errorf("growing a plugin past the budget: code %q (err: %v)", plugins.ErrorCode(err), err)
	}
	if err := load("globex", "a", plugins.Limits{MemoryMiB: 64, PoolSize: 4}); err != nil {
		t.Errorf("another tenant has a budget of its own: %v", err)
	}
}
