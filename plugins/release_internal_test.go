package plugins

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
)

// heapInUse is the live heap after collecting garbage twice: the second
// collection frees what the first one's finalizers released.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestRemoveReleasesCompiledCode loads distinct modules, removes them, and
// checks that what compiling them cost is given back: the compiled modules
// are closed (the engine forgets them) and their runtimes are closed.
func TestRemoveReleasesCompiledCode(t *testing.T) {
	ctx := context.Background()
	noop, err := os.ReadFile("examples/noop/noop.wasm")
	if err != nil {
		t.Fatal(err)
	}
	// The in-memory cache only, as the gateway runs by default.
	h, err := NewHost(ctx, HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(ctx) })

	const copies = 3
	before := heapInUse()
	for i := range copies {
		// A custom section makes each copy a module of its own (its own hash).
		module := append(append([]byte(nil), noop...), 0, 5, 3, 'p', 'a', 'd', byte(i))
		p := Plugin{Tenant: "acme", Name: fmt.Sprintf("copy-%d", i), Module: module,
			Config: Config{Hooks: []string{HookOnEvent}, Limits: Limits{MemoryMiB: 16 + i}}}
		if err := h.Load(ctx, p); err != nil {
			t.Fatalf("Load %s: %v", p.Name, err)
		}
	}
	loaded := heapInUse()
	for i := range copies {
		if err := h.Remove("acme", fmt.Sprintf("copy-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	slots := make([]*slot, 0)
	for _, s := range h.slots {
		slots = append(slots, s)
	}
	h.mu.Unlock()
	if len(slots) != 0 {
		t.Fatalf("%d plugins still loaded", len(slots))
	}
	h.background.Wait() // the retirements Remove started
	after := heapInUse()
	t.Logf("heap: %d MiB before, %d MiB with %d modules, %d MiB after removing them", before>>20, loaded>>20, copies, after>>20)

	h.mu.Lock()
	compiledLeft, enginesLeft := len(h.compiled), len(h.engines)
	h.mu.Unlock()
	if compiledLeft != 0 || enginesLeft != 0 {
		t.Errorf("after Remove: %d compiled modules and %d runtimes held, want none", compiledLeft, enginesLeft)
	}
	if loaded <= before {
		t.Fatalf("loading %d modules did not grow the heap (%d → %d); the check below would prove nothing", copies, before, loaded)
	}
	if held := int64(after) - int64(before); held > int64(loaded-before)/4 {
		t.Errorf("after removing every plugin the heap holds %d MiB more than before (loading took %d MiB)", held>>20, (loaded-before)>>20)
	}
}
