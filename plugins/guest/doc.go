// Package guest is the plugin side of sandgate's plugin ABI v1 for Go plugins
// built with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared.
//
// Importing it exports the ABI's bookkeeping functions (sandgate_abi_version,
// sandgate_alloc, sandgate_free, sandgate_configure) and wraps the host
// functions of the "sandgate" import module. A plugin adds its own hook
// exports (on_event, decide_ttl) with //go:wasmexport; see plugins/ABI.md
// and the plugins under plugins/examples.
//
// On other platforms the package is empty: it only makes sense inside a
// WebAssembly module.
package guest
