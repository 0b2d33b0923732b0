//go:build wasip1

// Command misbehave is a deliberately broken plugin for the gateway's end-to-end tests.
// Unlike plugins/examples/bad-misbehave, whose fault is picked by a sandbox id the gateway
// never produces (ids are UUIDs), its fault is picked by its settings, so one module
// uploaded several times gives every fault on every call:
//
//	{"mode": "loop"}     spins forever (on_event and decide_ttl)
//	{"mode": "oom"}      allocates until the memory limit stops it
//	{"mode": "trap"}     panics (the Go runtime then exits the module)
//	{"mode": "badjson"}  decide_ttl returns malformed JSON; on_event behaves
//	{"mode": "ok"}       behaves: on_event emits an audit record, decide_ttl "no change"
package main

import (
	"encoding/json"
	"fmt"

	"github.com/sandgate/sandgate/plugins/guest"
)

var mode string

var hoard [][]byte

func init() {
	guest.OnConfigure(func(raw []byte) error {
		var s struct {
			Mode string `json:"mode"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("settings: %w", err)
		}
		switch s.Mode {
		case "loop", "oom", "trap", "badjson", "ok":
			mode = s.Mode
			return nil
		}
		return fmt.Errorf("settings: unknown mode %q", s.Mode)
	})
}

func misbehave() {
	switch mode {
	case "loop":
		for {
		}
	case "oom":
		for {
			hoard = append(hoard, make([]byte, 4<<20))
		}
	case "trap":
		panic("misbehave: trap requested")
	}
}

//go:wasmexport on_event
func onEvent(ptr, n uint32) {
	_ = guest.Input(ptr, n)
	misbehave()
	guest.EmitAudit([]byte(`{"plugin":"misbehave","ok":true}`))
}

//go:wasmexport decide_ttl
func decideTTL(ptr, n uint32) uint64 {
	_ = guest.Input(ptr, n)
	misbehave()
	if mode == "badjson" {
		return guest.Output([]byte(`{"expiresAt": 2026-`))
	}
	return guest.Output([]byte(`{"noChange":true}`))
}

func main() {}
