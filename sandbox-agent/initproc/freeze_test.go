package initproc

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startSession runs script in a session of its own and returns its pid (the session's
// id); the session is killed at the end of the test.
func startSession(t *testing.T, script string) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-sid, syscall.SIGKILL)
		_ = syscall.Kill(-sid, syscall.SIGCONT)
		_ = cmd.Wait()
	})
	return sid
}

// sessionStates reads the state of every process of session sid.
func sessionStates(t *testing.T, sid int) map[int]byte {
	t.Helper()
	f := &Freezer{Includes: func(_, s int) bool { return s == sid }}
	entries, err := f.scan()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]byte{}
	for _, p := range entries {
		out[p.pid] = p.state
	}
	return out
}

func readCounter(t *testing.T, path string) int {
	t.Helper()
	for range 100 {
		b, _ := os.ReadFile(path)
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no counter in %s", path)
	return 0
}

func TestFreezerStopsAForkingWorkloadAndThawsIt(t *testing.T) {
	dir := t.TempDir()
	counter := filepath.Join(dir, "counter")
	// A workload that forks all the time: each round starts a short-lived child, and
	// a long-lived child counts on its own.
	sid := startSession(t, `
		(i=0; while :; do i=$((i+1)); echo $i > `+counter+`.tmp; mv `+counter+`.tmp `+counter+`; sleep 0.005; done) &
		while :; do sleep 0.01 & wait; done`)
	readCounter(t, counter)
	// A process the workload stops itself must stay stopped after a thaw.
	selfStopped := exec.Command("sleep", "60")
	selfStopped.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := selfStopped.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = selfStopped.Process.Kill(); _ = selfStopped.Wait() }()
	stoppedSid := selfStopped.Process.Pid
	if err := syscall.Kill(stoppedSid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, stoppedSid, 'T')

	f := &Freezer{Includes: func(_, s int) bool { return s == sid || s == stoppedSid }}
	n, err := f.Freeze(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("froze %d processes, want the shell and its counter at least", n)
	}
	for pid, state := range sessionStates(t, sid) {
		if !isStopped(state) && state != 'Z' {
			t.Errorf("process %d of the frozen session is in state %c", pid, state)
		}
	}
	before := readCounter(t, counter)
	time.Sleep(200 * time.Millisecond)
	if after := readCounter(t, counter); after != before {
		t.Fatalf("the counter moved from %d to %d while frozen", before, after)
	}
	if !f.Frozen() {
		t.Fatal("Frozen() is false while frozen")
	}

	if _, err := f.Thaw(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for readCounter(t, counter) == before {
		if time.Now().After(deadline) {
			t.Fatal("the counter did not move after the thaw")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if f.Frozen() {
		t.Fatal("Frozen() is true after the thaw")
	}
	if _, state, _ := procStat(stoppedSid); state != 'T' {
		t.Fatalf("the process the workload stopped itself is in state %c after the thaw, want T", state)
	}
}

func TestFreezerGivesUpAndThawsWhenItCannotSettle(t *testing.T) {
	sid := startSession(t, `while :; do sleep 0.01 & wait; done`)
	// A window too short for any signal to be taken: Freeze must give up and leave
	// nothing stopped.
	f := &Freezer{Includes: func(_, s int) bool { return s == sid }, Window: time.Nanosecond}
	if _, err := f.Freeze(context.Background()); err != ErrStillStarting {
		t.Fatalf("Freeze = %v, want ErrStillStarting", err)
	}
	if f.Frozen() {
		t.Fatal("Frozen() after a failed freeze")
	}
	time.Sleep(50 * time.Millisecond)
	for pid, state := range sessionStates(t, sid) {
		if isStopped(state) {
			t.Errorf("process %d left stopped by a failed freeze", pid)
		}
	}
}

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses.
	line := "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 12345 1000 10"
	p, ok := parseStat(42, line)
	if !ok || p.state != 'S' || p.sid != 42 || p.start != 12345 {
		t.Fatalf("parseStat = %+v, %v", p, ok)
	}
	if _, ok := parseStat(1, "1 (x) S 0"); ok {
		t.Fatal("a short line parsed")
	}
}

func waitState(t *testing.T, pid int, want byte) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, state, ok := procStat(pid); ok && state == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never reached state %c", pid, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// procStat reads one process's session and state.
func procStat(pid int) (sid int, state byte, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	p, ok := parseStat(pid, string(b))
	return p.sid, p.state, ok
}

// vforkParentEnv makes the test binary the parent of a vfork child that stops before
// its exec (TestFreezerCountsAVforkParentOfAStoppedChild).
const vforkParentEnv = "SANDGATE_VFORK_PARENT_TEST"

func init() {
	if os.Getenv(vforkParentEnv) != "" {
		// In init the main goroutine is on the main thread, whose state /proc/<pid>/stat
		// shows: the vfork is made from it.
		runtime.LockOSThread()
	}
}

// vforkParent makes a vfork child (clone with CLONE_VFORK, as posix_spawn and shells
// do) that stops itself before any exec, the way a child caught by a SIGSTOP between its
// fork and its exec is: this thread then waits, uninterruptibly, until the child goes
// on. It exits once the child has.
func vforkParent() {
	pid, _, errno := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.CLONE_VFORK|syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 {
		os.Exit(2)
	}
	if pid == 0 {
		self, _, _ := syscall.RawSyscall(syscall.SYS_GETPID, 0, 0, 0)
		_, _, _ = syscall.RawSyscall(syscall.SYS_KILL, self, uintptr(syscall.SIGSTOP), 0)
		_, _, _ = syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	}
	os.Exit(0)
}

// TestFreezerCountsAVforkParentOfAStoppedChild: a parent waiting on a vfork child that
// is stopped before its exec never reaches the stopped state (it waits in D), yet runs
// no code: Freeze counts it as frozen instead of scanning until its window ends, and
// Thaw leaves it free to go on once its child does.
func TestFreezerCountsAVforkParentOfAStoppedChild(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), vforkParentEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-sid, syscall.SIGKILL)
		_ = syscall.Kill(-sid, syscall.SIGCONT)
		<-exited
	})
	var child int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		states := sessionStates(t, sid)
		child = 0
		for pid, state := range states {
			if pid != sid && state == 'T' {
				child = pid
			}
		}
		if states[sid] == 'D' && child != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no vfork parent waiting on a stopped child: %v", states)
		}
	}
	f := &Freezer{Includes: func(_, s int) bool { return s == sid }, Window: 2 * time.Second}
	if _, err := f.Freeze(context.Background()); err != nil {
		t.Fatalf("freeze of a vfork parent whose child is stopped: %v", err)
	}
	if _, err := f.Thaw(); err != nil {
		t.Fatal(err)
	}
	// The child goes on (and exits): the parent, thawed, must not be left stopped.
	if err := syscall.Kill(child, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("the vfork parent: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the vfork parent did not go on once thawed and its child went on: state %c", sessionStates(t, sid)[sid])
	}
}
