package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

// stopGrace is how long a stopped process group gets between SIGTERM and SIGKILL.
const stopGrace = 500 * time.Millisecond

// drainGrace bounds how long a finished command's stream waits for its pipes to close:
// a grandchild left running in the background may hold them open forever, and the
// stream must end when the command does.
const drainGrace = 100 * time.Millisecond

type runCommandRequest struct {
	// Command is shell text, run as `<shell> -c command`.
	Command string `json:"command"`
	// Argv is a program and its literal arguments, exec'd without a shell; exactly one
	// of Command and Argv is set. A pointer, so that an empty list is told from none.
	Argv       *[]string         `json:"argv,omitempty"`
	Cwd        string            `json:"cwd,omitempty"`
	Background bool              `json:"background,omitempty"`
	Timeout    int64             `json:"timeout,omitempty"`
	UID        *uint32           `json:"uid,omitempty"`
	GID        *uint32           `json:"gid,omitempty"`
	Envs       map[string]string `json:"envs,omitempty"`
}

type commandStatus struct {
	ID         string     `json:"id"`
	Content    string     `json:"content"`
	Running    bool       `json:"running"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Error      string     `json:"error,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// command is one process started by POST /command.
type command struct {
	id         string
	content    string
	background bool
	cmd        *exec.Cmd
	// shell is the same command through the shell when cmd execs the program itself
	// (directexec.go): it runs instead when that exec fails.
	shell     *exec.Cmd
	startedAt time.Time
	logPath   string
	done      chan struct{}

	mu          sync.Mutex
	finishedAt  *time.Time
	exitCode    *int
	errMsg      string
	interrupted bool
	timedOut    bool

	// cursorLine/cursorOffset remember where the last logs read ended, so that a client
	// polling with the cursor it was given does not rescan the whole log.
	cursorMu     sync.Mutex
	cursorLine   int64
	cursorOffset int64
}

type commandRegistry struct {
	s  *Server
	mu sync.Mutex
	m  map[string]*command
}

func newCommandRegistry(s *Server) *commandRegistry {
	return &commandRegistry{s: s, m: map[string]*command{}}
}

func (r *commandRegistry) get(id string) *command {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

func (r *commandRegistry) closeAll() {
	r.mu.Lock()
	cmds := make([]*command, 0, len(r.m))
	for _, c := range r.m {
		cmds = append(cmds, c)
	}
	r.mu.Unlock()
	for _, c := range cmds {
		c.stop(false)
	}
	for _, c := range cmds {
		<-c.done
	}
}

// credential resolves the uid/gid of a request. A uid alone runs with that user's
// primary group when the user is known, else with gid = uid.
func credential(uid, gid *uint32) *syscall.Credential {
	if uid == nil && gid == nil {
		return nil
	}
	cred := &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
	if uid != nil {
		cred.Uid = *uid
		cred.Gid = *uid
		if u, err := user.LookupId(strconv.FormatUint(uint64(*uid), 10)); err == nil {
			if g, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
				cred.Gid = uint32(g)
			}
		}
	}
	if gid != nil {
		cred.Gid = *gid
	}
	return cred
}

// shellCommand builds "<shell> -c script" in its own process group.
func (s *Server) shellCommand(script, cwd string, envs map[string]string, uid, gid *uint32) (*exec.Cmd, error) {
	return s.processCommand([]string{procs.Shell(), "-c", script}, cwd, envs, uid, gid)
}

// argvCommand builds a command that execs argv without a shell: argv[0] containing a
// slash is a path (relative ones from the working directory), a bare name is looked up
// in the absolute elements of the command's own PATH.
func (s *Server) argvCommand(argv []string, cwd string, envs map[string]string, uid, gid *uint32) (*exec.Cmd, error) {
	cmd, err := s.processCommand(argv, cwd, envs, uid, gid)
	if err != nil {
		return nil, err
	}
	program := argv[0]
	switch {
	case strings.Contains(program, "/"):
		if !filepath.IsAbs(program) && cmd.Dir != "" {
			program = filepath.Join(cmd.Dir, program)
		}
	default:
		pathList, _ := procs.Lookup(cmd.Env, "PATH")
		program = ""
		for _, dir := range filepath.SplitList(pathList) {
			if !filepath.IsAbs(dir) {
				continue
			}
			if p := filepath.Join(dir, argv[0]); executableFile(p) {
				program = p
				break
			}
		}
		if program == "" {
			return nil, fmt.Errorf("argv[0] %q: %w", argv[0], errProgramNotFound)
		}
	}
	cmd.Path = program
	cmd.Err = nil
	return cmd, nil
}

// errProgramNotFound is an argv whose program is not in the command's PATH.
var errProgramNotFound = errors.New("executable file not found in PATH")

// processCommand builds the command running argv in its own process group, with the
// agent's environment plus envs, from cwd, as uid/gid.
func (s *Server) processCommand(argv []string, cwd string, envs map[string]string, uid, gid *uint32) (*exec.Cmd, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = s.env.Build(envs)
	if procs.DevNull != nil {
		cmd.Stdin = procs.DevNull
	}
	if cwd != "" {
		fi, err := os.Stat(cwd)
		if err != nil {
			return nil, fmt.Errorf("working directory: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("working directory %s: %w", cwd, syscall.ENOTDIR)
		}
		cmd.Dir = cwd
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: credential(uid, gid)}
	return cmd, nil
}

func (s *Server) handleRunCommand(w http.ResponseWriter, r *http.Request) {
	var req runCommandRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if msg := req.invalid(); msg != "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, msg)
		return
	}
	var (
		cmd     *exec.Cmd
		err     error
		content = req.Command
	)
	if req.Argv != nil {
		content = quoteArgv(*req.Argv)
		cmd, err = s.argvCommand(*req.Argv, req.Cwd, req.Envs, req.UID, req.GID)
	} else {
		cmd, err = s.shellCommand(req.Command, req.Cwd, req.Envs, req.UID, req.GID)
	}
	if errors.Is(err, errProgramNotFound) {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error())
		return
	}
	if err != nil {
		writeFSError(w, err)
		return
	}
	c := &command{
		id:         uuid.NewString(),
		content:    content,
		background: req.Background,
		cmd:        cmd,
		done:       make(chan struct{}),
	}
	if req.Argv == nil {
		if direct := s.directCommand(req.Command, cmd); direct != nil {
			c.cmd, c.shell = direct, cmd
		}
	}
	if req.Background {
		s.runBackground(w, c, req)
		return
	}
	s.runForeground(w, r, c, req)
}

// invalid says what is wrong with a run request, or "" when nothing is.
func (req *runCommandRequest) invalid() string {
	switch {
	case req.Argv != nil && req.Command != "":
		return "command and argv are mutually exclusive"
	case req.Argv == nil && req.Command == "":
		return "command or argv is required"
	case req.Argv != nil && len(*req.Argv) == 0:
		return "argv must name a program"
	case req.Argv != nil && (*req.Argv)[0] == "":
		return "argv[0] must not be empty"
	case req.Timeout < 0:
		return "timeout must be >= 0 milliseconds"
	}
	if req.Argv != nil {
		for i, a := range *req.Argv {
			if strings.ContainsRune(a, 0) {
				return fmt.Sprintf("argv[%d] contains NUL", i)
			}
		}
	}
	return ""
}

// quoteArgv renders argv as shell words, for the command's status content.
func quoteArgv(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '=' || r == ':' || r == ',' || r == '+' ||
				'0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
		}) < 0 {
			words[i] = a
			continue
		}
		words[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(words, " ")
}

func (s *Server) runBackground(w http.ResponseWriter, c *command, req runCommandRequest) {
	// Output goes straight from the process to a file: it may be large and nobody
	// may ever read it, so it must not sit in the agent's memory.
	c.logPath = filepath.Join(s.cfg.StateDir, "cmd-"+c.id+".log")
	f, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntime, "create output file: "+err.Error())
		return
	}
	c.cmd.Stdout, c.cmd.Stderr = f, f
	spawn := time.Now()
	err = s.commands.start(c, req.Timeout)
	f.Close()
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "start command: "+err.Error())
		return
	}
	addTiming(w, "spawn", spawn)
	stream := startEventStream(w)
	defer stream.release()
	_ = stream.send(Event{Type: EventInit, Text: c.id}, false)
	stream.end(Event{Type: EventComplete})
}

func (s *Server) runForeground(w http.ResponseWriter, r *http.Request, c *command, req runCommandRequest) {
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntime, err.Error())
		return
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutR.Close()
		stdoutW.Close()
		writeError(w, http.StatusInternalServerError, CodeRuntime, err.Error())
		return
	}
	c.cmd.Stdout, c.cmd.Stderr = stdoutW, stderrW
	spawn := time.Now()
	err = s.commands.start(c, req.Timeout)
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stdoutR.Close()
		stderrR.Close()
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "start command: "+err.Error())
		return
	}
	addTiming(w, "spawn", spawn)
	stream := openEventStream(w, Event{Type: EventInit, Text: c.id})
	defer stream.release()
	s.streamProcess(r, stream, c.done, c.stop, stdoutR, stderrR)
	stdoutR.Close()
	stderrR.Close()

	exit := c.snapshot()
	elapsed := time.Since(c.startedAt).Milliseconds()
	if exit.ExitCode != nil && *exit.ExitCode == 0 {
		stream.end(Event{Type: EventComplete, ExecutionTime: elapsed})
		return
	}
	code := -1
	if exit.ExitCode != nil {
		code = *exit.ExitCode
	}
	var tb []string
	if exit.Error != "" {
		tb = []string{exit.Error}
	}
	stream.end(Event{Type: EventErr, ExecutionTime: elapsed, Error: &EventError{
		EName: "CommandExecError", EValue: strconv.Itoa(code), Traceback: orEmpty(tb),
	}})
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// streamProcess pumps stdout and stderr lines into stream until the process has exited
// and its pipes are drained, stopping the process when the client goes away.
func (s *Server) streamProcess(r *http.Request, stream *eventStream, done <-chan struct{}, stop func(bool), stdoutR, stderrR *os.File) {
	stopPing := make(chan struct{})
	defer close(stopPing)
	go stream.keepAlive(s.cfg.PingInterval, stopPing)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pumpLines(stdoutR, EventStdout, stream) }()
	go func() { defer wg.Done(); pumpLines(stderrR, EventStderr, stream) }()
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()

	select {
	case <-done:
	case <-r.Context().Done():
		stop(true)
		<-done
	}
	for {
		select {
		case <-drained:
			return
		case <-time.After(drainGrace):
		}
		// Something the command left behind may hold the pipes open. Stop reading a
		// pipe once it has nothing left to read; a pipe that still has data (a busy
		// machine may not have drained it yet) is given another grace period.
		for _, p := range []*os.File{stdoutR, stderrR} {
			if procs.PendingBytes(p) == 0 {
				_ = p.SetReadDeadline(time.Now())
			}
		}
	}
}

// lineReaders keeps pumpLines' 64 KiB buffers between commands (see streamWriters).
var lineReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// pumpLines sends one event per line of rd, without the line ending. Lines longer than
// the read buffer are sent in pieces, so memory stays bounded whatever the output.
func pumpLines(rd io.Reader, typ string, stream *eventStream) {
	br := lineReaders.Get().(*bufio.Reader)
	br.Reset(rd)
	defer func() {
		br.Reset(nil)
		lineReaders.Put(br)
	}()
	failed := false
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 && !failed {
			text := line
			if text[len(text)-1] == '\n' {
				text = text[:len(text)-1]
				if n := len(text); n > 0 && text[n-1] == '\r' {
					text = text[:n-1]
				}
			}
			if stream.send(Event{Type: typ, Text: string(text)}, br.Buffered() == 0) != nil {
				// Keep draining so that the process is never blocked on a full pipe.
				failed = true
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			stream.flush()
			return
		}
	}
}

// start launches c, records it and arranges its timeout and exit bookkeeping.
func (r *commandRegistry) start(c *command, timeoutMs int64) error {
	err := procs.Start(c.cmd)
	if err != nil && c.shell != nil {
		// The program's exec failed in the child, before any of it ran: the shell does
		// with the command what it always did (runs a script that has no #! line,
		// reports a program it may not run).
		c.cmd = viaShell(c.cmd, c.shell)
		err = procs.Start(c.cmd)
	}
	c.shell = nil
	if err != nil {
		return err
	}
	c.startedAt = time.Now()
	r.mu.Lock()
	r.m[c.id] = c
	r.mu.Unlock()
	var timer *time.Timer
	if timeoutMs > 0 {
		timer = time.AfterFunc(time.Duration(timeoutMs)*time.Millisecond, func() {
			c.mu.Lock()
			c.timedOut = true
			c.mu.Unlock()
			_ = procs.KillGroup(c.cmd.Process.Pid, syscall.SIGKILL)
		})
	}
	go func() {
		err := procs.Wait(c.cmd)
		if timer != nil {
			timer.Stop()
		}
		code := procs.ExitCode(c.cmd.ProcessState, err)
		now := time.Now()
		c.mu.Lock()
		c.exitCode = &code
		c.finishedAt = &now
		switch {
		case c.timedOut:
			c.errMsg = fmt.Sprintf("command timed out after %d ms", timeoutMs)
		case c.interrupted:
			c.errMsg = "command interrupted"
		case err != nil && code < 0:
			c.errMsg = err.Error()
		}
		c.mu.Unlock()
		close(c.done)
		// The leader is gone; make sure nothing of its group lingers after an
		// interrupt or timeout (a plain exit may legitimately leave daemons behind).
		if c.interrupted || c.timedOut {
			_ = procs.KillGroup(c.cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	return nil
}

// stop ends the command's whole process group.
func (c *command) stop(interrupted bool) {
	select {
	case <-c.done:
		return
	default:
	}
	c.mu.Lock()
	c.interrupted = true
	c.mu.Unlock()
	procs.StopGroup(c.cmd.Process.Pid, stopGrace, c.done)
}

func (c *command) snapshot() commandStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := commandStatus{
		ID: c.id, Content: c.content, Running: c.exitCode == nil,
		ExitCode: c.exitCode, Error: c.errMsg, StartedAt: c.startedAt, FinishedAt: c.finishedAt,
	}
	return st
}

func (s *Server) handleInterruptCommand(w http.ResponseWriter, r *http.Request) {
	id, ok := requiredQuery(w, r, "id")
	if !ok {
		return
	}
	c := s.commands.get(id)
	if c == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "command not found: "+id)
		return
	}
	c.stop(true)
	w.WriteHeader(http.StatusOK)
}

// handleCommandQuery serves GET /command/status/{id} and GET /command/{id}/logs, which
// one ServeMux pattern each would make ambiguous.
func (s *Server) handleCommandQuery(w http.ResponseWriter, r *http.Request) {
	a, b := r.PathValue("a"), r.PathValue("b")
	switch {
	case a == "status":
		s.handleCommandStatus(w, r, b)
	case b == "logs":
		s.handleCommandLogs(w, r, a)
	default:
		writeError(w, http.StatusNotFound, CodeNotFound, "no such endpoint: "+r.URL.Path)
	}
}

func (s *Server) handleCommandStatus(w http.ResponseWriter, r *http.Request, id string) {
	c := s.commands.get(id)
	if c == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "command not found: "+id)
		return
	}
	writeJSON(w, http.StatusOK, c.snapshot())
}

// handleCommandLogs returns the output after line `cursor` (0 = from the start) as plain
// text, and the next cursor in EXECD-COMMANDS-TAIL-CURSOR. While the command runs only
// complete lines are returned, so that a line is never split across two reads.
func (s *Server) handleCommandLogs(w http.ResponseWriter, r *http.Request, id string) {
	c := s.commands.get(id)
	if c == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "command not found: "+id)
		return
	}
	if !c.background {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "command "+id+" is not a background command; its output was streamed")
		return
	}
	var cursor int64
	if v := r.URL.Query().Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, "cursor must be a non-negative integer")
			return
		}
		cursor = n
	}
	// Read the finished flag before the file size: output written after the size
	// snapshot then waits for the next poll instead of being counted twice.
	finished := c.snapshot().ExitCode != nil
	f, err := os.Open(c.logPath)
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntime, "open output: "+err.Error())
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntime, "stat output: "+err.Error())
		return
	}
	size := fi.Size()

	c.cursorMu.Lock()
	defer c.cursorMu.Unlock()
	line, off := int64(0), int64(0)
	if cursor >= c.cursorLine {
		line, off = c.cursorLine, c.cursorOffset
	}
	start, skipped, err := skipLines(f, off, size, cursor-line, finished)
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntime, "read output: "+err.Error())
		return
	}
	line += skipped // the number of lines before start
	end := size
	if !finished {
		end, err = lastNewlineEnd(f, start, size)
		if err != nil {
			writeError(w, http.StatusInternalServerError, CodeRuntime, "read output: "+err.Error())
			return
		}
	}
	n, partial, err := countLines(f, start, end)
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntime, "read output: "+err.Error())
		return
	}
	next := line + n
	if partial {
		next++
	}
	c.cursorLine, c.cursorOffset = next, end
	w.Header().Set("EXECD-COMMANDS-TAIL-CURSOR", strconv.FormatInt(next, 10))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.FormatInt(end-start, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, io.NewSectionReader(f, start, end-start))
}

// skipLines advances from off past n lines (a final unterminated line counts only when
// the output is complete) and returns the new offset and the number of lines skipped.
func skipLines(f *os.File, off, size, n int64, finished bool) (int64, int64, error) {
	var skipped int64
	midLine := false // scanned bytes of a line whose newline was not seen yet
	buf := make([]byte, 64<<10)
	for skipped < n && off < size {
		chunk := buf
		if rem := size - off; rem < int64(len(chunk)) {
			chunk = chunk[:rem]
		}
		k, err := f.ReadAt(chunk, off)
		if k == 0 && err != nil {
			return 0, 0, err
		}
		chunk = chunk[:k]
		for skipped < n {
			i := bytes.IndexByte(chunk, '\n')
			if i < 0 {
				off += int64(len(chunk))
				midLine = midLine || len(chunk) > 0
				break
			}
			midLine = false
			off += int64(i + 1)
			chunk = chunk[i+1:]
			skipped++
		}
	}
	if skipped < n && finished && midLine {
		// The trailing partial line of a finished command counts as a line.
		skipped++
	}
	return off, skipped, nil
}

// lastNewlineEnd returns the offset just past the last newline in [start, size), or
// start when there is none.
func lastNewlineEnd(f *os.File, start, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for end := size; end > start; {
		begin := end - int64(len(buf))
		if begin < start {
			begin = start
		}
		chunk := buf[:end-begin]
		if _, err := f.ReadAt(chunk, begin); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			return begin + int64(i) + 1, nil
		}
		end = begin
	}
	return start, nil
}

// countLines counts newlines in [start, end) and reports whether the range ends with an
// unterminated line.
func countLines(f *os.File, start, end int64) (int64, bool, error) {
	var n int64
	var last byte
	buf := make([]byte, 64<<10)
	for off := start; off < end; {
		chunk := buf
		if rem := end - off; rem < int64(len(chunk)) {
			chunk = chunk[:rem]
		}
		k, err := f.ReadAt(chunk, off)
		if k == 0 && err != nil {
			return 0, false, err
		}
		n += int64(bytes.Count(chunk[:k], []byte{'\n'}))
		last = chunk[k-1]
		off += int64(k)
	}
	return n, end > start && last != '\n', nil
}
