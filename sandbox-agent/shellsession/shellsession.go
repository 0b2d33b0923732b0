// Package shellsession keeps a shell process alive across commands, so that `cd`,
// exported variables and shell functions carry over from one run to the next (the
// /session API and the "bash" code-interpreter language). Each run is fed to the shell
// through eval, followed by per-run markers on stdout and stderr that end the run and
// carry its exit status: a syntax error in one run cannot swallow the next.
package shellsession

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

// ErrClosed is returned by Run once the shell has exited or the session was closed.
var ErrClosed = errors.New("shell session closed")

// Sink receives output lines of a run; stream is "stdout" or "stderr". flush is a hint
// that no more output is immediately pending. An error stops delivery (output is still
// drained so the shell never blocks). The two streams are read concurrently, so a Sink
// must be safe for concurrent use.
type Sink func(stream, line string, flush bool) error

// Session is one persistent shell.
type Session struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *bufio.Reader
	done   chan struct{}

	runMu    sync.Mutex // one run at a time
	mu       sync.Mutex
	dead     bool
	exitCode int
}

// Start starts a shell (bash when present, else sh) in cwd with env.
func Start(cwd string, env []string) (*Session, error) {
	shell := procs.Shell()
	args := []string{}
	if procs.IsBash(shell) {
		args = append(args, "--noprofile", "--norc")
	}
	cmd := exec.Command(shell, args...)
	cmd.Env = env
	cmd.Dir = cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("shellsession: stdin: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("shellsession: stdout: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("shellsession: stderr: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = procs.Start(cmd)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("shellsession: start %s: %w", shell, err)
	}
	s := &Session{
		cmd: cmd, stdin: stdin,
		stdout: bufio.NewReaderSize(outR, 64<<10),
		stderr: bufio.NewReaderSize(errR, 64<<10),
		done:   make(chan struct{}),
	}
	go func() {
		err := procs.Wait(cmd)
		s.mu.Lock()
		s.dead = true
		s.exitCode = procs.ExitCode(cmd.ProcessState, err)
		s.mu.Unlock()
		close(s.done)
		outR.Close()
		errR.Close()
	}()
	return s, nil
}

// Pid is the shell's process id.
func (s *Session) Pid() int { return s.cmd.Process.Pid }

// Alive reports whether the shell still runs.
func (s *Session) Alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.dead
}

// Close kills the shell and everything it started.
func (s *Session) Close() {
	_ = procs.KillGroup(s.cmd.Process.Pid, syscall.SIGKILL)
	procs.KillTree(s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

// Result is how a run ended.
type Result struct {
	ExitCode  int
	TimedOut  bool
	Cancelled bool
}

// Run executes script in the shell. cwd, when set, applies to this run only. A timeout
// or a cancelled ctx kills what the run started, not the shell.
func (s *Session) Run(ctx context.Context, script, cwd string, timeout time.Duration, sink Sink) (Result, error) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	if !s.Alive() {
		return Result{}, ErrClosed
	}
	marker := newMarker()
	var b strings.Builder
	if cwd != "" {
		// The directory applies to this run only; a failed cd fails the run.
		fmt.Fprintf(&b, "if cd -- %s; then __sg_prev=$OLDPWD; { eval %s\n} </dev/null\n__sg_rc=$?; cd -- \"$__sg_prev\" 2>/dev/null; else __sg_rc=1; fi\n", quote(cwd), quote(script))
	} else {
		fmt.Fprintf(&b, "{ eval %s\n} </dev/null\n__sg_rc=$?\n", quote(script))
	}
	fmt.Fprintf(&b, "printf '\\n%%s%%d\\n' '%s' \"$__sg_rc\"\nprintf '\\n%%s\\n' '%s' >&2\n", marker, marker)
	if _, err := io.WriteString(s.stdin, b.String()); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrClosed, err)
	}

	var (
		wg       sync.WaitGroup
		exitCode = -1
		gotExit  bool
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		exitCode, gotExit = readUntilMarker(s.stdout, "stdout", marker, true, sink)
	}()
	go func() {
		defer wg.Done()
		readUntilMarker(s.stderr, "stderr", marker, false, sink)
	}()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	var res Result
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	// Once the run is to stop, kill what it started again every few milliseconds
	// until its marker arrives: the shell may not have forked the command yet when
	// the first kill is sent.
	var killTick <-chan time.Time
	stopRun := func() {
		procs.KillTree(s.cmd.Process.Pid, syscall.SIGKILL)
		if killTick == nil {
			t := time.NewTicker(20 * time.Millisecond)
			defer func() { killTick = t.C }()
			go func() { <-finished; t.Stop() }()
		}
	}
	done := ctx.Done()
	for {
		select {
		case <-finished:
			res.ExitCode = exitCode
			if !gotExit {
				// The shell closed its output: it is exiting (for example the
				// run said `exit`). Report its exit code once it is gone.
				select {
				case <-s.done:
					s.mu.Lock()
					res.ExitCode = s.exitCode
					s.mu.Unlock()
				case <-time.After(time.Second):
				}
				return res, ErrClosed
			}
			return res, nil
		case <-timer:
			res.TimedOut = true
			timer = nil
			stopRun()
		case <-done:
			res.Cancelled = true
			done = nil
			stopRun()
		case <-killTick:
			procs.KillTree(s.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}

// Interrupt sends SIGINT to everything the shell is running (not the shell).
func (s *Session) Interrupt() {
	procs.KillTree(s.cmd.Process.Pid, syscall.SIGINT)
}

// readUntilMarker delivers lines until the marker line. The marker is printed after a
// newline so that output without a trailing newline still ends as its own line; that
// extra newline is removed again here.
func readUntilMarker(r *bufio.Reader, stream, marker string, withCode bool, sink Sink) (int, bool) {
	failed := false
	var pending *string // the last complete line, held back: it may be the marker's newline
	emit := func(line string, flush bool) {
		if !failed && sink(stream, line, flush) != nil {
			failed = true
		}
	}
	for {
		chunk, err := r.ReadSlice('\n')
		if len(chunk) > 0 {
			complete := chunk[len(chunk)-1] == '\n'
			text := string(chunk)
			if complete {
				text = strings.TrimSuffix(strings.TrimSuffix(text, "\n"), "\r")
				if rest, ok := strings.CutPrefix(text, marker); ok {
					// Output that ended without a newline was completed by the
					// marker's leading newline: the held-back line is real output
					// only when it is not the empty line that newline produced.
					if pending != nil && *pending != "" {
						emit(*pending, true)
					}
					if !withCode {
						return 0, true
					}
					code, convErr := strconv.Atoi(rest)
					if convErr != nil {
						return -1, false
					}
					return code, true
				}
				if pending != nil {
					emit(*pending, false)
				}
				t := text
				pending = &t
				if r.Buffered() == 0 {
					// Nothing else is queued: deliver now unless it may be the
					// marker's newline, which the shell prints right away.
					if t != "" {
						emit(t, true)
						pending = nil
					}
				}
			} else {
				if pending != nil {
					emit(*pending, false)
					pending = nil
				}
				emit(text, r.Buffered() == 0)
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if pending != nil && *pending != "" {
				emit(*pending, true)
			}
			return -1, false
		}
	}
}

func newMarker() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "__SANDGATE_END_" + hex.EncodeToString(b) + "__"
}

// quote single-quotes s for the shell.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
