// Package initproc holds the duties of the sandbox agent when it is PID 1 of a
// container: running the sandbox's main process (the entrypoint) in its own process
// group, forwarding signals to it, reaping orphaned zombies without stealing the exit
// status of the agent's own children, reporting the entrypoint's exit so that the
// container ends with its exit code, and freezing the sandbox's other processes for a
// runtime that cannot pause it (freeze.go).
package initproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

// ErrNotFound is returned by Resolve when the entrypoint program does not exist.
var ErrNotFound = errors.New("entrypoint not found")

// replaceGrace is how long a replaced entrypoint gets between SIGTERM and SIGKILL.
const replaceGrace = 2 * time.Second

// Supervisor runs the sandbox's main process. Start may be called again (POST
// /sandgate/entrypoint) to replace it; only the exit of the current one is reported.
type Supervisor struct {
	env    *procs.Environment
	exited chan int

	mu      sync.Mutex
	current *exec.Cmd
	gen     int
	// ended is closed, with code set, when the entrypoint of generation gen exits.
	ended *ended
}

// ended is the exit of one started entrypoint.
type ended struct {
	done chan struct{}
	code int
}

// NewSupervisor makes a supervisor whose processes get env's default environment.
func NewSupervisor(env *procs.Environment) *Supervisor {
	return &Supervisor{env: env, exited: make(chan int, 1)}
}

// Exited delivers the exit code (128+signal when killed) of the current entrypoint.
func (s *Supervisor) Exited() <-chan int { return s.exited }

// Resolve finds the program of argv[0] on the sandbox's PATH.
func Resolve(argv0 string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		fi, err := os.Stat(argv0)
		if err != nil || fi.IsDir() {
			return "", fmt.Errorf("%w: %s", ErrNotFound, argv0)
		}
		return argv0, nil
	}
	path, _ := procs.Lookup(env, "PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	for _, dir := range strings.Split(path, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + argv0
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s not found in PATH", ErrNotFound, argv0)
}

// Start starts argv as the main process, replacing (and stopping) a previous one.
func (s *Supervisor) Start(argv []string) error {
	if len(argv) == 0 {
		return errors.New("initproc: empty entrypoint")
	}
	env := s.env.Build(nil)
	prog, err := Resolve(argv[0], env)
	if err != nil {
		return err
	}
	cmd := exec.Command(prog, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	s.mu.Lock()
	if err := procs.Start(cmd); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("initproc: start %s: %w", argv[0], err)
	}
	old := s.current
	s.gen++
	gen := s.gen
	s.current = cmd
	end := &ended{done: make(chan struct{})}
	s.ended = end
	s.mu.Unlock()

	if old != nil {
		go stopReplaced(old)
	}
	go func() {
		err := procs.Wait(cmd)
		code := procs.ExitCode(cmd.ProcessState, err)
		end.code = code
		close(end.done)
		s.mu.Lock()
		isCurrent := s.gen == gen
		if isCurrent {
			s.current = nil
		}
		s.mu.Unlock()
		if isCurrent {
			select {
			case s.exited <- code:
			default:
			}
		}
	}()
	return nil
}

// settleLook is how often Settle looks at the entrypoint's processes.
const settleLook = 2 * time.Millisecond

// Settle waits until the current entrypoint is past its start, so that one that exits
// at once is told apart from one that runs: it returns as soon as every process of the
// entrypoint's process group is asleep waiting for something (a connection, input, a
// timer, a child) on two looks in a row, or once the entrypoint has run for window
// (a process that computes without ever waiting), or when it exits first: then with
// exited set and its exit code. An entrypoint that waits and only then exits (`sleep 1;
// exit 3`) is past its start; its exit ends the sandbox like any later one.
func (s *Supervisor) Settle(ctx context.Context, window time.Duration) (exited bool, code int) {
	s.mu.Lock()
	cmd, end := s.current, s.ended
	s.mu.Unlock()
	if end == nil {
		return false, 0
	}
	if cmd == nil {
		<-end.done // exited; its Wait goroutine is recording the code
		return true, end.code
	}
	pgid := cmd.Process.Pid
	deadline := time.NewTimer(window)
	defer deadline.Stop()
	tick := time.NewTicker(settleLook)
	defer tick.Stop()
	asleep := 0
	for {
		if groupAsleep(pgid) {
			asleep++
		} else {
			asleep = 0
		}
		if asleep >= 2 {
			// Asleep on both looks, unless it exited in between.
			select {
			case <-end.done:
				return true, end.code
			default:
				return false, 0
			}
		}
		select {
		case <-end.done:
			return true, end.code
		case <-deadline.C:
			return false, 0
		case <-ctx.Done():
			return false, 0
		case <-tick.C:
		}
	}
}

// groupAsleep reports whether process group pgid has a member and every member is in
// interruptible sleep (state S), each of its threads too: none runnable, in
// uninterruptible I/O, stopped or a zombie.
func groupAsleep(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	members := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		group, state, ok := processGroup("/proc/" + e.Name() + "/stat")
		if !ok || group != pgid {
			continue
		}
		if state != 'S' || !threadsAsleep(pid) {
			return false
		}
		members++
	}
	return members > 0
}

// threadsAsleep reports whether every thread of pid is in interruptible sleep: a
// runtime's main thread waits on a futex while its other threads still start up.
func threadsAsleep(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, t := range tasks {
		if _, state, ok := processGroup(dir + t.Name() + "/stat"); ok && state != 'S' {
			return false
		}
	}
	return true
}

// processGroup reads the process group and state from a /proc/<pid>/stat (or a
// thread's /proc/<pid>/task/<tid>/stat) file.
func processGroup(statFile string) (pgid int, state byte, ok bool) {
	b, err := os.ReadFile(statFile)
	if err != nil {
		return 0, 0, false
	}
	// The command name is in parentheses and may itself contain spaces or parentheses:
	// the fields after the last ')' are state, ppid, pgrp, ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 3 || fields[0] == "" {
		return 0, 0, false
	}
	pgid, err = strconv.Atoi(fields[2])
	if err != nil {
		return 0, 0, false
	}
	return pgid, fields[0][0], true
}

// stopReplaced ends a replaced entrypoint and its process group. Its own Wait
// goroutine reaps it; here we only watch the pid.
func stopReplaced(cmd *exec.Cmd) {
	pgid := cmd.Process.Pid
	_ = procs.KillGroup(pgid, syscall.SIGTERM)
	deadline := time.Now().Add(replaceGrace)
	for time.Now().Before(deadline) {
		if syscall.Kill(pgid, 0) != nil {
			break
		}
		if _, state, ok := procs.Stat(pgid); ok && state == 'Z' {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = procs.KillGroup(pgid, syscall.SIGKILL)
}

// Signal forwards sig to the current entrypoint; it reports false when none runs.
func (s *Supervisor) Signal(sig os.Signal) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil {
		return false
	}
	_ = s.current.Process.Signal(sig)
	return true
}

// Running reports whether an entrypoint runs.
func (s *Supervisor) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current != nil
}

// BecomeSubreaper makes orphaned descendants reparent to this process when it is not
// PID 1 (PID 1 gets them anyway).
func BecomeSubreaper() error {
	if os.Getpid() == 1 {
		return nil
	}
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// Reap collects orphaned zombies until ctx ends: on every SIGCHLD and every few
// seconds (signals coalesce), it waits for each zombie child that the agent did not
// start itself.
//
// A SIGCHLD comes with every command's exit, so what it costs is paid per command, on
// the command's way back (the answer waits for a processor while the reaper has it):
// a scan of /proc that finds orphans by name costs 12% of an agent's CPU per first
// command in a batch (sandbox-agent BenchmarkBatchFirstCommand). So waitid names a
// zombie without a scan (ReapExited); the scan remains for a tracked child that stays
// a zombie, behind which waitid cannot see.
func Reap(ctx context.Context) {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGCHLD)
	defer signal.Stop(ch)
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	retry := time.NewTimer(reapRetry)
	retry.Stop()
	defer retry.Stop()
	var blockedSince time.Time
	for {
		if _, blocker := ReapExited(); blocker == 0 {
			blockedSince = time.Time{}
		} else if blockedSince.IsZero() || time.Since(blockedSince) < reapRetry {
			// Its owner is about to wait for it (every child's owner waits at once);
			// look again once it has.
			if blockedSince.IsZero() {
				blockedSince = time.Now()
			}
			retry.Reset(reapRetry)
		} else {
			// Children of the agent's own stood in waitid's way for a retry period: look
			// past them.
			ReapOrphans()
			blockedSince = time.Time{}
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-t.C:
		case <-retry.C:
		}
	}
}

// reapRetry is how soon Reap looks again when a child of the agent's own was the
// zombie waitid named.
const reapRetry = 50 * time.Millisecond

// ReapExited waits for the zombie children that the agent did not start, as long as
// waitid names one, and returns how many it reaped. waitid names one exited child at a
// time without reaping it (WNOWAIT); when that is a tracked child (its owner waits for
// it), ReapExited stops and returns its pid as blocker: others may be behind it.
func ReapExited() (reaped, blocker int) {
	unlock := procs.LockForReap()
	defer unlock()
	for {
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
			return reaped, 0 // ECHILD: no children at all
		}
		pid := procs.SiginfoPid(&info)
		if pid <= 0 {
			return reaped, 0 // children, none exited
		}
		if procs.Tracked(pid) {
			return reaped, pid
		}
		var ws syscall.WaitStatus
		if got, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got != pid {
			return reaped, 0
		}
		reaped++
	}
}

// ReapOrphans waits for every zombie child of this process that is not tracked by
// package procs, and returns how many it reaped.
func ReapOrphans() int {
	unlock := procs.LockForReap()
	defer unlock()
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, state, ok := procs.Stat(pid)
		if !ok || ppid != self || state != 'Z' || procs.Tracked(pid) {
			continue
		}
		var ws syscall.WaitStatus
		if got, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid {
			n++
		}
	}
	return n
}
