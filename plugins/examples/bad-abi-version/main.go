//go:build wasip1

// Command bad-abi-version claims ABI version 2, which the host must refuse.
// It implements the rest of the ABI by hand (no guest package) so that the
// version is the only thing wrong with it.
package main

import "unsafe"

//go:wasmexport sandgate_abi_version
func abiVersion() int32 { return 2 }

var pinned = map[uint32][]byte{}

//go:wasmexport sandgate_alloc
func alloc(size uint32) uint32 {
	buf := make([]byte, size+1)
	ptr := uint32(uintptr(unsafe.Pointer(&buf[0])))
	pinned[ptr] = buf
	return ptr
}

//go:wasmexport on_event
func onEvent(ptr, n uint32) {}

func main() {}
