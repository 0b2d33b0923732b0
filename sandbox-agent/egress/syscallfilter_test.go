package egress

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// filterChildEnv makes the test binary a child that tries each call of filterProbes,
// with the enforcer's syscall filter ("filter") or without it ("bare"), and prints
// "<probe> <errno>" for each ("ok" when it succeeded); "x32" makes one x32 call.
const filterChildEnv = "SANDGATE_SYSCALL_FILTER_CHILD"

// filterProbes are the calls the child tries: what a root process may do unfiltered,
// and what the enforcer itself needs.
var filterProbes = []struct {
	name string
	call func() error
}{
	{"clone-newuser", func() error { return forkTrue(unix.CLONE_NEWUSER) }},
	{"clone-newnet", func() error { return forkTrue(unix.CLONE_NEWNET) }},
	{"unshare-newuts", func() error { return onThrowawayThread(func() error { return unix.Unshare(unix.CLONE_NEWUTS) }) }},
	{"setns-own-net", func() error {
		return onThrowawayThread(func() error {
			f, err := os.Open("/proc/self/ns/net")
			if err != nil {
				return err
			}
			defer f.Close()
			return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		})
	}},
	{"mount-missing", func() error { return unix.Mount("none", "/nonexistent-sandgate", "tmpfs", 0, "") }},
	{"chroot-missing", func() error { return unix.Chroot("/nonexistent-sandgate") }},
	{"keyctl", func() error { _, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_PROCESS_KEYRING, true); return err }},
	{"bpf-bad-command", func() error { return rawErr(unix.SYS_BPF, 0xffff, 0, 0) }},
	{"io-uring-setup", func() error { return rawErr(unix.SYS_IO_URING_SETUP, 0, 0, 0) }},
	{"process-vm-readv-self", func() error {
		var src, dst [8]byte
		local := []unix.Iovec{{Base: &dst[0], Len: 8}}
		remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: 8}}
		_, err := unix.ProcessVMReadv(os.Getpid(), local, remote, 0)
		return err
	}},
	{"clone3-empty", func() error { return rawErr(sysClone3, 0, 0, 0) }},
	// What the enforcer does.
	{"netlink-netfilter", func() error { return socketAndClose(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER) }},
	{"udp-loopback", func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	}},
	{"write-file", func() error {
		return os.WriteFile(filepath.Join(os.TempDir(), fmt.Sprintf("sandgate-filter-%d", os.Getpid())), []byte("x"), 0o600)
	}},
	{"new-threads", func() error {
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() { defer wg.Done(); _ = onThrowawayThread(func() error { return nil }) }()
		}
		wg.Wait()
		return nil
	}},
	{"fork-exec", func() error { return forkTrue(0) }},
}

// forkTrue starts /bin/true with clone flags and waits for it.
func forkTrue(flags uintptr) error {
	pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Cloneflags: flags}})
	if err != nil {
		return err
	}
	var ws syscall.WaitStatus
	_, err = syscall.Wait4(pid, &ws, 0, nil)
	return err
}

// onThrowawayThread runs f on a thread of its own that ends with it, so that a
// namespace it enters is no other goroutine's.
func onThrowawayThread(f func() error) error {
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		done <- f()
	}()
	return <-done
}

func rawErr(nr, a1, a2, a3 uintptr) error {
	if _, _, errno := syscall.Syscall(nr, a1, a2, a3); errno != 0 {
		return errno
	}
	return nil
}

func socketAndClose(domain, typ, proto int) error {
	fd, err := unix.Socket(domain, typ, proto)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// syscallFilterChild is the child's part; it returns the exit code.
func syscallFilterChild(mode string) int {
	if mode != "bare" {
		if err := noNewPrivs(); err != nil {
			fmt.Println("setup", err)
			return 1
		}
		if err := installSyscallFilter(); err != nil {
			fmt.Println("setup", err)
			return 1
		}
	}
	if mode == "x32" {
		_ = rawErr(foreignSyscallBit|unix.SYS_GETPID, 0, 0, 0)
		fmt.Println("x32 survived")
		return 0
	}
	for _, p := range filterProbes {
		result := "ok"
		if err := p.call(); err != nil {
			var errno syscall.Errno
			if errors.As(err, &errno) {
				result = unix.ErrnoName(errno)
			} else {
				result = err.Error()
			}
		}
		fmt.Println(p.name, result)
	}
	_ = os.Remove(filepath.Join(os.TempDir(), fmt.Sprintf("sandgate-filter-%d", os.Getpid())))
	return 0
}

// runFilterChild runs the test binary as the child in mode and returns probe → result.
func runFilterChild(t *testing.T, mode string) map[string]string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), filterChildEnv+"="+mode)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child (%s): %v\n%s", mode, err, out)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if name, result, ok := strings.Cut(sc.Text(), " "); ok {
			got[name] = result
		}
	}
	return got
}

// TestEnforcerSyscallFilter: with the enforcer's filter, a root process (as the
// enforcer's sidecar is, and stronger than its host process) can make no namespace, enter
// none, mount, chroot, use keys, BPF, io_uring or another process's memory, and clone3 is
// ENOSYS; every one of those calls does something else without the filter, so the
// difference is the filter's. What the enforcer needs (netlink, UDP, files, threads)
// still works, and an x32 call ends the process.
func TestEnforcerSyscallFilter(t *testing.T) {
	if !syscallFilterSupported {
		t.Skip("no syscall filter on " + runtime.GOARCH)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the unfiltered calls it compares with are root's")
	}
	bare := runFilterChild(t, "bare")
	filtered := runFilterChild(t, "filter")
	want := map[string]string{
		"clone-newuser": "EPERM", "clone-newnet": "EPERM", "unshare-newuts": "EPERM", "setns-own-net": "EPERM",
		"mount-missing": "EPERM", "chroot-missing": "EPERM", "keyctl": "EPERM", "bpf-bad-command": "EPERM",
		"io-uring-setup": "EPERM", "process-vm-readv-self": "EPERM", "clone3-empty": "ENOSYS",
		"netlink-netfilter": "ok", "udp-loopback": "ok", "write-file": "ok", "new-threads": "ok", "fork-exec": "ok",
	}
	for _, p := range filterProbes {
		w := want[p.name]
		if filtered[p.name] != w {
			t.Errorf("%s with the filter: %q, want %s", p.name, filtered[p.name], w)
		}
		if w != "ok" && bare[p.name] == w {
			t.Errorf("%s without the filter is %s already: the probe shows nothing of the filter", p.name, w)
		}
	}
	if t.Failed() {
		t.Logf("without the filter: %v", bare)
	}
	if foreignSyscallBit == 0 {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), filterChildEnv+"=x32")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !exit.Sys().(syscall.WaitStatus).Signaled() || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGSYS {
		t.Errorf("an x32 call under the filter: %v, output %q; want the process killed by SIGSYS", err, out)
	}
}
