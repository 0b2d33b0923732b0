// Package agent is the HTTP API of the in-sandbox daemon (port 44772): commands,
// sessions, files, directories, metrics, PTYs, the port proxy and the code interpreter,
// wire-compatible with OpenSandbox's execd, plus sandgate's two warm-pool extensions
// (/sandgate/env and /sandgate/entrypoint) and the freeze of a sandbox whose runtime
// cannot pause it (/sandgate/freeze and /sandgate/thaw, freeze.go), and mounts E2B's
// envd protocol under /envd
// (package envd). It is plain net/http and owns every process it starts; the PID-1
// duties live in package initproc.
package agent

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/agentauth"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
	"github.com/sandgate/sandgate/sandbox-agent/envd"
	"github.com/sandgate/sandgate/sandbox-agent/procs"
	"github.com/sandgate/sandgate/sandbox-agent/ptyhub"
	"github.com/sandgate/sandgate/sandbox-agent/shellsession"
	"github.com/sandgate/sandgate/sandbox-agent/signedhttp"
)

// TokenHeader carries the access token on every request when one is configured.
const TokenHeader = agentproto.HeaderAgentToken

// Config configures a Server. The zero value is usable.
type Config struct {
	// Token, when set, authenticates every request: signed with it (package agentauth,
	// how the gateway calls; the answer is signed back), or carrying it in TokenHeader
	// (a direct caller on the host, such as an operator's curl).
	Token string
	// Env is the default environment of started processes; nil means a fresh scrubbed
	// copy of the agent's own environment.
	Env *procs.Environment
	// StateDir keeps background command output; empty means a directory under
	// os.TempDir().
	StateDir string
	// PingInterval is how long a stream may stay silent before a ping event is sent;
	// zero means 3 s (what execd does).
	PingInterval time.Duration
	// StartEntrypoint starts or replaces the sandbox's main process for
	// POST /sandgate/entrypoint; nil answers NOT_SUPPORTED.
	StartEntrypoint func(argv []string) error
	// SettleEntrypoint waits, at most window, until the started entrypoint is past its
	// start, or reports its exit (initproc.Supervisor.Settle); nil does not wait.
	SettleEntrypoint func(ctx context.Context, window time.Duration) (exited bool, code int)
	// Logger receives operational messages; nil means the standard logger.
	Logger *log.Logger
	// Envd configures the E2B envd API served under /envd (package envd); its Env is
	// the agent's.
	Envd envd.Config
	// Freezer stops and continues the sandbox's processes for POST /sandgate/freeze and
	// /sandgate/thaw (initproc.Freezer); nil answers NOT_SUPPORTED. Only an agent that is
	// PID 1 of its sandbox sets it.
	Freezer Freezer
	// JupyterProbe makes the agent answer the code-interpreter SDKs' readiness probe in
	// a sandbox with Jupyter (jupyterprobe.go). Only an agent that is its sandbox's own
	// sets it: the port is the sandbox's loopback one.
	JupyterProbe bool
}

// Server is the agent API. Create it with New and release it with Close.
type Server struct {
	cfg      Config
	env      *procs.Environment
	mux      *http.ServeMux
	logger   *log.Logger
	commands *commandRegistry
	sessions *registry[*shellsession.Session]
	ptys     *registry[*ptyhub.Session]
	code     *codeInterpreter
	metrics  *metricsSampler
	envd     *envd.Service
	// verifier checks signed requests (nil: no token, the API is open).
	verifier *signedhttp.Verifier

	// jupyterProbe is the readiness port's listener (nil: none).
	jupyterProbe *jupyterProbe

	// shellTraits enables running plain commands without the shell (directexec.go)
	// once probeDone is closed and the probe found what it needs.
	shellTraits traitsSlot
	probeDone   chan struct{}

	closeOnce sync.Once
}

// New builds a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Env == nil {
		cfg.Env = procs.NewEnvironment()
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 3 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = log.Default()
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(os.TempDir(), fmt.Sprintf("sandbox-agent-%d", os.Getpid()))
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("agent: create state dir: %w", err)
	}
	if cfg.Env.EnvFile() == "" {
		// The file is the agent user's own (0600 in a 0700 directory): a command run as
		// another uid cannot change what later commands of the default user get.
		envFile := filepath.Join(cfg.StateDir, "envs")
		f, err := os.OpenFile(envFile, os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, fmt.Errorf("agent: create environment file: %w", err)
		}
		f.Close()
		cfg.Env.SetEnvFile(envFile)
	}
	s := &Server{
		cfg:       cfg,
		env:       cfg.Env,
		mux:       http.NewServeMux(),
		logger:    cfg.Logger,
		metrics:   newMetricsSampler(),
		probeDone: make(chan struct{}),
	}
	if cfg.Token != "" {
		s.verifier = agentauth.NewVerifier(cfg.Token, time.Now())
	}
	s.commands = newCommandRegistry(s)
	s.sessions = newRegistry[*shellsession.Session]()
	s.ptys = newRegistry[*ptyhub.Session]()
	s.code = newCodeInterpreter(s)
	envdCfg := cfg.Envd
	envdCfg.Env = cfg.Env
	envdCfg.PlainCommand = s.plainCommand
	s.envd = envd.New(envdCfg)
	s.routes()
	if cfg.JupyterProbe {
		s.startJupyterProbe()
	}
	// Off the start's path: until the probe is done commands go through the shell.
	go func() {
		defer close(s.probeDone)
		s.setDirectExec(true)
		s.envd.WarmLoginShell()
	}()
	return s, nil
}

// Close stops every process the server started (commands, sessions, PTYs, kernels and
// the Jupyter server) and removes its state directory.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		<-s.probeDone
		s.closeJupyterProbe()
		s.code.close()
		_ = s.envd.Close()
		s.ptys.closeAll()
		s.sessions.closeAll()
		s.commands.closeAll()
		_ = os.RemoveAll(s.cfg.StateDir)
	})
	return nil
}

func (s *Server) routes() {
	m := s.mux
	m.HandleFunc("GET "+agentproto.PathPing, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })

	m.HandleFunc("POST /command", s.handleRunCommand)
	m.HandleFunc("DELETE /command", s.handleInterruptCommand)
	m.HandleFunc("GET /command/{a}/{b}", s.handleCommandQuery)

	m.HandleFunc("POST /session", s.handleCreateSession)
	m.HandleFunc("POST /session/{id}/run", s.handleRunInSession)
	m.HandleFunc("DELETE /session/{id}", s.handleDeleteSession)

	m.HandleFunc("POST /code/context", s.handleCreateContext)
	m.HandleFunc("GET /code/contexts", s.handleListContexts)
	m.HandleFunc("DELETE /code/contexts", s.handleDeleteContextsByLanguage)
	m.HandleFunc("GET /code/contexts/{id}", s.handleGetContext)
	m.HandleFunc("DELETE /code/contexts/{id}", s.handleDeleteContext)
	m.HandleFunc("POST /code", s.handleRunCode)
	m.HandleFunc("DELETE /code", s.handleInterruptCode)
	s.e2bCodeRoutes(m)

	// The file and directory routes, each also under identityPrefix (as a given user).
	for _, route := range []struct {
		method, path string
		h            http.HandlerFunc
	}{
		{"GET", "/files/info", s.handleFilesInfo},
		{"DELETE", "/files", s.handleRemoveFiles},
		{"POST", "/files/permissions", s.handlePermissions},
		{"POST", "/files/mv", s.handleMove},
		{"GET", "/files/search", s.handleSearch},
		{"POST", "/files/replace", s.handleReplace},
		{"POST", "/files/upload", s.handleUpload},
		{"GET", "/files/download", s.handleDownload},
		{"GET", "/directories/list", s.handleListDirectory},
		{"POST", "/directories", s.handleMakeDirs},
		{"DELETE", "/directories", s.handleRemoveDirs},
	} {
		m.HandleFunc(route.method+" "+route.path, route.h)
		m.HandleFunc(route.method+" "+identityPrefix+route.path, s.asIdentity(route.h))
	}

	m.HandleFunc("GET /metrics", s.handleMetrics)
	m.HandleFunc("GET /metrics/watch", s.handleWatchMetrics)

	m.HandleFunc("POST /pty", s.handleCreatePTY)
	m.HandleFunc("GET /pty/{id}", s.handleGetPTY)
	m.HandleFunc("DELETE /pty/{id}", s.handleDeletePTY)
	m.HandleFunc("GET /pty/{id}/ws", s.handlePTYSocket)

	m.HandleFunc("/proxy/{port}", s.handleProxy)
	m.HandleFunc("/proxy/{port}/{rest...}", s.handleProxy)

	m.Handle(agentproto.PathEnvdPrefix+"/", http.StripPrefix(agentproto.PathEnvdPrefix, s.envd))

	m.HandleFunc("GET "+agentproto.PathEnv, s.handleGetEnv)
	m.HandleFunc("PUT "+agentproto.PathEnv, s.handlePutEnv)
	m.HandleFunc("POST "+agentproto.PathEntrypoint, s.handleEntrypoint)
	m.HandleFunc("POST "+agentproto.PathFreeze, s.handleFreeze)
	m.HandleFunc("POST "+agentproto.PathThaw, s.handleThaw)

	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, CodeNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
}

// ServeHTTP authenticates the request, then routes it. A panic in a handler becomes a
// 500 with a JSON body instead of a dropped connection.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.logger.Printf("sandbox-agent: panic serving %s %s: %v\n%s", r.Method, r.URL.Path, v, debug.Stack())
			writeError(w, http.StatusInternalServerError, CodeRuntime, "internal error")
		}
	}()
	if s.cfg.Token != "" {
		if got := r.Header.Get(TokenHeader); got != "" && r.Header.Get(agentauth.Scheme.HeaderSignature) == "" {
			if subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) != 1 {
				writeError(w, http.StatusUnauthorized, CodeUnauthorized, "missing or invalid "+TokenHeader+" header")
				return
			}
		} else {
			nonce, err := s.verifier.Verify(r, nil, time.Now())
			if nonce != "" {
				// Every answer to a signed request is signed, refusals included.
				w = &signingWriter{ResponseWriter: w, token: s.cfg.Token, nonce: nonce}
			}
			if err != nil {
				writeError(w, http.StatusUnauthorized, CodeUnauthorized, "the request is not signed with this sandbox's key: "+err.Error())
				return
			}
			agentauth.StripRequest(r.Header)
		}
	}
	s.mux.ServeHTTP(w, r)
}

// signingWriter signs the answer to a signed request: the status and the request's
// nonce (agentauth.SignAnswer), in a header set as the status is written (101 for a
// WebSocket included). It passes Flush, Hijack and ReadFrom through.
type signingWriter struct {
	http.ResponseWriter
	token, nonce string
	wrote        bool
}

func (w *signingWriter) WriteHeader(status int) {
	if !w.wrote && (status >= 200 || status == http.StatusSwitchingProtocols) {
		w.wrote = true
		w.Header().Set(agentauth.Scheme.HeaderResponseSignature, agentauth.SignAnswer(w.token, w.nonce, status))
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *signingWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *signingWriter) ReadFrom(r io.Reader) (int64, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return io.Copy(w.ResponseWriter, r)
}

func (w *signingWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack takes the connection over for a protocol switch. A handler that hijacks
// without writing a status first (httputil.ReverseProxy relaying an upgrade) writes the
// 101 itself, with this writer's header: it is signed as a 101 here.
func (w *signingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if !w.wrote {
		w.wrote = true
		w.Header().Set(agentauth.Scheme.HeaderResponseSignature, agentauth.SignAnswer(w.token, w.nonce, http.StatusSwitchingProtocols))
	}
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *signingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type envRequest struct {
	Envs map[string]string `json:"envs"`
}

func (s *Server) handleGetEnv(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, envRequest{Envs: s.env.Extra()})
}

func (s *Server) handlePutEnv(w http.ResponseWriter, r *http.Request) {
	var req envRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	s.env.Set(req.Envs)
	writeJSON(w, http.StatusOK, envRequest{Envs: s.env.Extra()})
}

type entrypointRequest struct {
	Entrypoint []string `json:"entrypoint"`
	// StartedMarker, when set, is a file the agent creates (empty, read-only) once the
	// entrypoint has started: a runtime's evidence, readable without the agent, that a
	// create went all the way (the Docker runtime's start marker), written here rather
	// than by one more engine call.
	StartedMarker string `json:"startedMarker,omitempty"`
	// SettleMillis, when set, makes the answer wait until the entrypoint is past its
	// start (asleep waiting for something, or alive for this long) or has exited, so that
	// the caller learns of an entrypoint that exits at once without a settle of its own.
	SettleMillis int `json:"settleMillis,omitempty"`
}

// maxSettle bounds entrypointRequest.SettleMillis.
const maxSettle = 10 * time.Second

func (s *Server) handleEntrypoint(w http.ResponseWriter, r *http.Request) {
	var req entrypointRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if len(req.Entrypoint) == 0 || req.Entrypoint[0] == "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "entrypoint must be a non-empty array")
		return
	}
	if s.cfg.StartEntrypoint == nil {
		writeError(w, http.StatusNotImplemented, CodeNotSupported, "this agent does not manage an entrypoint")
		return
	}
	settle := time.Duration(req.SettleMillis) * time.Millisecond
	if req.SettleMillis < 0 || settle > maxSettle {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("settleMillis must be from 0 to %d", maxSettle.Milliseconds()))
		return
	}
	if err := s.cfg.StartEntrypoint(req.Entrypoint); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error())
		return
	}
	settled := false
	if settle > 0 && s.cfg.SettleEntrypoint != nil {
		if exited, code := s.cfg.SettleEntrypoint(r.Context(), settle); exited {
			// The agent ends with it (it is the container's main process); no start
			// marker: the sandbox did not start.
			writeJSON(w, http.StatusOK, map[string]any{"entrypoint": req.Entrypoint, "exited": true, "exitCode": code})
			return
		}
		settled = r.Context().Err() == nil
	}
	if req.StartedMarker != "" {
		if err := os.WriteFile(req.StartedMarker, nil, 0o444); err != nil {
			writeError(w, http.StatusInternalServerError, CodeRuntime, "entrypoint started; start marker not written: "+err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"entrypoint": req.Entrypoint, "settled": settled})
}

// ListenAndServe serves s on addr until ctx ends, then shuts down gracefully.
func ListenAndServe(ctx context.Context, addr string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return fmt.Errorf("agent: serve %s: %w", addr, err)
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		return nil
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeJSON reads a JSON body into v, answering 400 itself when it cannot.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	body := http.MaxBytesReader(w, r.Body, 16<<20)
	dec := json.NewDecoder(body)
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "invalid JSON body: "+err.Error())
		return false
	}
	// Read the body to its end: net/http watches for the client going away (and
	// cancels r.Context()) only once the request body is consumed, and streaming
	// handlers rely on that to stop work nobody listens to any more.
	_, _ = io.Copy(io.Discard, body)
	return true
}

func shellPath() string { return procs.Shell() }
