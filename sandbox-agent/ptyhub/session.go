package ptyhub

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

// ErrBusy is returned by Attach when another client is attached and takeover was not
// asked for.
var ErrBusy = errors.New("ptyhub: another client is attached")

// ErrExited is returned by Attach when the terminal's process has exited and its output
// was fully delivered.
var ErrExited = errors.New("ptyhub: process exited")

// clientQueue bounds the output chunks queued for one client; a client that falls this
// far behind is disconnected and may reconnect with ?since= to resume from the ring.
const clientQueue = 1024

// Client is an attached reader of a terminal's output.
type Client struct {
	// Output delivers live output chunks; it is closed when the client is detached,
	// taken over, too slow, or the process exited (see Reason).
	Output chan []byte
	reason string
	once   sync.Once
}

// Reason says why Output was closed: "exited", "takeover", "slow" or "detached".
func (c *Client) Reason() string { return c.reason }

func (c *Client) close(reason string) {
	c.once.Do(func() {
		c.reason = reason
		close(c.Output)
	})
}

// Session is one process on a pseudo-terminal.
type Session struct {
	cmd  *exec.Cmd
	tty  *os.File
	ring *Ring
	done chan struct{}

	mu       sync.Mutex
	client   *Client
	exited   bool
	exitCode int
	cols     uint16
	rows     uint16
}

// Options configure Start.
type Options struct {
	Argv       []string // nil means an interactive login-less shell
	Dir        string
	Env        []string
	Cols, Rows uint16
	RingBytes  int // output kept for replay; 0 means 1 MiB
}

// Start runs the process on a new pseudo-terminal.
func Start(opt Options) (*Session, error) {
	if opt.Cols == 0 {
		opt.Cols = 80
	}
	if opt.Rows == 0 {
		opt.Rows = 24
	}
	if opt.RingBytes <= 0 {
		opt.RingBytes = 1 << 20
	}
	argv := opt.Argv
	if len(argv) == 0 {
		argv = []string{procs.Shell()}
		if procs.IsBash(argv[0]) {
			argv = append(argv, "--noprofile", "--norc", "-i")
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = opt.Dir
	cmd.Env = opt.Env
	if _, ok := procs.Lookup(cmd.Env, "TERM"); !ok {
		cmd.Env = append(cmd.Env, "TERM=xterm-256color")
	}
	s := &Session{cmd: cmd, ring: NewRing(opt.RingBytes), done: make(chan struct{}), cols: opt.Cols, rows: opt.Rows}
	err := procs.Starting(func() error {
		f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: opt.Cols, Rows: opt.Rows})
		if err != nil {
			return err
		}
		s.tty = f
		procs.Track(cmd.Process.Pid)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ptyhub: start %s: %w", argv[0], err)
	}
	go s.pump()
	return s, nil
}

// pump copies terminal output into the ring and to the attached client, then records
// the exit.
func (s *Session) pump() {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.tty.Read(buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			s.mu.Lock()
			s.ring.Write(chunk)
			if c := s.client; c != nil {
				select {
				case c.Output <- chunk:
				default:
					s.client = nil
					c.close("slow")
				}
			}
			s.mu.Unlock()
		}
		if err != nil {
			break // EIO once the last process holding the terminal has gone
		}
	}
	err := procs.Wait(s.cmd)
	s.mu.Lock()
	s.exited = true
	s.exitCode = procs.ExitCode(s.cmd.ProcessState, err)
	if c := s.client; c != nil {
		s.client = nil
		c.close("exited")
	}
	s.mu.Unlock()
	s.tty.Close()
	close(s.done)
}

// Attach registers a client and returns the output since offset since (clamped to what
// the ring still holds) together with the offset of its first byte. Registration and
// the replay snapshot are atomic: no byte is lost or repeated between them.
func (s *Session) Attach(since int64, takeover bool) (*Client, []byte, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		if !takeover {
			return nil, nil, 0, ErrBusy
		}
		s.client.close("takeover")
		s.client = nil
	}
	replay, off := s.ring.Since(since)
	c := &Client{Output: make(chan []byte, clientQueue)}
	if s.exited {
		c.close("exited")
		return c, replay, off, nil
	}
	s.client = c
	return c, replay, off, nil
}

// Detach unregisters c if it is still the attached client.
func (s *Session) Detach(c *Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == c {
		s.client = nil
		c.close("detached")
	}
}

// Write sends input to the terminal.
func (s *Session) Write(p []byte) error {
	_, err := s.tty.Write(p)
	return err
}

// Resize changes the terminal size; the foreground program gets SIGWINCH.
func (s *Session) Resize(cols, rows uint16) error {
	if cols == 0 || rows == 0 {
		return errors.New("ptyhub: cols and rows must be positive")
	}
	if err := pty.Setsize(s.tty, &pty.Winsize{Cols: cols, Rows: rows}); err != nil {
		return err
	}
	s.mu.Lock()
	s.cols, s.rows = cols, rows
	s.mu.Unlock()
	return nil
}

// Signal delivers sig to the terminal's foreground process group (what a key like ^C
// would reach), or to the session leader's group when that is unknown.
func (s *Session) Signal(sig syscall.Signal) error {
	pgid := s.cmd.Process.Pid
	if fg, err := unix.IoctlGetInt(int(s.tty.Fd()), unix.TIOCGPGRP); err == nil && fg > 1 {
		pgid = fg
	}
	return syscall.Kill(-pgid, sig)
}

// Status is a snapshot of the session.
type Status struct {
	Running  bool
	ExitCode int
	Offset   int64
	Cols     uint16
	Rows     uint16
	Attached bool
}

// Status reports the session's state.
func (s *Session) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Status{Running: !s.exited, ExitCode: s.exitCode, Offset: s.ring.Total(), Cols: s.cols, Rows: s.rows, Attached: s.client != nil}
}

// Done is closed when the process has exited and all output is in the ring.
func (s *Session) Done() <-chan struct{} { return s.done }

// Close kills the terminal's processes and waits for the session to end.
func (s *Session) Close() {
	pid := s.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGHUP)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	procs.KillTree(pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	<-s.done
}

var _ io.Writer = (*Ring)(nil)
