package initproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Freezer pauses a sandbox from inside it, for a runtime that cannot freeze a sandbox
// itself (a Kubernetes pod has no pause): it stops every process of the agent's PID
// namespace but the agent with SIGSTOP, which a process can neither catch, block nor
// ignore, and continues them with SIGCONT. The agent keeps answering, so the gateway
// can thaw it; the workload's memory stays as it was, as with an engine's freeze.
//
// A process that forks while it is being stopped leaves a child the scan has not seen:
// Freeze scans again until a scan finds no process it has not stopped and every process
// it stopped is seen stopped. Thaw continues only the processes Freeze stopped (a
// process the workload stopped itself stays stopped), each checked by its start time
// so that a reused pid is never signalled.
type Freezer struct {
	// ProcDir is the proc filesystem read; empty means /proc.
	ProcDir string
	// Includes reports whether the process pid (of session sid) belongs to the sandbox;
	// nil means every process but the caller itself, for the agent as PID 1 of the
	// sandbox's PID namespace.
	Includes func(pid, sid int) bool
	// Window bounds how long Freeze scans before it gives up; zero means 5 s.
	Window time.Duration

	mu      sync.Mutex
	stopped map[int]uint64 // pid → its start time, of the processes Freeze stopped
}

// ErrStillStarting is Freeze's error when processes kept starting for all of its
// window; the processes it had stopped are continued.
var ErrStillStarting = errors.New("processes kept starting while the sandbox was being frozen")

// procEntry is what Freeze reads of one process: /proc/<pid>/stat's state, parent,
// session and start time.
type procEntry struct {
	pid, ppid, sid int
	state          byte
	start          uint64
}

// Freeze stops the sandbox's processes and returns how many it holds stopped. Freezing
// a frozen sandbox stops only what started since.
func (f *Freezer) Freeze(ctx context.Context) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped == nil {
		f.stopped = map[int]uint64{}
	}
	window := f.Window
	if window == 0 {
		window = 5 * time.Second
	}
	deadline := time.Now().Add(window)
	for {
		entries, err := f.scan()
		if err != nil {
			return len(f.stopped), err
		}
		settled := true
		// A parent whose vfork child is stopped before its exec waits, uninterruptibly
		// (D), until the child goes on: it runs no code and takes its stop only once
		// thawed, so it counts as stopped (a SIGCONT of Thaw's cancels that stop).
		stoppedChild := map[int]bool{}
		for _, p := range entries {
			if isStopped(p.state) {
				stoppedChild[p.ppid] = true
			}
		}
		for _, p := range entries {
			if start, ours := f.stopped[p.pid]; ours && start == p.start {
				if !isStopped(p.state) && !isDead(p.state) && !(p.state == 'D' && stoppedChild[p.pid]) {
					settled = false // the signal is not taken yet
				}
				continue
			}
			delete(f.stopped, p.pid) // a reused pid
			if isStopped(p.state) || isDead(p.state) {
				continue // stopped by the workload itself, or a zombie
			}
			if err := syscall.Kill(p.pid, syscall.SIGSTOP); err != nil {
				continue // gone meanwhile
			}
			f.stopped[p.pid] = p.start
			settled = false
		}
		if settled {
			return len(f.stopped), nil
		}
		if err := ctx.Err(); err != nil || time.Now().After(deadline) {
			f.thawLocked()
			if err != nil {
				return 0, err
			}
			return 0, ErrStillStarting
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Thaw continues the processes Freeze stopped and returns how many it continued.
func (f *Freezer) Thaw() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.thawLocked(), nil
}

func (f *Freezer) thawLocked() int {
	if len(f.stopped) == 0 {
		return 0
	}
	entries, _ := f.scan()
	n := 0
	for _, p := range entries {
		if start, ours := f.stopped[p.pid]; ours && start == p.start {
			if syscall.Kill(p.pid, syscall.SIGCONT) == nil {
				n++
			}
		}
	}
	clear(f.stopped)
	return n
}

// Frozen reports whether Freeze holds processes stopped.
func (f *Freezer) Frozen() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.stopped) > 0
}

// scan lists the processes of the sandbox.
func (f *Freezer) scan() ([]procEntry, error) {
	dir := f.ProcDir
	if dir == "" {
		dir = "/proc"
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	self := os.Getpid()
	includes := f.Includes
	if includes == nil {
		includes = func(pid, _ int) bool { return pid != self }
	}
	out := make([]procEntry, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n.Name())
		if err != nil || pid == self {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(dir, n.Name(), "stat"))
		if err != nil {
			continue // gone
		}
		p, ok := parseStat(pid, string(stat))
		if ok && includes(pid, p.sid) {
			out = append(out, p)
		}
	}
	return out, nil
}

// parseStat reads state (field 3), parent (field 4), session (field 6) and start time (field 22) of a
// /proc/<pid>/stat line. The command name (field 2) may hold spaces and parentheses,
// so the fields are counted from its last ')'.
func parseStat(pid int, stat string) (procEntry, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return procEntry{}, false
	}
	fields := strings.Fields(stat[i+1:])
	// fields[0] is field 3 (state).
	if len(fields) < 20 {
		return procEntry{}, false
	}
	ppid, err0 := strconv.Atoi(fields[1])
	sid, err1 := strconv.Atoi(fields[3])
	start, err2 := strconv.ParseUint(fields[19], 10, 64)
	if err0 != nil || err1 != nil || err2 != nil || len(fields[0]) != 1 {
		return procEntry{}, false
	}
	return procEntry{pid: pid, ppid: ppid, sid: sid, state: fields[0][0], start: start}, true
}

// isDead reports a process that exited (a zombie until its parent, maybe stopped, reaps it).
func isDead(state byte) bool { return state == 'Z' || state == 'X' }

// isStopped reports a stopped state: by a signal (T) or a tracer (t).
func isStopped(state byte) bool { return state == 'T' || state == 't' }
