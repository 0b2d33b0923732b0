package sandgate

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Agent reaches the agent API of one sandbox (commands, files, code, PTY) through the
// gateway, with the per-sandbox access header the endpoint handed out.
type Agent struct {
	c       *Client
	id      string
	base    string // scheme://endpoint, no trailing slash
	headers map[string]string
}

// Agent returns a client of a sandbox's agent.
func (c *Client) Agent(ctx context.Context, sandboxID string) (*Agent, error) {
	return c.portClient(ctx, sandboxID, AgentPort)
}

// MemberAgent returns a client of a batch member's agent: from the endpoint the batch's
// answer carries (BatchMember.AgentEndpoint), without a call, or else from GetEndpoint.
func (c *Client) MemberAgent(ctx context.Context, m BatchMember) (*Agent, error) {
	if ep := m.AgentEndpoint; ep != nil && ep.Endpoint != "" {
		return c.agentAt(m.ID, ep), nil
	}
	return c.Agent(ctx, m.ID)
}

func (c *Client) agentAt(sandboxID string, ep *Endpoint) *Agent {
	return &Agent{c: c, id: sandboxID, base: c.base.Scheme + "://" + strings.TrimRight(ep.Endpoint, "/"), headers: ep.Headers}
}

func (c *Client) portClient(ctx context.Context, sandboxID string, port int) (*Agent, error) {
	ep, err := c.GetEndpoint(ctx, sandboxID, port)
	if err != nil {
		return nil, err
	}
	return c.agentAt(sandboxID, ep), nil
}

// SandboxID is the sandbox this agent runs in.
func (a *Agent) SandboxID() string { return a.id }

func (a *Agent) request(ctx context.Context, method, path string, q url.Values, body any) (*http.Request, error) {
	u := a.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := a.c.newRequest(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	// The access header, not the API key, is the agent's credential.
	req.Header.Del("OPEN-SANDBOX-API-KEY")
	for k, v := range a.headers {
		req.Header.Set(k, v)
	}
	return req, nil
}

func (a *Agent) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	req, err := a.request(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	return a.c.exchange(req, path, out)
}

// Ping reports whether the agent answers.
func (a *Agent) Ping(ctx context.Context) error {
	return a.do(ctx, http.MethodGet, "/ping", nil, nil, nil)
}

// WaitReady polls Ping until the agent answers or ctx ends.
func (a *Agent) WaitReady(ctx context.Context) error {
	for {
		err := a.Ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandgate: agent of %s not ready: %w", a.id, err)
		case <-time.After(pollInterval):
		}
	}
}

// ExecError describes a failed command or code cell.
type ExecError struct {
	Name      string   `json:"ename"`
	Value     string   `json:"evalue"` // for a command: its exit code
	Traceback []string `json:"traceback,omitempty"`
}

// OutputEvent is one event of a command or code stream.
type OutputEvent struct {
	Type           string         `json:"type"` // init, stdout, stderr, result, error, execution_count, execution_complete, ping
	Text           string         `json:"text,omitempty"`
	Timestamp      int64          `json:"timestamp,omitempty"` // unix ms
	ExecutionTime  int64          `json:"execution_time,omitempty"`
	ExecutionCount int            `json:"execution_count,omitempty"`
	Results        map[string]any `json:"results,omitempty"`
	Error          *ExecError     `json:"error,omitempty"`
}

// Command asks the agent to run a shell command.
type Command struct {
	Command    string
	Cwd        string
	Background bool
	Timeout    time.Duration // 0: none
	Env        map[string]string
	UID, GID   *uint32
}

func (cmd Command) body() map[string]any {
	b := map[string]any{"command": cmd.Command}
	if cmd.Cwd != "" {
		b["cwd"] = cmd.Cwd
	}
	if cmd.Background {
		b["background"] = true
	}
	if cmd.Timeout > 0 {
		b["timeout"] = cmd.Timeout.Milliseconds()
	}
	if len(cmd.Env) > 0 {
		b["envs"] = cmd.Env
	}
	if cmd.UID != nil {
		b["uid"] = *cmd.UID
	}
	if cmd.GID != nil {
		b["gid"] = *cmd.GID
	}
	return b
}

// Stream runs a command and yields its events as they come (keep-alive pings are
// skipped). Stopping the iteration closes the stream; the command goes on unless
// interrupted (Interrupt with the id of the init event).
func (a *Agent) Stream(ctx context.Context, cmd Command) iter.Seq2[OutputEvent, error] {
	return a.stream(ctx, "/command", cmd.body())
}

func (a *Agent) stream(ctx context.Context, path string, body any) iter.Seq2[OutputEvent, error] {
	return func(yield func(OutputEvent, error) bool) {
		req, err := a.request(ctx, http.MethodPost, path, nil, body)
		if err != nil {
			yield(OutputEvent{}, err)
			return
		}
		resp, err := a.c.send(req)
		if err != nil {
			yield(OutputEvent{}, err)
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			line = strings.TrimSpace(strings.TrimPrefix(line, "data:"))
			if line == "" || strings.HasPrefix(line, ":") {
				continue
			}
			var ev OutputEvent
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				yield(OutputEvent{}, fmt.Errorf("sandgate: bad event %q: %w", line, err))
				return
			}
			if ev.Type == "ping" {
				continue
			}
			if !yield(ev, nil) {
				return
			}
		}
		if err := sc.Err(); err != nil {
			yield(OutputEvent{}, fmt.Errorf("sandgate: %s stream: %w", path, err))
		}
	}
}

// Result is the collected outcome of a command or code cell.
type Result struct {
	ID       string // command id (from the init event)
	Stdout   string // every stdout line, each ending in "\n"
	Stderr   string
	ExitCode int // 0 on success, the command's code otherwise, -1 when unknown
	Error    *ExecError
	// Results are the code cell's rich results (MIME type → value; text/plain as "text").
	Results []map[string]any
}

// Handlers receive a stream's events as callbacks; any may be nil. For a command,
// Stdout and Stderr get one line each, without its line ending; for a code cell, the
// chunks as printed.
type Handlers struct {
	Stdout func(line string)
	Stderr func(line string)
	Event  func(OutputEvent)
}

// Run runs a command to its end and collects its output; h (may be the zero value)
// sees each line as it comes. A command that exits non-zero is not an error: its code
// is in Result.ExitCode.
func (a *Agent) Run(ctx context.Context, cmd Command, h Handlers) (*Result, error) {
	return collect(a.Stream(ctx, cmd), h, true)
}

// Exec runs a shell command line with defaults and collects its output.
func (a *Agent) Exec(ctx context.Context, command string) (*Result, error) {
	return a.Run(ctx, Command{Command: command}, Handlers{})
}

// collect gathers a stream; lineMode is true for commands, whose events carry one line
// each without its line ending (code cells send chunks as printed).
func collect(events iter.Seq2[OutputEvent, error], h Handlers, lineMode bool) (*Result, error) {
	eol := ""
	if lineMode {
		eol = "\n"
	}
	res := &Result{ExitCode: -1}
	var out, errOut strings.Builder
	for ev, err := range events {
		if err != nil {
			res.Stdout, res.Stderr = out.String(), errOut.String()
			return res, err
		}
		if h.Event != nil {
			h.Event(ev)
		}
		switch ev.Type {
		case "init":
			res.ID = ev.Text
		case "stdout":
			out.WriteString(ev.Text + eol)
			if h.Stdout != nil {
				h.Stdout(ev.Text)
			}
		case "stderr":
			errOut.WriteString(ev.Text + eol)
			if h.Stderr != nil {
				h.Stderr(ev.Text)
			}
		case "result":
			res.Results = append(res.Results, ev.Results)
		case "execution_complete":
			if res.Error == nil {
				res.ExitCode = 0
			}
		case "error":
			res.Error = ev.Error
			res.ExitCode = 1
			if ev.Error != nil {
				if n, err := strconv.Atoi(ev.Error.Value); err == nil {
					res.ExitCode = n
				}
			}
		}
	}
	res.Stdout, res.Stderr = out.String(), errOut.String()
	return res, nil
}

// Interrupt stops a running command.
func (a *Agent) Interrupt(ctx context.Context, commandID string) error {
	return a.do(ctx, http.MethodDelete, "/command", url.Values{"id": {commandID}}, nil, nil)
}

// CommandStatus describes a command, background ones included.
type CommandStatus struct {
	ID         string     `json:"id"`
	Content    string     `json:"content"`
	Running    bool       `json:"running"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Error      string     `json:"error,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// CommandStatus returns the state of a command.
func (a *Agent) CommandStatus(ctx context.Context, commandID string) (*CommandStatus, error) {
	return call[CommandStatus](ctx, a, http.MethodGet, "/command/status/"+url.PathEscape(commandID), nil, nil)
}

// CommandLogs returns a command's output after line cursor and the cursor to pass next.
func (a *Agent) CommandLogs(ctx context.Context, commandID string, cursor int) (string, int, error) {
	req, err := a.request(ctx, http.MethodGet, "/command/"+url.PathEscape(commandID)+"/logs", url.Values{"cursor": {strconv.Itoa(cursor)}}, nil)
	if err != nil {
		return "", cursor, err
	}
	resp, err := a.c.send(req)
	if err != nil {
		return "", cursor, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	next := cursor
	if n, perr := strconv.Atoi(resp.Header.Get("EXECD-COMMANDS-TAIL-CURSOR")); perr == nil {
		next = n
	}
	return string(data), next, err
}

// CreateSession starts a shell session whose working directory and environment persist
// across the commands run in it.
func (a *Agent) CreateSession(ctx context.Context, cwd string) (string, error) {
	var out struct {
		ID string `json:"session_id"`
	}
	body := map[string]any{}
	if cwd != "" {
		body["cwd"] = cwd
	}
	err := a.do(ctx, http.MethodPost, "/session", nil, body, &out)
	return out.ID, err
}

// RunInSession runs a command in a session and collects its output.
func (a *Agent) RunInSession(ctx context.Context, sessionID string, cmd Command, h Handlers) (*Result, error) {
	body := map[string]any{"command": cmd.Command}
	if cmd.Cwd != "" {
		body["cwd"] = cmd.Cwd
	}
	if cmd.Timeout > 0 {
		body["timeout"] = cmd.Timeout.Milliseconds()
	}
	return collect(a.stream(ctx, "/session/"+url.PathEscape(sessionID)+"/run", body), h, true)
}

// DeleteSession ends a session.
func (a *Agent) DeleteSession(ctx context.Context, sessionID string) error {
	return a.do(ctx, http.MethodDelete, "/session/"+url.PathEscape(sessionID), nil, nil, nil)
}

// CodeContext is a code interpreter context: a kernel whose state persists across cells.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd,omitempty"`
}

// CreateCodeContext starts an interpreter for language (python, bash, javascript).
func (a *Agent) CreateCodeContext(ctx context.Context, language, cwd string) (*CodeContext, error) {
	var cc CodeContext
	body := map[string]any{"language": language}
	if cwd != "" {
		body["cwd"] = cwd
	}
	if err := a.do(ctx, http.MethodPost, "/code/context", nil, body, &cc); err != nil {
		return nil, err
	}
	return &cc, nil
}

// ListCodeContexts lists the interpreters of one language ("" for all).
func (a *Agent) ListCodeContexts(ctx context.Context, language string) ([]CodeContext, error) {
	var q url.Values
	if language != "" {
		q = url.Values{"language": {language}}
	}
	var out []CodeContext
	err := a.do(ctx, http.MethodGet, "/code/contexts", q, nil, &out)
	return out, err
}

// DeleteCodeContext stops one interpreter.
func (a *Agent) DeleteCodeContext(ctx context.Context, id string) error {
	return a.do(ctx, http.MethodDelete, "/code/contexts/"+url.PathEscape(id), nil, nil, nil)
}

// StreamCode runs code in a context (contextID "" uses the language's default one) and
// yields its events.
func (a *Agent) StreamCode(ctx context.Context, contextID, language, code string) iter.Seq2[OutputEvent, error] {
	cc := map[string]any{}
	if contextID != "" {
		cc["id"] = contextID
	}
	if language != "" {
		cc["language"] = language
	}
	return a.stream(ctx, "/code", map[string]any{"context": cc, "code": code})
}

// RunCode runs code to its end and collects its output; a raised exception is in
// Result.Error, not the returned error.
func (a *Agent) RunCode(ctx context.Context, contextID, language, code string, h Handlers) (*Result, error) {
	res, err := collect(a.StreamCode(ctx, contextID, language, code), h, false)
	if res != nil && res.Error != nil && res.Error.Name != "CommandExecError" {
		res.ExitCode = 1
	}
	return res, err
}

// InterruptCode stops a running cell of a context.
func (a *Agent) InterruptCode(ctx context.Context, contextID string) error {
	return a.do(ctx, http.MethodDelete, "/code", url.Values{"id": {contextID}}, nil, nil)
}

// Metrics is a sandbox's resource use.
type Metrics struct {
	CPUCount    float64 `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotalMiB float64 `json:"mem_total_mib"`
	MemUsedMiB  float64 `json:"mem_used_mib"`
	Timestamp   int64   `json:"timestamp"`
}

// Metrics returns the sandbox's current resource use.
func (a *Agent) Metrics(ctx context.Context) (*Metrics, error) {
	return call[Metrics](ctx, a, http.MethodGet, "/metrics", nil, nil)
}
