package egress

import "golang.org/x/sys/unix"

const (
	syscallFilterSupported = true
	filterArch             = unix.AUDIT_ARCH_AARCH64
	foreignSyscallBit      = 0
)

// archDeniedSyscalls are arm64's own calls the filter refuses.
var archDeniedSyscalls = []uintptr{unix.SYS_NFSSERVCTL}
