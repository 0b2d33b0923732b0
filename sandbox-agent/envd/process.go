package envd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	pb "github.com/sandgate/sandgate/sandbox-agent/envd/spec/process"
	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

// outputChunk bounds one data event: what one read of a pipe or terminal returns.
const outputChunk = 32 << 10

// subscriberQueue is how many events a stream may fall behind before the process's
// output waits for it (back-pressure, as a pipe would give).
const subscriberQueue = 64

// drainGrace bounds how long an exited process's streams wait for its output to reach
// end of file: a grandchild left running in the background may hold the pipes open.
const drainGrace = 100 * time.Millisecond

// process is one program started by Start: its output goes to every attached stream
// (Start's own and any Connect), none of it is kept for later ones.
type process struct {
	pid    uint32
	tag    *string
	config *pb.ProcessConfig
	cmd    *exec.Cmd
	// tty is the terminal's controller side (nil without a PTY); the process's group
	// is then its session.
	tty *os.File

	stdinMu sync.Mutex
	// stdin is the write end of the process's stdin pipe; nil when it has none or
	// CloseStdin closed it.
	stdin *os.File
	// stdinPipe is the same pipe, kept to cut off a write blocked in it (a write
	// deadline needs no lock) when the process has ended.
	stdinPipe *os.File

	mu    sync.Mutex
	subs  map[*subscriber]struct{}
	ended bool
	// reaped is set once the process was waited for: its pid, and so its group's id,
	// may then belong to another process, which must not be signalled.
	reaped bool

	// done is closed once the end event went to every stream.
	done chan struct{}
}

// subscriber is one stream attached to a process.
type subscriber struct {
	events chan *pb.ProcessEvent
	// gone is closed when the stream stops reading, so that output never waits on it.
	gone chan struct{}
	once sync.Once
}

func (sub *subscriber) leave() { sub.once.Do(func() { close(sub.gone) }) }

// subscribe attaches a stream; nil when the process has already ended.
func (p *process) subscribe() *subscriber {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return nil
	}
	sub := &subscriber{events: make(chan *pb.ProcessEvent, subscriberQueue), gone: make(chan struct{})}
	p.subs[sub] = struct{}{}
	return sub
}

func (p *process) unsubscribe(sub *subscriber) {
	sub.leave()
	p.mu.Lock()
	delete(p.subs, sub)
	p.mu.Unlock()
}

// broadcast gives ev to every attached stream, waiting for any whose queue is full.
// last marks the process ended first, so that no stream attaches after it.
func (p *process) broadcast(ev *pb.ProcessEvent, last bool) {
	p.mu.Lock()
	if last {
		p.ended = true
	}
	subs := make([]*subscriber, 0, len(p.subs))
	for sub := range p.subs {
		subs = append(subs, sub)
	}
	p.mu.Unlock()
	for _, sub := range subs {
		select {
		case sub.events <- ev:
		case <-sub.gone:
		}
	}
}

// info is the process as List reports it.
func (p *process) info() *pb.ProcessInfo {
	return &pb.ProcessInfo{Config: p.config, Pid: p.pid, Tag: p.tag}
}

// signal sends sig to the process's group: what the program started goes with it.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil // its end event is on the way
	}
	err := procs.KillGroup(int(p.pid), sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil // exited already; its end event is on the way
	}
	return err
}

// writeStdin writes data to the process's stdin pipe.
func (p *process) writeStdin(data []byte) error {
	if p.tty != nil {
		return errors.New("the process has a terminal: send its input as pty")
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return errStdinClosed
	}
	_, err := p.stdin.Write(data)
	return err
}

// writeTTY writes data to the process's terminal.
func (p *process) writeTTY(data []byte) error {
	if p.tty == nil {
		return errors.New("the process has no terminal: send its input as stdin")
	}
	_, err := p.tty.Write(data)
	return err
}

// errStdinClosed is input for a process started without stdin, or whose stdin was closed.
var errStdinClosed = errors.New("the process's stdin is closed or was not requested (start it with stdin: true)")

// closeStdin ends the process's input; closing it twice is not an error.
func (p *process) closeStdin() error {
	if p.tty != nil {
		return errors.New("the process has a terminal: send end-of-transmission (0x04) as pty input instead")
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return nil
	}
	err := p.stdin.Close()
	p.stdin = nil
	return err
}

// resize sets the terminal's size.
func (p *process) resize(cols, rows uint32) error {
	if p.tty == nil {
		return errors.New("the process has no terminal")
	}
	if cols == 0 || rows == 0 || cols > 65535 || rows > 65535 {
		return fmt.Errorf("terminal size %dx%d: cols and rows must be from 1 to 65535", cols, rows)
	}
	return pty.Setsize(p.tty, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
}

// startProcess starts cmd (a terminal of size when size is not nil, else pipes with
// stdin open when withStdin) and pumps its output to its streams until it ends. first
// is attached before any output exists. killAfter, when positive, is the process's
// lifetime: its group is killed then. shell, when not nil, is what cmd runs directly
// through its shell: it starts instead when cmd's exec fails.
func startProcess(cmd, shell *exec.Cmd, config *pb.ProcessConfig, tag *string, size *pb.PTY_Size, withStdin bool, killAfter time.Duration) (*process, *subscriber, error) {
	p := &process{config: config, tag: tag, cmd: cmd, subs: map[*subscriber]struct{}{}, done: make(chan struct{})}
	first := p.subscribe()
	var outputs []*os.File
	var dataEvent func([]byte) *pb.ProcessEvent_DataEvent
	if size != nil {
		err := procs.Starting(func() error {
			f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(min(size.GetCols(), 65535)), Rows: uint16(min(size.GetRows(), 65535))})
			if err != nil {
				return err
			}
			p.tty = f
			procs.Track(cmd.Process.Pid)
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		outputs = []*os.File{p.tty}
		dataEvent = func(b []byte) *pb.ProcessEvent_DataEvent {
			return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Pty{Pty: b}}
		}
	} else {
		stdoutR, stdoutW, err := childPipe(true)
		if err != nil {
			return nil, nil, err
		}
		stderrR, stderrW, err := childPipe(true)
		if err != nil {
			stdoutR.Close()
			stdoutW.Close()
			return nil, nil, err
		}
		var stdinR, stdinW *os.File
		if withStdin {
			if stdinW, stdinR, err = childPipe(false); err != nil {
				closeAll(stdoutR, stdoutW, stderrR, stderrW)
				return nil, nil, err
			}
			cmd.Stdin = stdinR
		} else {
			cmd.Stdin = procs.DevNull
		}
		cmd.Stdout, cmd.Stderr = stdoutW, stderrW
		err = procs.Start(cmd)
		if err != nil && shell != nil {
			// The program's exec failed in the child, before any of it ran: the shell
			// does with the command what it always did.
			shell.Stdin, shell.Stdout, shell.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
			cmd = shell
			p.cmd = shell
			err = procs.Start(cmd)
		}
		// The child's ends are the child's now.
		closeAll(stdoutW, stderrW, stdinR)
		if err != nil {
			closeAll(stdoutR, stderrR, stdinW)
			return nil, nil, err
		}
		p.stdin, p.stdinPipe = stdinW, stdinW
		outputs = []*os.File{stdoutR, stderrR}
		dataEvent = nil
	}
	p.pid = uint32(cmd.Process.Pid)
	var timer *time.Timer
	if killAfter > 0 {
		timer = time.AfterFunc(killAfter, func() { _ = p.signal(syscall.SIGKILL) })
	}
	go p.run(outputs, dataEvent, timer)
	return p, first, nil
}

// childPipe makes a pipe between the agent and a child it is about to start: the
// child's end (the write end when childWrites) is a plain blocking file, the agent's is
// in the runtime's poller (read and write deadlines work on it). os.Pipe makes both ends
// non-blocking for the poller, and exec makes the child's blocking again: system calls
// for nothing.
func childPipe(childWrites bool) (agentEnd, childEnd *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	agentFD, childFD := fds[0], fds[1]
	if !childWrites {
		agentFD, childFD = fds[1], fds[0]
	}
	if err := unix.SetNonblock(agentFD, true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	name := func(fd int) string {
		if fd == fds[0] {
			return "|0"
		}
		return "|1"
	}
	return os.NewFile(uintptr(agentFD), name(agentFD)), os.NewFile(uintptr(childFD), name(childFD)), nil
}

// closeAll closes the files that are not nil.
func closeAll(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// run pumps the outputs to the streams, waits for the process, lets the outputs drain
// and sends the end event. dataEvent wraps a chunk of a terminal's output; nil means
// outputs are stdout and stderr.
func (p *process) run(outputs []*os.File, dataEvent func([]byte) *pb.ProcessEvent_DataEvent, timer *time.Timer) {
	var wg sync.WaitGroup
	for i, f := range outputs {
		wrap := dataEvent
		if wrap == nil {
			wrap = func(b []byte) *pb.ProcessEvent_DataEvent {
				if i == 0 {
					return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}}
				}
				return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}}
			}
		}
		wg.Go(func() { p.pump(f, wrap) })
	}
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()

	// The wait's reap and reaped are one step under mu, so that signal never reaches
	// a pid the kernel has handed out again.
	awaitExit(p.cmd.Process.Pid)
	p.mu.Lock()
	waitErr := procs.WaitExited(p.cmd)
	p.reaped = true
	p.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	for done := false; !done; {
		select {
		case <-drained:
			done = true
		case <-time.After(drainGrace):
			// Something the process left behind may hold the output open: stop reading
			// what has nothing left to read.
			for _, f := range outputs {
				if procs.PendingBytes(f) == 0 {
					_ = f.SetReadDeadline(time.Now())
				}
			}
		}
	}
	for _, f := range outputs {
		f.Close()
	}
	if p.stdinPipe != nil {
		// A write of input may wait on a pipe that a grandchild holds open and never
		// reads: it fails now, so that closing takes the lock.
		_ = p.stdinPipe.SetWriteDeadline(time.Now())
		_ = p.closeStdin()
	}

	st := p.cmd.ProcessState
	end := &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "unknown"}
	if st != nil {
		end.ExitCode = int32(st.ExitCode())
		end.Exited = st.Exited()
		end.Status = st.String()
	}
	if waitErr != nil {
		msg := waitErr.Error()
		end.Error = &msg
	}
	p.broadcast(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}, true)
	close(p.done)
}

// awaitExit returns once the child pid has exited, leaving it unreaped: in the poller
// where the kernel has pidfds, else in a blocking waitid.
func awaitExit(pid int) {
	procs.AwaitExit(pid)
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// pumpBuffers keeps pump's read buffers between processes: allocating (and zeroing)
// one per output of every process, and the collections that follow, cost more than a
// short command's whole stream.
var pumpBuffers = sync.Pool{New: func() any { return new([outputChunk]byte) }}

// pump sends what f yields as data events until f ends.
func (p *process) pump(f io.Reader, wrap func([]byte) *pb.ProcessEvent_DataEvent) {
	array := pumpBuffers.Get().(*[outputChunk]byte)
	defer pumpBuffers.Put(array)
	buf := array[:]
	for {
		n, err := f.Read(buf)
		if n > 0 {
			// A copy of what was read: queued events hold their bytes, not the buffer.
			chunk := append([]byte(nil), buf[:n]...)
			p.broadcast(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: wrap(chunk)}}, false)
		}
		if err != nil {
			return // EOF, EIO of a terminal whose last holder left, or the drain deadline
		}
	}
}

// processTable holds the running processes by pid.
type processTable struct {
	mu sync.Mutex
	m  map[uint32]*process
}

func newProcessTable() *processTable { return &processTable{m: map[uint32]*process{}} }

func (t *processTable) add(p *process) {
	t.mu.Lock()
	t.m[p.pid] = p
	t.mu.Unlock()
	go func() {
		<-p.done
		t.mu.Lock()
		if t.m[p.pid] == p {
			delete(t.m, p.pid)
		}
		t.mu.Unlock()
	}()
}

// find returns the process a selector names, nil when none runs.
func (t *processTable) find(sel *pb.ProcessSelector) *process {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		return t.m[s.Pid]
	case *pb.ProcessSelector_Tag:
		for _, p := range t.m {
			if p.tag != nil && *p.tag == s.Tag {
				return p
			}
		}
	}
	return nil
}

// list returns the running processes ordered by pid.
func (t *processTable) list() []*process {
	t.mu.Lock()
	out := make([]*process, 0, len(t.m))
	for _, p := range t.m {
		out = append(out, p)
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

// killAll kills every process's group and waits until each has ended.
func (t *processTable) killAll() {
	for _, p := range t.list() {
		_ = p.signal(syscall.SIGKILL)
	}
	for _, p := range t.list() {
		<-p.done
	}
}
