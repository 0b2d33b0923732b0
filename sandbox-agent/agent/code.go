package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/sandbox-agent/jupyter"
	"github.com/sandgate/sandgate/sandbox-agent/shellsession"
)

// codeContext is one stateful interpreter: a Jupyter kernel, or a persistent shell for
// the bash language.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd,omitempty"`

	kernel *jupyter.Kernel
	shell  *shellsession.Session
	// richDisplay registers, once, the display formatters E2B's API adds to a Python
	// kernel (e2bcode.go).
	richDisplay sync.Once
}

// codeInterpreter owns the code contexts and the Jupyter server behind them, started on
// first use.
type codeInterpreter struct {
	s        *Server
	mu       sync.Mutex
	contexts map[string]*codeContext
	defaults map[string]string // language → id of the context used when none is named

	jupyterMu sync.Mutex
	jupyter   *jupyter.Server
}

func newCodeInterpreter(s *Server) *codeInterpreter {
	return &codeInterpreter{s: s, contexts: map[string]*codeContext{}, defaults: map[string]string{}}
}

func (ci *codeInterpreter) close() {
	ci.mu.Lock()
	all := ci.contexts
	ci.contexts = map[string]*codeContext{}
	ci.defaults = map[string]string{}
	ci.mu.Unlock()
	for _, c := range all {
		c.shutdown()
	}
	ci.jupyterMu.Lock()
	if ci.jupyter != nil {
		ci.jupyter.Close()
		ci.jupyter = nil
	}
	ci.jupyterMu.Unlock()
}

func (c *codeContext) shutdown() {
	if c.kernel != nil {
		c.kernel.Shutdown()
	}
	if c.shell != nil {
		c.shell.Close()
	}
}

// jupyterServer returns the running Jupyter server, starting it when needed.
func (ci *codeInterpreter) jupyterServer(ctx context.Context) (*jupyter.Server, error) {
	ci.jupyterMu.Lock()
	defer ci.jupyterMu.Unlock()
	if ci.jupyter != nil && ci.jupyter.Alive() {
		return ci.jupyter, nil
	}
	env := ci.s.env.Build(nil)
	python, err := jupyter.Python(env)
	if err != nil {
		return nil, err
	}
	srv, err := jupyter.Start(ctx, python, env, filepath.Join(ci.s.cfg.StateDir, "jupyter.log"))
	if err != nil {
		return nil, err
	}
	ci.jupyter = srv
	return srv, nil
}

func normalizeLanguage(l string) string {
	l = strings.ToLower(strings.TrimSpace(l))
	switch l {
	case "", "python3", "py":
		return "python"
	case "sh", "shell":
		return "bash"
	case "js", "node", "nodejs":
		return "javascript"
	}
	return l
}

// create starts a new context.
func (ci *codeInterpreter) create(ctx context.Context, language, cwd string) (*codeContext, error) {
	language = normalizeLanguage(language)
	if cwd == "" {
		cwd, _ = os.Getwd()
	} else if fi, err := os.Stat(cwd); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("cwd %s: %w", cwd, errBadRequest)
	}
	c := &codeContext{ID: uuid.NewString(), Language: language, Cwd: cwd}
	if language == "bash" {
		sh, err := ci.s.startShell(cwd)
		if err != nil {
			return nil, err
		}
		c.shell = sh
	} else {
		srv, err := ci.jupyterServer(ctx)
		if err != nil {
			return nil, err
		}
		name, err := srv.KernelName(ctx, language)
		if err != nil {
			return nil, err
		}
		k, err := srv.StartKernel(ctx, name, cwd)
		if err != nil {
			return nil, err
		}
		c.kernel = k
		extra := ci.s.env.Extra()
		for k, v := range ci.s.env.FileVars() {
			extra[k] = v
		}
		if len(extra) > 0 && language == "python" {
			// Kernels inherit the Jupyter server's environment, fixed when it
			// started; variables set later through /sandgate/env or the environment
			// file are applied here.
			b, _ := json.Marshal(extra)
			code := fmt.Sprintf("import os as __sg_os, json as __sg_json\n__sg_os.environ.update(__sg_json.loads(%q))\ndel __sg_os, __sg_json", string(b))
			_ = k.Execute(ctx, code, true, func(jupyter.Output) {})
		}
	}
	ci.mu.Lock()
	ci.contexts[c.ID] = c
	ci.mu.Unlock()
	return c, nil
}

func (ci *codeInterpreter) get(id string) *codeContext {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	return ci.contexts[id]
}

func (ci *codeInterpreter) remove(id string) *codeContext {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	c := ci.contexts[id]
	delete(ci.contexts, id)
	for lang, def := range ci.defaults {
		if def == id {
			delete(ci.defaults, lang)
		}
	}
	return c
}

func (ci *codeInterpreter) list(language string) []*codeContext {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	out := []*codeContext{}
	for _, c := range ci.contexts {
		if language == "" || c.Language == language {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// restart replaces a context's kernel (or shell) by a fresh one with the same
// language and working directory; the context keeps its id.
func (ci *codeInterpreter) restart(ctx context.Context, id string) error {
	old := ci.get(id)
	if old == nil {
		return errContextNotFound
	}
	fresh, err := ci.create(ctx, old.Language, old.Cwd)
	if err != nil {
		return err
	}
	ci.mu.Lock()
	delete(ci.contexts, fresh.ID)
	cur, ok := ci.contexts[id]
	if ok {
		ci.contexts[id] = &codeContext{ID: id, Language: cur.Language, Cwd: cur.Cwd, kernel: fresh.kernel, shell: fresh.shell}
	}
	ci.mu.Unlock()
	if !ok {
		// Removed meanwhile.
		fresh.shutdown()
		return errContextNotFound
	}
	cur.shutdown()
	return nil
}

// writeCodeError maps code-interpreter errors to statuses and codes.
func writeCodeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, jupyter.ErrUnavailable):
		writeError(w, http.StatusNotImplemented, CodeNotSupported,
			"this sandbox has no Jupyter (jupyter-server and ipykernel): its only code language is bash")
	case errors.Is(err, jupyter.ErrNoKernel):
		var nk *jupyter.NoKernelError
		msg := err.Error()
		if errors.As(err, &nk) {
			msg = fmt.Sprintf("no kernel for language %q in this sandbox; its code languages are: %s", nk.Language, strings.Join(append([]string{"bash"}, nk.Languages...), ", "))
		}
		writeError(w, http.StatusNotImplemented, CodeNotSupported, msg)
	case errors.Is(err, os.ErrNotExist), errors.Is(err, errBadRequest), errors.Is(err, os.ErrPermission):
		writeFSError(w, err)
	default:
		writeError(w, http.StatusInternalServerError, CodeRuntime, err.Error())
	}
}

type createContextRequest struct {
	Language string `json:"language"`
	Cwd      string `json:"cwd,omitempty"`
}

func (s *Server) handleCreateContext(w http.ResponseWriter, r *http.Request) {
	var req createContextRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	c, err := s.code.create(r.Context(), req.Language, req.Cwd)
	if err != nil {
		writeCodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (s *Server) handleListContexts(w http.ResponseWriter, r *http.Request) {
	lang := r.URL.Query().Get("language")
	if lang != "" {
		lang = normalizeLanguage(lang)
	}
	writeJSON(w, http.StatusOK, s.code.list(lang))
}

func (s *Server) handleDeleteContextsByLanguage(w http.ResponseWriter, r *http.Request) {
	lang, ok := requiredQuery(w, r, "language")
	if !ok {
		return
	}
	for _, c := range s.code.list(normalizeLanguage(lang)) {
		if removed := s.code.remove(c.ID); removed != nil {
			removed.shutdown()
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleGetContext(w http.ResponseWriter, r *http.Request) {
	c := s.code.get(r.PathValue("id"))
	if c == nil {
		writeError(w, http.StatusNotFound, CodeContextNotFound, "context not found: "+r.PathValue("id"))
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (s *Server) handleDeleteContext(w http.ResponseWriter, r *http.Request) {
	c := s.code.remove(r.PathValue("id"))
	if c == nil {
		writeError(w, http.StatusNotFound, CodeContextNotFound, "context not found: "+r.PathValue("id"))
		return
	}
	c.shutdown()
	w.WriteHeader(http.StatusOK)
}

type runCodeRequest struct {
	Context struct {
		ID       string `json:"id,omitempty"`
		Language string `json:"language,omitempty"`
	} `json:"context"`
	Code string `json:"code"`
}

// contextFor resolves the context of a run: the named one, or the language's default
// context, created on first use.
func (ci *codeInterpreter) contextFor(ctx context.Context, id, language string) (*codeContext, error) {
	if id != "" {
		if c := ci.get(id); c != nil {
			return c, nil
		}
		return nil, errContextNotFound
	}
	language = normalizeLanguage(language)
	ci.mu.Lock()
	if c := ci.contexts[ci.defaults[language]]; c != nil {
		ci.mu.Unlock()
		return c, nil
	}
	ci.mu.Unlock()
	c, err := ci.create(ctx, language, "")
	if err != nil {
		return nil, err
	}
	ci.mu.Lock()
	ci.defaults[language] = c.ID
	ci.mu.Unlock()
	return c, nil
}

var errContextNotFound = errors.New("context not found")

func (s *Server) handleRunCode(w http.ResponseWriter, r *http.Request) {
	var req runCodeRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if req.Code == "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "code is required")
		return
	}
	c, err := s.code.contextFor(r.Context(), req.Context.ID, req.Context.Language)
	if errors.Is(err, errContextNotFound) {
		writeError(w, http.StatusNotFound, CodeContextNotFound, "context not found: "+req.Context.ID)
		return
	}
	if err != nil {
		writeCodeError(w, err)
		return
	}
	stream := newEventStream(w)
	_ = stream.send(Event{Type: EventInit, Text: c.ID}, true)
	if c.shell != nil {
		s.runShell(r.Context(), stream, c.shell, req.Code, "", 0)
		if !c.shell.Alive() {
			s.code.remove(c.ID)
		}
		return
	}
	s.runKernel(r.Context(), stream, c, req.Code)
}

// runKernel streams one cell execution as execution events.
func (s *Server) runKernel(ctx context.Context, stream *eventStream, c *codeContext, code string) {
	stopPing := make(chan struct{})
	go stream.keepAlive(s.cfg.PingInterval, stopPing)
	defer close(stopPing)
	started := time.Now()
	var execErr *EventError
	err := s.executeCell(ctx, c, code, func(o jupyter.Output) {
		switch o.Kind {
		case "stream":
			typ := EventStdout
			if o.Stream == "stderr" {
				typ = EventStderr
			}
			_ = stream.send(Event{Type: typ, Text: o.Text}, true)
		case "execute_input":
			if o.ExecutionCount > 0 {
				_ = stream.send(Event{Type: EventExecutionCount, ExecutionCount: o.ExecutionCount}, true)
			}
		case "execute_result", "display_data":
			if len(o.Data) > 0 {
				_ = stream.send(Event{Type: EventResult, Results: renameTextPlain(o.Data)}, true)
			}
		case "error":
			execErr = &EventError{EName: o.EName, EValue: o.EValue, Traceback: orEmpty(o.Traceback)}
		}
	})
	elapsed := time.Since(started).Milliseconds()
	switch {
	case ctx.Err() != nil:
	case err != nil:
		_ = stream.send(Event{Type: EventErr, ExecutionTime: elapsed, Error: &EventError{
			EName: "KernelError", EValue: err.Error(), Traceback: []string{},
		}}, true)
	case execErr != nil:
		_ = stream.send(Event{Type: EventErr, ExecutionTime: elapsed, Error: execErr}, true)
	default:
		_ = stream.send(Event{Type: EventComplete, ExecutionTime: elapsed}, true)
	}
}

// executeCell runs code in a kernel context, calling fn for each output. When the
// client leaves (ctx ends) the cell is interrupted so that the context is usable again;
// when the kernel died the context is removed.
func (s *Server) executeCell(ctx context.Context, c *codeContext, code string, fn func(jupyter.Output)) error {
	err := c.kernel.Execute(ctx, code, false, fn)
	switch {
	case ctx.Err() != nil:
		ictx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.kernel.Interrupt(ictx)
		cancel()
	case errors.Is(err, jupyter.ErrKernelDied):
		if removed := s.code.remove(c.ID); removed != nil {
			removed.shutdown()
		}
	}
	return err
}

// renameTextPlain sends text/plain under the key "text", as execd does.
func renameTextPlain(data map[string]any) map[string]any {
	out := make(map[string]any, len(data))
	for k, v := range data {
		if k == "text/plain" {
			out["text"] = v
			continue
		}
		out[k] = v
	}
	return out
}

func (s *Server) handleInterruptCode(w http.ResponseWriter, r *http.Request) {
	id, ok := requiredQuery(w, r, "id")
	if !ok {
		return
	}
	c := s.code.get(id)
	if c == nil {
		writeError(w, http.StatusNotFound, CodeContextNotFound, "context not found: "+id)
		return
	}
	if c.shell != nil {
		c.shell.Interrupt()
	} else if err := c.kernel.Interrupt(r.Context()); err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntime, err.Error())
		return
	}
	w.WriteHeader(http.StatusOK)
}
