//go:build wasip1

// Command bad-init-loop never finishes starting: its package initialisation
// spins, so _initialize runs until the host's instantiation deadline.
package main

import "github.com/sandgate/sandgate/plugins/guest"

var spins int

func init() {
	for {
		spins++
	}
}

//go:wasmexport on_event
func onEvent(ptr, n uint32) { guest.Log(guest.LevelInfo, "unreachable") }

func main() {}
