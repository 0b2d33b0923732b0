package egress

// The enforcer's syscall filter. The enforcer needs sockets (netlink for nftables,
// UDP and TCP for its proxies), files (its state, its log) and threads; nothing else
// the kernel offers. Main installs, on every thread, a seccomp filter that refuses
// (EPERM) the calls a process could use to widen what it reaches should it ever run code
// it was not built with: namespaces (unshare, setns, clone with a namespace flag; clone3,
// whose flags a filter cannot read, is ENOSYS, so callers fall back to clone), mounts
// and chroot, ptrace and other processes' memory, keys, BPF, perf, userfaultfd,
// io_uring, kernel modules and kexec, handles to files by number, the clock, swap,
// reboot, accounting and the kernel log. A call made for another architecture's
// table (or the x32 one) ends the process. A sidecar enforcer gets this on top of the
// engine's own filter; the host process (runtimes/docker/enforcerprocess.go) has only
// this one.

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// deniedSyscalls are refused with EPERM on every architecture the filter knows
// (archDeniedSyscalls adds the architecture's own).
var deniedSyscalls = []uintptr{
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV, unix.SYS_KCMP,
	unix.SYS_PIDFD_GETFD,
	unix.SYS_UNSHARE, unix.SYS_SETNS,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOVE_MOUNT,
	unix.SYS_OPEN_TREE, unix.SYS_MOUNT_SETATTR,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
	unix.SYS_SETHOSTNAME, unix.SYS_SETDOMAINNAME,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_REBOOT, unix.SYS_ACCT, unix.SYS_SYSLOG,
	unix.SYS_QUOTACTL, unix.SYS_LOOKUP_DCOOKIE, unix.SYS_PERSONALITY, unix.SYS_VHANGUP,
	unix.SYS_FANOTIFY_INIT, unix.SYS_MOVE_PAGES,
}

// namespaceCloneFlags are the clone flags that make a namespace: a clone with any of
// them is refused. (CLONE_NEWTIME shares its bit with clone's exit signal, so clone
// cannot take it; unshare and clone3, which can, are refused whole.)
const namespaceCloneFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWNET |
	unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP

// Offsets into struct seccomp_data.
const (
	seccompDataNr       = 0
	seccompDataArch     = 4
	seccompDataArg0Low  = 16 // args[0]'s low word (both architectures are little-endian)
	sysClone3           = 435
	seccompRetAllow     = unix.SECCOMP_RET_ALLOW
	seccompRetKill      = unix.SECCOMP_RET_KILL_PROCESS
	seccompRetErrnoBase = unix.SECCOMP_RET_ERRNO
)

// filterProgram assembles the filter: instructions whose jumps name labels, resolved
// once the program is laid out.
type filterProgram struct {
	code   []unix.SockFilter
	jumps  map[int][2]string // instruction index → labels of its true and false targets ("": next)
	labels map[string]int
}

func (p *filterProgram) stmt(code uint16, k uint32) {
	p.code = append(p.code, unix.SockFilter{Code: code, K: k})
}

func (p *filterProgram) jump(code uint16, k uint32, ifTrue, ifFalse string) {
	p.jumps[len(p.code)] = [2]string{ifTrue, ifFalse}
	p.code = append(p.code, unix.SockFilter{Code: code, K: k})
}

func (p *filterProgram) label(name string) { p.labels[name] = len(p.code) }

func (p *filterProgram) resolve() ([]unix.SockFilter, error) {
	for i, targets := range p.jumps {
		for n, name := range targets {
			if name == "" {
				continue
			}
			to, ok := p.labels[name]
			if !ok || to <= i || to-i-1 > 255 {
				return nil, fmt.Errorf("syscall filter: jump from %d to %q out of reach", i, name)
			}
			if n == 0 {
				p.code[i].Jt = uint8(to - i - 1)
			} else {
				p.code[i].Jf = uint8(to - i - 1)
			}
		}
	}
	return p.code, nil
}

// syscallFilter is the enforcer's filter for this architecture.
func syscallFilter() ([]unix.SockFilter, error) {
	p := &filterProgram{jumps: map[int][2]string{}, labels: map[string]int{}}
	p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, seccompDataArch)
	p.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, filterArch, "", "kill")
	p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, seccompDataNr)
	if foreignSyscallBit != 0 {
		p.jump(unix.BPF_JMP|unix.BPF_JSET|unix.BPF_K, foreignSyscallBit, "kill", "")
	}
	for _, nr := range append(append([]uintptr{}, deniedSyscalls...), archDeniedSyscalls...) {
		p.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, uint32(nr), "eperm", "")
	}
	p.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, sysClone3, "enosys", "")
	p.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.SYS_CLONE, "clone", "")
	p.stmt(unix.BPF_RET|unix.BPF_K, seccompRetAllow)
	p.label("clone")
	p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, seccompDataArg0Low)
	p.jump(unix.BPF_JMP|unix.BPF_JSET|unix.BPF_K, namespaceCloneFlags, "eperm", "")
	p.stmt(unix.BPF_RET|unix.BPF_K, seccompRetAllow)
	p.label("eperm")
	p.stmt(unix.BPF_RET|unix.BPF_K, seccompRetErrnoBase|uint32(unix.EPERM))
	p.label("enosys")
	p.stmt(unix.BPF_RET|unix.BPF_K, seccompRetErrnoBase|uint32(unix.ENOSYS))
	p.label("kill")
	p.stmt(unix.BPF_RET|unix.BPF_K, seccompRetKill)
	return p.resolve()
}

// installSyscallFilter installs the filter on every thread of the process. no_new_privs
// must be set already (noNewPrivs).
func installSyscallFilter() error {
	if !syscallFilterSupported {
		return nil
	}
	code, err := syscallFilter()
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(code)), Filter: &code[0]}
	_, _, errno := syscall.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("install the syscall filter: %w", errno)
	}
	return nil
}
