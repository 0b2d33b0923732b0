//go:build wasip1

// Command noop is a plugin that does nothing: it declares both hooks and
// returns at once, so its cost is the host's per-call overhead.
package main

import "github.com/sandgate/sandgate/plugins/guest"

var noChange = []byte(`{"noChange":true}`)

//go:wasmexport on_event
func onEvent(ptr, n uint32) {}

//go:wasmexport decide_ttl
func decideTTL(ptr, n uint32) uint64 { return guest.Output(noChange) }

func main() {}
