// Package mcpserver is sandgate's Model Context Protocol server: the tools a coding agent
// calls to create sandboxes, run commands and code in them, read and write their files,
// get preview links and remove them. Every tool acts through the Go SDK with the
// caller's API key, so each is authenticated, decided by the Rego access policy and
// audited exactly like the API calls it is made of. `sandgate mcp` serves it over stdio
// with the CLI's login; the gateway serves it at /mcp over streamable HTTP.
package mcpserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	sandgate "github.com/sandgate/sandgate/client"
)

// Limits of what one tool call returns; beyond them output is cut with a marker.
const (
	// MaxOutputBytes bounds stdout and stderr of a command or code cell, each.
	MaxOutputBytes = 32 << 10
	// MaxReadBytes bounds what read_file returns by default and at most.
	MaxReadBytes = 256 << 10
	// MaxWriteBytes bounds what write_file accepts.
	MaxWriteBytes = 8 << 20
	// MaxListEntries bounds list_files.
	MaxListEntries = 500
	// DefaultCommandTimeout applies to run_command and run_code without timeout_seconds.
	DefaultCommandTimeout = 2 * time.Minute
	// MaxCommandTimeout is the most a call may ask for.
	MaxCommandTimeout = 30 * time.Minute
)

// Options configure the server.
type Options struct {
	// Version is the server version reported to clients.
	Version string
	// DefaultImage is the image create_sandbox uses when the model names none.
	DefaultImage string
	// OnCall, when set, is told of every tool call once it ended (the gateway writes it
	// to the audit stream). sandboxID is "" for calls about no one sandbox.
	OnCall func(ctx context.Context, tool, sandboxID string, err error, took time.Duration)
	// SchemaCache shares the tools' JSON schemas between servers built per request.
	SchemaCache *mcp.SchemaCache
}

// New returns an MCP server whose tools act through c.
func New(c *sandgate.Client, opts Options) *mcp.Server {
	if opts.DefaultImage == "" {
		opts.DefaultImage = "sandgate/base:0.1.0"
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "sandgate", Title: "sandgate sandboxes", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "Tools to run untrusted code in disposable, isolated Linux sandboxes. Create a sandbox once, " +
			"reuse its sandbox_id for commands, code and files, and kill it when done. Outputs are capped; " +
			"a cut is marked with \"[sandgate: N bytes truncated]\".",
		SchemaCache: opts.SchemaCache,
	})
	t := &tools{c: c, opts: opts}
	no, yes := false, true
	add(s, t, &mcp.Tool{Name: "create_sandbox", Description: "Create a new isolated Linux sandbox (a container with a shell, coreutils and, in the code-interpreter image, Python). " +
		"Returns its sandbox_id, which every other tool takes. The sandbox is deleted automatically when its timeout passes.",
		Annotations: &mcp.ToolAnnotations{Title: "Create sandbox", DestructiveHint: &no, OpenWorldHint: &yes}}, t.createSandbox)
	add(s, t, &mcp.Tool{Name: "list_sandboxes", Description: "List your sandboxes with their state (Running, Paused, …), image and expiry, newest first.",
		Annotations: &mcp.ToolAnnotations{Title: "List sandboxes", ReadOnlyHint: true}}, t.listSandboxes)
	add(s, t, &mcp.Tool{Name: "run_command", Description: "Run a shell command (sh -c) in a sandbox and wait for it to finish. Returns exit_code, stdout and stderr " +
		"(each capped at 32 KiB, cut in the middle with a marker). Use cwd instead of `cd`; a non-zero exit_code is a result, not a failure of the tool.",
		Annotations: &mcp.ToolAnnotations{Title: "Run command", DestructiveHint: &yes, OpenWorldHint: &yes}}, t.runCommand)
	add(s, t, &mcp.Tool{Name: "run_code", Description: "Run a code cell in a stateful interpreter of the sandbox (python by default; variables persist between calls of one language). " +
		"Returns stdout, stderr, the value of the last expression as text, and the exception if one was raised. Needs an image with an interpreter, e.g. sandgate/code-interpreter.",
		Annotations: &mcp.ToolAnnotations{Title: "Run code", DestructiveHint: &yes, OpenWorldHint: &yes}}, t.runCode)
	add(s, t, &mcp.Tool{Name: "read_file", Description: "Read a file of a sandbox. Text comes back as is, other bytes as base64 (encoding says which). " +
		"At most max_bytes (default and limit 256 KiB) from offset; truncated tells whether more follows.",
		Annotations: &mcp.ToolAnnotations{Title: "Read file", ReadOnlyHint: true}}, t.readFile)
	add(s, t, &mcp.Tool{Name: "write_file", Description: "Write a file in a sandbox, creating parent directories and replacing any existing file. " +
		"content is text, or base64 when encoding is \"base64\" (up to 8 MiB).",
		Annotations: &mcp.ToolAnnotations{Title: "Write file", DestructiveHint: &yes}}, t.writeFile)
	add(s, t, &mcp.Tool{Name: "list_files", Description: "List a directory of a sandbox (depth 1 by default), or search below it with a glob pattern such as \"**/*.py\". " +
		"Returns path, type (file, directory, symlink) and size of up to 500 entries.",
		Annotations: &mcp.ToolAnnotations{Title: "List files", ReadOnlyHint: true}}, t.listFiles)
	add(s, t, &mcp.Tool{Name: "preview_url", Description: "Get a signed browser URL to a TCP port a server listens on inside the sandbox (e.g. a web app on 3000). " +
		"Anyone with the URL can open it until it expires (ttl_seconds, default 3600).",
		Annotations: &mcp.ToolAnnotations{Title: "Preview URL", ReadOnlyHint: true}}, t.previewURL)
	add(s, t, &mcp.Tool{Name: "kill_sandbox", Description: "Delete a sandbox and everything in it, at once. Do this when the task is done.",
		Annotations: &mcp.ToolAnnotations{Title: "Kill sandbox", DestructiveHint: &yes, IdempotentHint: true}}, t.killSandbox)
	return s
}

type tools struct {
	c    *sandgate.Client
	opts Options
}

// sandboxOf names the sandbox a tool input is about, for the audit hook.
type sandboxOf interface{ sandbox() string }

// add registers a tool whose handler returns (out, error); the error becomes a tool
// error (IsError) the model reads, with the server's code.
func add[In, Out any](s *mcp.Server, t *tools, tool *mcp.Tool, h func(context.Context, In) (Out, error)) {
	mcp.AddTool(s, tool, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		start := time.Now()
		out, err := h(ctx, in)
		if t.opts.OnCall != nil {
			id := ""
			if so, ok := any(in).(sandboxOf); ok {
				id = so.sandbox()
			}
			if so, ok := any(out).(sandboxOf); ok && id == "" {
				id = so.sandbox()
			}
			t.opts.OnCall(ctx, tool.Name, id, err, time.Since(start))
		}
		if err != nil {
			var zero Out
			return nil, zero, toolError(err)
		}
		return nil, out, nil
	})
}

// toolError keeps the server's code and message, which tell the model what to change.
func toolError(err error) error {
	var apiErr *sandgate.Error
	if errors.As(err, &apiErr) {
		return fmt.Errorf("%s: %s", apiErr.Code, apiErr.Message)
	}
	return err
}

// truncate cuts s to at most max bytes, keeping its head and tail around a marker.
func truncate(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	half := max / 2
	head, tail := s[:half], s[len(s)-half:]
	for len(head) > 0 && !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	for len(tail) > 0 && !utf8.ValidString(tail) {
		tail = tail[1:]
	}
	return fmt.Sprintf("%s\n[sandgate: %d bytes truncated]\n%s", head, len(s)-len(head)-len(tail), tail), true
}

func timeoutOf(seconds int) (time.Duration, error) {
	if seconds < 0 {
		return 0, errors.New("timeout_seconds must not be negative")
	}
	d := time.Duration(seconds) * time.Second
	if d == 0 {
		d = DefaultCommandTimeout
	}
	if d > MaxCommandTimeout {
		return 0, fmt.Errorf("timeout_seconds may be at most %d", int(MaxCommandTimeout.Seconds()))
	}
	return d, nil
}

type sandboxRef struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned"`
}

func (r sandboxRef) sandbox() string { return r.SandboxID }

func (r sandboxRef) check() error {
	if strings.TrimSpace(r.SandboxID) == "" {
		return errors.New("sandbox_id is required")
	}
	return nil
}

type createIn struct {
	Image          string            `json:"image,omitempty" jsonschema:"container image; default sandgate/base (shell tools); sandgate/code-interpreter has Python and Jupyter"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"seconds until the sandbox is deleted automatically; default 3600"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables of the sandbox"`
	Metadata       map[string]string `json:"metadata,omitempty" jsonschema:"labels to find the sandbox again with list_sandboxes"`
	Pool           string            `json:"pool,omitempty" jsonschema:"claim a pre-warmed sandbox from this pool instead (faster)"`
}

type sandboxOut struct {
	SandboxID string     `json:"sandbox_id"`
	State     string     `json:"state"`
	Image     string     `json:"image,omitempty"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

func (o sandboxOut) sandbox() string { return o.SandboxID }

func sandboxInfo(sb *sandgate.Sandbox) sandboxOut {
	o := sandboxOut{SandboxID: sb.ID, State: sb.Status.State, ExpiresAt: sb.ExpiresAt}
	if !sb.CreatedAt.IsZero() {
		t := sb.CreatedAt
		o.CreatedAt = &t
	}
	if sb.Image != nil {
		o.Image = sb.Image.URI
	}
	return o
}

func (t *tools) createSandbox(ctx context.Context, in createIn) (sandboxOut, error) {
	if in.TimeoutSeconds < 0 {
		return sandboxOut{}, errors.New("timeout_seconds must not be negative")
	}
	ttl := time.Duration(in.TimeoutSeconds) * time.Second
	if ttl == 0 {
		ttl = time.Hour
	}
	req := sandgate.CreateRequest{Timeout: sandgate.Seconds(ttl), Env: in.Env, Metadata: in.Metadata}
	if in.Pool != "" {
		req.Extensions = map[string]string{"poolRef": in.Pool}
	} else {
		img := in.Image
		if img == "" {
			img = t.opts.DefaultImage
		}
		req.Image = &sandgate.Image{URI: img}
		req.Entrypoint = []string{"tail", "-f", "/dev/null"}
	}
	sb, err := t.c.CreateSandbox(ctx, req)
	if err != nil {
		return sandboxOut{}, err
	}
	return sandboxInfo(sb), nil
}

type listIn struct {
	State string `json:"state,omitempty" jsonschema:"only sandboxes in this state, e.g. Running"`
}

type listOut struct {
	Sandboxes []sandboxOut `json:"sandboxes"`
	Truncated bool         `json:"truncated,omitempty"`
}

func (t *tools) listSandboxes(ctx context.Context, in listIn) (listOut, error) {
	opts := sandgate.ListOptions{PageSize: 100}
	if in.State != "" {
		opts.States = []string{in.State}
	}
	page, err := t.c.ListSandboxes(ctx, opts)
	if err != nil {
		return listOut{}, err
	}
	out := listOut{Sandboxes: []sandboxOut{}, Truncated: page.Pagination.HasNextPage}
	for i := range page.Items {
		out.Sandboxes = append(out.Sandboxes, sandboxInfo(&page.Items[i]))
	}
	return out, nil
}

type commandIn struct {
	sandboxRef
	Command        string            `json:"command" jsonschema:"shell command line, run with sh -c"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory (absolute path)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"extra environment variables for this command"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"stop the command after this many seconds; default 120, at most 1800"`
}

type commandOut struct {
	ExitCode  int    `json:"exit_code"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated,omitempty"`
}

func (t *tools) runCommand(ctx context.Context, in commandIn) (commandOut, error) {
	if err := in.check(); err != nil {
		return commandOut{}, err
	}
	if strings.TrimSpace(in.Command) == "" {
		return commandOut{}, errors.New("command is required")
	}
	d, err := timeoutOf(in.TimeoutSeconds)
	if err != nil {
		return commandOut{}, err
	}
	a, err := t.c.Agent(ctx, in.SandboxID)
	if err != nil {
		return commandOut{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	res, err := a.Run(cctx, sandgate.Command{Command: in.Command, Cwd: in.Cwd, Env: in.Env, Timeout: d}, sandgate.Handlers{})
	if err != nil {
		return commandOut{}, err
	}
	out := commandOut{ExitCode: res.ExitCode}
	var t1, t2 bool
	out.Stdout, t1 = truncate(res.Stdout, MaxOutputBytes)
	out.Stderr, t2 = truncate(res.Stderr, MaxOutputBytes)
	out.Truncated = t1 || t2
	return out, nil
}

type codeIn struct {
	sandboxRef
	Code           string `json:"code" jsonschema:"the code to run"`
	Language       string `json:"language,omitempty" jsonschema:"python (default), bash or javascript"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"give up after this many seconds; default 120, at most 1800"`
}

type codeOut struct {
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Result    string `json:"result,omitempty"`
	Error     string `json:"error,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
}

func (t *tools) runCode(ctx context.Context, in codeIn) (codeOut, error) {
	if err := in.check(); err != nil {
		return codeOut{}, err
	}
	d, err := timeoutOf(in.TimeoutSeconds)
	if err != nil {
		return codeOut{}, err
	}
	lang := in.Language
	if lang == "" {
		lang = "python"
	}
	a, err := t.c.Agent(ctx, in.SandboxID)
	if err != nil {
		return codeOut{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	res, err := a.RunCode(cctx, "", lang, in.Code, sandgate.Handlers{})
	if err != nil {
		return codeOut{}, err
	}
	var out codeOut
	var t1, t2, t3 bool
	out.Stdout, t1 = truncate(res.Stdout, MaxOutputBytes)
	out.Stderr, t2 = truncate(res.Stderr, MaxOutputBytes)
	var results []string
	for _, r := range res.Results {
		if s, ok := r["text"].(string); ok {
			results = append(results, s)
		}
	}
	out.Result, t3 = truncate(strings.Join(results, "\n"), MaxOutputBytes)
	if res.Error != nil {
		e := res.Error.Name + ": " + res.Error.Value
		if len(res.Error.Traceback) > 0 {
			e += "\n" + strings.Join(res.Error.Traceback, "\n")
		}
		out.Error, _ = truncate(e, MaxOutputBytes)
	}
	out.Truncated = t1 || t2 || t3
	return out, nil
}

type readIn struct {
	sandboxRef
	Path     string `json:"path" jsonschema:"absolute path of the file"`
	Offset   int64  `json:"offset,omitempty" jsonschema:"byte offset to start at (to read a large file in parts)"`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"bytes to return at most; default and limit 262144"`
}

type readOut struct {
	Path      string `json:"path"`
	Content   string `json:"content"`
	Encoding  string `json:"encoding"` // utf-8 or base64
	Size      int64  `json:"size"`
	Truncated bool   `json:"truncated"`
}

func (t *tools) readFile(ctx context.Context, in readIn) (readOut, error) {
	if err := in.check(); err != nil {
		return readOut{}, err
	}
	if !path.IsAbs(in.Path) {
		return readOut{}, errors.New("path must be absolute")
	}
	if in.Offset < 0 || in.MaxBytes < 0 {
		return readOut{}, errors.New("offset and max_bytes must not be negative")
	}
	limit := in.MaxBytes
	if limit == 0 || limit > MaxReadBytes {
		limit = MaxReadBytes
	}
	a, err := t.c.Agent(ctx, in.SandboxID)
	if err != nil {
		return readOut{}, err
	}
	info, err := a.Stat(ctx, in.Path)
	if err != nil {
		return readOut{}, err
	}
	fi := info[in.Path]
	if fi.Type == "directory" {
		return readOut{}, fmt.Errorf("%s is a directory: use list_files", in.Path)
	}
	out := readOut{Path: in.Path, Size: fi.Size, Encoding: "utf-8"}
	if in.Offset >= fi.Size {
		return out, nil
	}
	body, _, err := a.DownloadRange(ctx, in.Path, in.Offset)
	if err != nil {
		return readOut{}, err
	}
	defer body.Close()
	buf := make([]byte, limit)
	n, _ := readFull(body, buf)
	data := buf[:n]
	out.Truncated = in.Offset+int64(n) < fi.Size
	if utf8.Valid(data) {
		out.Content = string(data)
	} else if cut := validPrefix(data); out.Truncated && len(data)-cut < utf8.UTFMax && cut > 0 {
		// A multi-byte character split at the limit: the next read starts with it.
		out.Content = string(data[:cut])
	} else {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	}
	return out, nil
}

func validPrefix(b []byte) int {
	for cut := len(b); cut > 0 && len(b)-cut < utf8.UTFMax; cut-- {
		if utf8.Valid(b[:cut]) {
			return cut
		}
	}
	return 0
}

type writeIn struct {
	sandboxRef
	Path     string `json:"path" jsonschema:"absolute path of the file"`
	Content  string `json:"content" jsonschema:"the file's new content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
}

type writeOut struct {
	Path         string `json:"path"`
	BytesWritten int    `json:"bytes_written"`
}

func (t *tools) writeFile(ctx context.Context, in writeIn) (writeOut, error) {
	if err := in.check(); err != nil {
		return writeOut{}, err
	}
	if !path.IsAbs(in.Path) {
		return writeOut{}, errors.New("path must be absolute")
	}
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8", "utf8", "text":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return writeOut{}, fmt.Errorf("content is not base64: %w", err)
		}
	default:
		return writeOut{}, fmt.Errorf("encoding %q: want utf-8 or base64", in.Encoding)
	}
	if len(data) > MaxWriteBytes {
		return writeOut{}, fmt.Errorf("content has %d bytes; at most %d are accepted", len(data), MaxWriteBytes)
	}
	a, err := t.c.Agent(ctx, in.SandboxID)
	if err != nil {
		return writeOut{}, err
	}
	if err := a.WriteFile(ctx, in.Path, data, 0); err != nil {
		return writeOut{}, err
	}
	return writeOut{Path: in.Path, BytesWritten: len(data)}, nil
}

type listFilesIn struct {
	sandboxRef
	Path    string `json:"path" jsonschema:"absolute path of the directory"`
	Depth   int    `json:"depth,omitempty" jsonschema:"levels to descend; default 1 (the directory's entries)"`
	Pattern string `json:"pattern,omitempty" jsonschema:"glob to search for below path instead, e.g. **/*.go"`
}

type fileEntry struct {
	Path string `json:"path"`
	Type string `json:"type"`
	Size int64  `json:"size"`
}

type listFilesOut struct {
	Entries   []fileEntry `json:"entries"`
	Truncated bool        `json:"truncated,omitempty"`
}

func (t *tools) listFiles(ctx context.Context, in listFilesIn) (listFilesOut, error) {
	if err := in.check(); err != nil {
		return listFilesOut{}, err
	}
	if !path.IsAbs(in.Path) {
		return listFilesOut{}, errors.New("path must be absolute")
	}
	if in.Depth < 0 {
		return listFilesOut{}, errors.New("depth must not be negative")
	}
	a, err := t.c.Agent(ctx, in.SandboxID)
	if err != nil {
		return listFilesOut{}, err
	}
	var infos []sandgate.FileInfo
	if in.Pattern != "" {
		infos, err = a.Search(ctx, in.Path, in.Pattern)
	} else {
		infos, err = a.ListDir(ctx, in.Path, max(in.Depth, 1))
	}
	if err != nil {
		return listFilesOut{}, err
	}
	out := listFilesOut{Entries: []fileEntry{}}
	for _, fi := range infos {
		if len(out.Entries) == MaxListEntries {
			out.Truncated = true
			break
		}
		out.Entries = append(out.Entries, fileEntry{Path: fi.Path, Type: fi.Type, Size: fi.Size})
	}
	return out, nil
}

type previewIn struct {
	sandboxRef
	Port       int `json:"port" jsonschema:"TCP port a server listens on inside the sandbox"`
	TTLSeconds int `json:"ttl_seconds,omitempty" jsonschema:"how long the URL stays valid; default 3600"`
}

type previewOut struct {
	URL       string     `json:"url"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

func (t *tools) previewURL(ctx context.Context, in previewIn) (previewOut, error) {
	if err := in.check(); err != nil {
		return previewOut{}, err
	}
	if in.Port < 1 || in.Port > 65535 {
		return previewOut{}, errors.New("port must be 1–65535")
	}
	if in.TTLSeconds < 0 {
		return previewOut{}, errors.New("ttl_seconds must not be negative")
	}
	ttl := time.Duration(in.TTLSeconds) * time.Second
	if ttl == 0 {
		ttl = time.Hour
	}
	ep, err := t.c.PreviewLink(ctx, in.SandboxID, in.Port, ttl)
	if err != nil {
		return previewOut{}, err
	}
	return previewOut{URL: ep.URL, ExpiresAt: ep.ExpiresAt}, nil
}

type killOut struct {
	SandboxID string `json:"sandbox_id"`
	Deleted   bool   `json:"deleted"`
}

func (t *tools) killSandbox(ctx context.Context, in sandboxRef) (killOut, error) {
	if err := in.check(); err != nil {
		return killOut{}, err
	}
	if err := t.c.DeleteSandbox(ctx, in.SandboxID); err != nil {
		return killOut{}, err
	}
	return killOut{SandboxID: in.SandboxID, Deleted: true}, nil
}
