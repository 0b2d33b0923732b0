//go:build wasip1

// Command bad-misbehave is a deliberately broken plugin for the host's tests.
// Its behaviour is picked by the sandbox id in the input (or, for events,
// the event's sandboxId):
//
//	"loop"    spins forever
//	"oom"     allocates until the memory limit stops it
//	"trap"    panics (the Go runtime then exits the module)
//	"badjson" returns malformed JSON from decide_ttl
//	"slow"    burns about 20 ms of CPU, then behaves
//
// Any other id behaves: on_event emits an audit record, decide_ttl returns
// "no change". That lets a test check that the instance after a failure works.
package main

import (
	"bytes"
	"time"

	"github.com/sandgate/sandgate/plugins/guest"
)

var hoard [][]byte

func misbehave(in []byte) {
	switch {
	case bytes.Contains(in, []byte(`"sandboxId":"loop"`)):
		for {
		}
	case bytes.Contains(in, []byte(`"sandboxId":"oom"`)):
		for {
			hoard = append(hoard, make([]byte, 4<<20))
		}
	case bytes.Contains(in, []byte(`"sandboxId":"trap"`)):
		panic("bad-misbehave: trap requested")
	case bytes.Contains(in, []byte(`"sandboxId":"slow"`)):
		for start := time.Now(); time.Since(start) < 20*time.Millisecond; {
		}
	}
}

//go:wasmexport on_event
func onEvent(ptr, n uint32) {
	in := guest.Input(ptr, n)
	misbehave(in)
	guest.EmitAudit([]byte(`{"plugin":"bad-misbehave","ok":true}`))
}

//go:wasmexport decide_ttl
func decideTTL(ptr, n uint32) uint64 {
	in := guest.Input(ptr, n)
	misbehave(in)
	if bytes.Contains(in, []byte(`"sandboxId":"badjson"`)) {
		return guest.Output([]byte(`{"expiresAt": 2026-`))
	}
	return guest.Output([]byte(`{"noChange":true}`))
}

func main() {}
