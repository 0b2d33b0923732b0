//go:build wasip1

package guest

import (
	"runtime"
	"unsafe"
)

// ABIVersion is the version of the plugin ABI this package implements.
const ABIVersion = 1

// Level is a log severity; the values are those of log/slog so the host
// passes them through unchanged.
type Level int32

// Log levels understood by the host.
const (
	LevelDebug Level = -4
	LevelInfo  Level = 0
	LevelWarn  Level = 4
	LevelError Level = 8
)

//go:wasmimport sandgate log
func hostLog(level int32, ptr, n uint32)

//go:wasmimport sandgate emit_audit
func hostEmitAudit(ptr, n uint32)

//go:wasmimport sandgate now_unix_ms
func hostNowUnixMs() int64

// Log sends a message to the gateway's log, tagged with the tenant and plugin.
func Log(level Level, msg string) {
	if len(msg) == 0 {
		return
	}
	hostLog(int32(level), uint32(uintptr(unsafe.Pointer(unsafe.StringData(msg)))), uint32(len(msg)))
	runtime.KeepAlive(msg)
}

// EmitAudit hands one audit record (a JSON object) to the gateway's audit
// sink. The host copies it before returning.
func EmitAudit(record []byte) {
	if len(record) == 0 {
		return
	}
	hostEmitAudit(uint32(uintptr(unsafe.Pointer(&record[0]))), uint32(len(record)))
	runtime.KeepAlive(record)
}

// NowUnixMs returns the host's wall clock in milliseconds since the Unix epoch.
func NowUnixMs() int64 { return hostNowUnixMs() }

//go:wasmexport sandgate_abi_version
func abiVersion() int32 { return ABIVersion }

// pinned keeps buffers handed to the host reachable: the host owns them until
// it calls sandgate_free, and Go's collector must not reclaim them earlier.
var pinned = make(map[uint32][]byte)

//go:wasmexport sandgate_alloc
func alloc(size uint32) uint32 {
	if size == 0 {
		size = 1
	}
	buf := make([]byte, size)
	ptr := uint32(uintptr(unsafe.Pointer(&buf[0])))
	pinned[ptr] = buf
	return ptr
}

//go:wasmexport sandgate_free
func free(ptr uint32) { delete(pinned, ptr) }

var (
	settings  = []byte("{}")
	configure func(settings []byte) error
)

// OnConfigure registers f to receive the plugin's settings (a JSON object)
// once per instance, before any hook runs. Call it from an init function:
// the host calls sandgate_configure right after instantiation, before main
// would ever run. An error refuses the instance and is reported to the
// uploader.
func OnConfigure(f func(settings []byte) error) { configure = f }

// Settings returns the raw settings JSON of the plugin ("{}" when none).
func Settings() []byte { return settings }

//go:wasmexport sandgate_configure
func configureExport(ptr, n uint32) int32 {
	settings = append([]byte(nil), Input(ptr, n)...)
	if configure == nil {
		return 0
	}
	if err := configure(settings); err != nil {
		Log(LevelError, "configure: "+err.Error())
		return 1
	}
	return 0
}

// Input returns the n bytes the host wrote at ptr for a hook call. The slice
// aliases host-owned memory: it is valid only until the hook returns, so copy
// anything kept longer.
func Input(ptr, n uint32) []byte {
	if n == 0 {
		return nil
	}
	// unsafe.Add from nil turns the host-given address into a pointer
	// without a uintptr conversion that vet would rightly question elsewhere.
	return unsafe.Slice((*byte)(unsafe.Add(nil, uintptr(ptr))), n)
}

// lastOutput keeps the most recent hook result alive until the host has
// copied it, which it does before making any other call into the instance.
var lastOutput []byte

// Output returns out to the host from a hook with a packed pointer/length
// result (decide_ttl): pointer in the high 32 bits, length in the low 32.
func Output(out []byte) uint64 {
	lastOutput = out
	if len(out) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&out[0])))<<32 | uint64(len(out))
}
