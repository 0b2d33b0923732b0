package agent

// E2B's code-interpreter API over the agent's code contexts (code.go), under
// e2bCodePrefix: the gateway routes a request for a sandbox's port 49999 made with the
// `e2b-code-interpreter` SDKs here. The contexts are the same ones /code serves; a run
// answers newline-delimited JSON, one object per output:
//
//	{"type":"number_of_executions","execution_count":3}
//	{"type":"stdout","text":"hi\n","timestamp":1733472000000000000}
//	{"type":"result","text":"42","is_main_result":true}
//	{"type":"error","name":"NameError","value":"name 'x' is not defined","traceback":"…"}
//	{"type":"end_of_execution"}
//
// A Python context run through this API also describes a matplotlib figure as data
// (the result's "chart") and a pandas DataFrame as its columns ("data"), by display
// formatters the agent registers in the kernel (e2bcode_display.py).

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/jupyter"
)

// e2bCodePrefix is where the agent serves E2B's code-interpreter API.
const e2bCodePrefix = "/e2b-code"

// e2bDefaultCwd is where an E2B context starts when the request names no cwd and the
// directory exists (E2B's user's home).
const e2bDefaultCwd = "/home/user"

//go:embed e2bcode_display.py
var e2bDisplayFormatters string

func (s *Server) e2bCodeRoutes(m *http.ServeMux) {
	m.HandleFunc("GET "+e2bCodePrefix+"/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, "OK")
	})
	m.HandleFunc("POST "+e2bCodePrefix+"/execute", s.handleE2BExecute)
	m.HandleFunc("POST "+e2bCodePrefix+"/contexts", s.handleE2BCreateContext)
	m.HandleFunc("GET "+e2bCodePrefix+"/contexts", s.handleE2BListContexts)
	m.HandleFunc("DELETE "+e2bCodePrefix+"/contexts/{id}", s.handleDeleteContext)
	m.HandleFunc("POST "+e2bCodePrefix+"/contexts/{id}/restart", s.handleE2BRestartContext)
}

// e2bContext is a context as E2B's API shows it.
type e2bContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func e2bContextOf(c *codeContext) e2bContext {
	return e2bContext{ID: c.ID, Language: c.Language, Cwd: c.Cwd}
}

func (s *Server) handleE2BCreateContext(w http.ResponseWriter, r *http.Request) {
	var req createContextRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if req.Cwd == "" {
		if fi, err := os.Stat(e2bDefaultCwd); err == nil && fi.IsDir() {
			req.Cwd = e2bDefaultCwd
		}
	}
	c, err := s.code.create(r.Context(), req.Language, req.Cwd)
	if err != nil {
		writeCodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, e2bContextOf(c))
}

func (s *Server) handleE2BListContexts(w http.ResponseWriter, r *http.Request) {
	all := s.code.list("")
	out := make([]e2bContext, 0, len(all))
	for _, c := range all {
		out = append(out, e2bContextOf(c))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleE2BRestartContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.code.restart(r.Context(), id); err != nil {
		if errors.Is(err, errContextNotFound) {
			writeError(w, http.StatusNotFound, CodeContextNotFound, "context not found: "+id)
			return
		}
		writeCodeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type e2bExecuteRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

func (s *Server) handleE2BExecute(w http.ResponseWriter, r *http.Request) {
	var req e2bExecuteRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if req.ContextID != "" && req.Language != "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "name a context or a language, not both")
		return
	}
	for k := range req.EnvVars {
		if !envName.MatchString(k) {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, "invalid environment variable name "+strconv.Quote(k))
			return
		}
	}
	c, err := s.code.contextFor(r.Context(), req.ContextID, req.Language)
	if errors.Is(err, errContextNotFound) {
		writeError(w, http.StatusNotFound, CodeContextNotFound, "context not found: "+req.ContextID)
		return
	}
	if err != nil {
		writeCodeError(w, err)
		return
	}
	if len(req.EnvVars) > 0 && c.kernel != nil && c.Language != "python" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest,
			"env_vars of a run are supported in python and bash contexts, not in "+c.Language)
		return
	}
	out := newNDJSONStream(w)
	if c.shell != nil {
		s.runE2BShell(r.Context(), out, c, req.Code, req.EnvVars)
		return
	}
	s.runE2BKernel(r.Context(), out, c, req.Code, req.EnvVars)
}

// envName is what a run's environment variable may be called.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ndjsonStream writes one JSON object per line to a response, flushing each.
type ndjsonStream struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newNDJSONStream(w http.ResponseWriter) *ndjsonStream {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &ndjsonStream{w: w, rc: http.NewResponseController(w)}
}

func (n *ndjsonStream) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	_, _ = n.w.Write(append(b, '\n'))
	_ = n.rc.Flush()
}

type e2bOutput struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Timestamp int64  `json:"timestamp"`
}

type e2bError struct {
	Type      string `json:"type"`
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

func (n *ndjsonStream) output(stream, text string) {
	n.send(e2bOutput{Type: stream, Text: text, Timestamp: time.Now().UnixNano()})
}

func (n *ndjsonStream) error(name, value string, traceback []string) {
	n.send(e2bError{Type: "error", Name: name, Value: value, Traceback: strings.Join(traceback, "\n")})
}

func (n *ndjsonStream) end() { n.send(map[string]string{"type": "end_of_execution"}) }

// e2bResultKeys names, for each MIME type of a Jupyter display bundle, the field of an
// E2B result that carries it; any other type goes under "extra".
var e2bResultKeys = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
	"e2b/data":               "data",
	"e2b/chart":              "chart",
}

// e2bResult turns a Jupyter display bundle into an E2B result line.
func e2bResult(data map[string]any, main bool) map[string]any {
	out := map[string]any{"type": "result", "is_main_result": main}
	extra := map[string]any{}
	for mime, v := range data {
		if key, ok := e2bResultKeys[mime]; ok {
			out[key] = v
			continue
		}
		extra[mime] = v
	}
	if len(extra) > 0 {
		out["extra"] = extra
	}
	return out
}

// runE2BKernel runs one cell in a Jupyter context and streams its outputs as E2B lines.
// Environment variables asked for the run hold for it only.
func (s *Server) runE2BKernel(ctx context.Context, out *ndjsonStream, c *codeContext, code string, env map[string]string) {
	if c.Language == "python" {
		c.richDisplay.Do(func() {
			_ = c.kernel.Execute(ctx, e2bDisplayFormatters, true, func(jupyter.Output) {})
		})
	}
	if len(env) > 0 {
		b, _ := json.Marshal(env)
		set := "import os as __sg_os, json as __sg_json\n__sg_saved_env = {k: __sg_os.environ.get(k) for k in __sg_json.loads(" + strconv.Quote(string(b)) + ")}\n" +
			"__sg_os.environ.update(__sg_json.loads(" + strconv.Quote(string(b)) + "))\ndel __sg_os, __sg_json"
		_ = c.kernel.Execute(ctx, set, true, func(jupyter.Output) {})
		defer func() {
			restore := "import os as __sg_os\nfor __sg_k, __sg_v in __sg_saved_env.items():\n" +
				"    if __sg_v is None: __sg_os.environ.pop(__sg_k, None)\n    else: __sg_os.environ[__sg_k] = __sg_v\n" +
				"del __sg_os, __sg_saved_env"
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = c.kernel.Execute(rctx, restore, true, func(jupyter.Output) {})
		}()
	}
	var execErr *jupyter.Output
	err := s.executeCell(ctx, c, code, func(o jupyter.Output) {
		switch o.Kind {
		case "stream":
			out.output(o.Stream, o.Text)
		case "execute_input":
			if o.ExecutionCount > 0 {
				out.send(map[string]any{"type": "number_of_executions", "execution_count": o.ExecutionCount})
			}
		case "execute_result", "display_data":
			if len(o.Data) > 0 {
				out.send(e2bResult(o.Data, o.Kind == "execute_result"))
			}
		case "error":
			o := o
			execErr = &o
		}
	})
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		out.error("KernelError", err.Error(), nil)
	case execErr != nil:
		out.error(execErr.EName, execErr.EValue, execErr.Traceback)
	}
	out.end()
}

// runE2BShell runs a script in a bash context; a non-zero exit is the run's error.
func (s *Server) runE2BShell(ctx context.Context, out *ndjsonStream, c *codeContext, script string, env map[string]string) {
	if len(env) > 0 {
		// A subshell: the variables hold for this run only, the session's state stays.
		var b strings.Builder
		b.WriteString("(\n")
		for k, v := range env {
			b.WriteString("export " + shellQuote(k) + "=" + shellQuote(v) + "\n")
		}
		b.WriteString(script + "\n)")
		script = b.String()
	}
	res, err := c.shell.Run(ctx, script, "", 0, func(name, line string, flush bool) error {
		out.output(name, line)
		return nil
	})
	if !c.shell.Alive() {
		s.code.remove(c.ID)
	}
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		out.error("ShellError", "the shell session ended: "+err.Error(), nil)
	case res.ExitCode != 0:
		out.error("CommandExitError", "exit status "+strconv.Itoa(res.ExitCode), nil)
	}
	out.end()
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
