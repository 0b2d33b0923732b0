// Package guest is the plugin side of sandgate's plugin ABI v1 for Go plugins
// built with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared.
//
// Importing it exports the ABI's bookkeeping functions (sandgate_abi_version,
// sandgate_alloc, sandgate_free, sandgate_configure) and wraps the host
// functions of the "sandgate" import module. A plugin adds its own hook
// exports (on_event, decide_ttl) with //go:wasmexport; see plugins/ABI.md
// and the plugins under plugins/examples.
//
// It also has allocation-light JSON helpers (Lookup, String, Int,
// AppendString): inside a module, encoding/json's reflection and
// allocations cost far more than the hook itself. On other platforms only
// those helpers exist, so they can be tested natively.
package guest
