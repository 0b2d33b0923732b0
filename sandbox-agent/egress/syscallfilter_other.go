//go:build !amd64 && !arm64

package egress

// No filter on other architectures: their syscall tables are not in it.
const (
	syscallFilterSupported = false
	filterArch             = 0
	foreignSyscallBit      = 0
)

var archDeniedSyscalls []uintptr
