// Package procs starts and stops the processes that the sandbox agent runs on behalf of
// its callers. It exists for two reasons. First, when the agent is PID 1 it must reap
// orphaned zombies without stealing the exit status of its own children (which os/exec
// waits for itself): every child is started through Start, which records its pid, and the
// reaper consults Tracked. Second, a command and everything it spawns must stop together,
// so children get their own process group and KillGroup/KillTree end all of it.
package procs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

var (
	// startMu is held for reading while a child is started and recorded, and for
	// writing by the reaper while it scans, so that the reaper never sees a child
	// that exited between fork and registration as an orphan.
	startMu sync.RWMutex
	trackMu sync.Mutex
	tracked = map[int]struct{}{}
)

// Start starts cmd and records its pid so that the PID-1 reaper leaves it to cmd.Wait.
// Callers must call Wait (from this package) instead of cmd.Wait.
func Start(cmd *exec.Cmd) error {
	startMu.RLock()
	defer startMu.RUnlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	trackMu.Lock()
	tracked[cmd.Process.Pid] = struct{}{}
	trackMu.Unlock()
	return nil
}

// Track records a pid started some other way (for example by a PTY library that calls
// cmd.Start itself) while the caller holds the start lock via Starting.
func Track(pid int) {
	trackMu.Lock()
	tracked[pid] = struct{}{}
	trackMu.Unlock()
}

// Starting runs fn, which is expected to start a child and Track it, under the start
// lock, for libraries that start processes themselves.
func Starting(fn func() error) error {
	startMu.RLock()
	defer startMu.RUnlock()
	return fn()
}

// Wait waits for cmd and then forgets its pid.
//
// It first waits for the exit in the runtime's poller (awaitExit): cmd.Wait alone blocks
// a thread in waitid for the whole life of the process, and a goroutine in a system
// call keeps its processor busy, which keeps the runtime's monitor (sysmon) polling
// every 20 µs to 10 ms until it takes the processor away. The agent of a sandbox in a
// batch pays that for each command, a hundred agents at once on a loaded machine.
func Wait(cmd *exec.Cmd) error {
	awaitExit(cmd.Process.Pid)
	return WaitExited(cmd)
}

// WaitExited is Wait for a cmd whose process is known to have exited (AwaitExit and a
// waitid that found it so returned): it reaps the process at once and forgets its pid.
func WaitExited(cmd *exec.Cmd) error {
	err := cmd.Wait()
	Untrack(cmd.Process.Pid)
	return err
}

// AwaitExit returns once the child pid has exited, without reaping it, parked in the
// poller on a pidfd. It returns at once when the kernel has no pidfds (Linux before
// 5.10, gVisor).
func AwaitExit(pid int) {
	awaitExit(pid)
}

// awaitExit returns once the child pid has exited (it is not reaped: the caller's
// cmd.Wait does that at once), parked in the poller on a pidfd. It returns at once
// when the kernel has no pidfds (Linux before 5.10, gVisor), and cmd.Wait then waits
// as it always did.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd") // non-blocking: registered with the poller
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		// A pidfd is readable once its process has exited; waitid says whether it has
		// without reaping it. Any error ends the wait here (cmd.Wait then blocks).
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		return err != nil || SiginfoPid(&info) != 0
	})
}

// SiginfoPid is si_pid of a siginfo_t that waitid filled (0 when it named no child):
// the first field of the union that follows three ints, aligned as a pointer is.
func SiginfoPid(info *unix.Siginfo) int {
	const ptr = unsafe.Sizeof(uintptr(0))
	off := (3*unsafe.Sizeof(int32(0)) + ptr - 1) &^ (ptr - 1)
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), off)))
}

// Untrack forgets a pid once its owner has waited for it.
func Untrack(pid int) {
	trackMu.Lock()
	delete(tracked, pid)
	trackMu.Unlock()
}

// Tracked reports whether pid belongs to a child that the agent waits for itself.
func Tracked(pid int) bool {
	trackMu.Lock()
	defer trackMu.Unlock()
	_, ok := tracked[pid]
	return ok
}

// LockForReap blocks process starts while the reaper scans for orphans; call the
// returned function to release.
func LockForReap() func() {
	startMu.Lock()
	return startMu.Unlock
}

// ExitCode turns the error of Wait into a shell-style exit code: the process's own code,
// or 128+signal when a signal ended it.
func ExitCode(state *os.ProcessState, err error) int {
	if state == nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			state = ee.ProcessState
		}
	}
	if state == nil {
		if err != nil {
			return -1
		}
		return 0
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}

// KillGroup sends sig to the process group pgid.
func KillGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return errors.New("procs: refusing to signal process group <= 1")
	}
	return syscall.Kill(-pgid, sig)
}

// StopGroup asks the process group to terminate and kills it when it is still alive after
// grace. done is closed by the caller when the group leader has been reaped.
func StopGroup(pgid int, grace time.Duration, done <-chan struct{}) {
	_ = KillGroup(pgid, syscall.SIGTERM)
	select {
	case <-done:
		// The leader is gone, but members that ignored SIGTERM may still run.
		_ = KillGroup(pgid, syscall.SIGKILL)
	case <-time.After(grace):
		_ = KillGroup(pgid, syscall.SIGKILL)
	}
}

// Descendants returns the pids of every live descendant of pid, read from /proc.
func Descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, _, ok := Stat(child)
		if ok {
			children[ppid] = append(children[ppid], child)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// KillTree sends sig to every descendant of pid (not to pid itself): it stops what a
// persistent shell is running without ending the shell.
func KillTree(pid int, sig syscall.Signal) {
	for _, d := range Descendants(pid) {
		_ = syscall.Kill(d, sig)
	}
}

// Stat reads the parent pid and state letter of pid from /proc/pid/stat.
func Stat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// The command name is in parentheses and may itself contain spaces or parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+4 > len(s) {
		return 0, 0, false
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	if err != nil {
		return 0, 0, false
	}
	return ppid, fields[0][0], true
}

// PendingBytes is the number of unread bytes in a pipe or terminal (FIONREAD), or 0
// when unknown: a stream reader that finds none left after its process exited may stop
// waiting for an end of file that a grandchild holding the pipe would delay forever.
// It goes through SyscallConn because File.Fd would switch the file to blocking mode,
// which disables read deadlines.
func PendingBytes(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) // TIOCINQ is FIONREAD on Linux
	})
	return n
}

// Shell returns the shell used for commands and sessions: bash when the image has it,
// else sh.
func Shell() string {
	// Every command starts through it: a bash once found is kept instead of being
	// looked for (three stats) per command. Anything else is looked for again, so that
	// a bash installed later is used.
	if p, _ := foundBash.Load().(string); p != "" {
		return p
	}
	p := findShell()
	if IsBash(p) {
		foundBash.Store(p)
	}
	return p
}

var foundBash atomic.Value

func findShell() string {
	for _, p := range []string{"/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath("bash"); err == nil {
		return p
	}
	if p, err := exec.LookPath("sh"); err == nil {
		return p
	}
	return "/bin/sh"
}

// DevNull is /dev/null opened once for reading, the stdin of commands that have none:
// exec.Cmd would open and close it for each start. Nil when it cannot be opened (exec
// then opens it itself).
var DevNull = func() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil
	}
	return f
}()

// IsBash reports whether shell is bash.
func IsBash(shell string) bool { return filepath.Base(shell) == "bash" }
