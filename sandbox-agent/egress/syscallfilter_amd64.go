package egress

import "golang.org/x/sys/unix"

const (
	syscallFilterSupported = true
	filterArch             = unix.AUDIT_ARCH_X86_64
	// foreignSyscallBit marks x32 calls, which share x86-64's audit arch: any is fatal.
	foreignSyscallBit = 0x40000000
)

// archDeniedSyscalls are x86-64's own calls the filter refuses.
var archDeniedSyscalls = []uintptr{
	unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_USELIB, unix.SYS_USTAT, unix.SYS_SYSFS,
	unix.SYS__SYSCTL, unix.SYS_CREATE_MODULE, unix.SYS_GET_KERNEL_SYMS, unix.SYS_QUERY_MODULE,
	unix.SYS_NFSSERVCTL, unix.SYS_MODIFY_LDT,
}
