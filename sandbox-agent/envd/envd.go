// Package envd serves E2B's in-sandbox daemon protocol ("envd") from the sandbox agent,
// so that the published e2b SDKs run commands and use files in a sandgate sandbox
// unchanged: the Connect services process.Process and filesystem.Filesystem (JSON or
// binary codec, unary and streaming) and the plain HTTP routes GET /health and
// GET|POST /files. The agent mounts the Service under /envd on its authenticated
// listener; E2B's X-Access-Token is the gateway's to check, never the agent's.
//
// Users are the sandbox's own (its passwd and group files): a request acts as the
// user named by `Authorization: Basic base64("name:")` (the /files routes: the
// `username` query parameter), else as the default user `user`, else, in an image
// without one, as the agent's own user. Processes run as that user; relative paths
// resolve against its home. File operations run as the agent, as envd's do, and what
// they create is given to the user.
package envd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/sandgate/sandgate/sandbox-agent/envd/spec/filesystem/filesystemconnect"
	"github.com/sandgate/sandgate/sandbox-agent/envd/spec/process/processconnect"
	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

// Config configures a Service. The zero value is usable.
type Config struct {
	// Env is the default environment of started processes (the agent's); nil means a
	// fresh scrubbed copy of the agent's own environment.
	Env *procs.Environment
	// PasswdFile and GroupFile are the sandbox's user and group databases; empty means
	// /etc/passwd and /etc/group.
	PasswdFile, GroupFile string
	// DefaultUser is the user of a request that names none; empty means "user", E2B's.
	DefaultUser string
	// PlainCommand, when set, reads a bash script as one plain program invocation whose
	// program is looked up in pathList, so that `bash -l -c script` can run the
	// program directly (loginshell.go); ok false means bash might do anything else.
	// Nil runs every script through bash.
	PlainCommand func(script, pathList string) (cmd PlainCommand, ok bool)
}

// Service is the envd API. Create it with New and release it with Close.
type Service struct {
	cfg       Config
	mux       *http.ServeMux
	processes *processTable
	watchers  *watcherTable
	logins    loginProbes
	accounts  accountCache

	closeOnce sync.Once
}

// maxMessageBytes bounds one Connect message (SendInput's data among them).
const maxMessageBytes = 32 << 20

// New builds a Service.
func New(cfg Config) *Service {
	if cfg.Env == nil {
		cfg.Env = procs.NewEnvironment()
	}
	if cfg.PasswdFile == "" {
		cfg.PasswdFile = "/etc/passwd"
	}
	if cfg.GroupFile == "" {
		cfg.GroupFile = "/etc/group"
	}
	if cfg.DefaultUser == "" {
		cfg.DefaultUser = "user"
	}
	s := &Service{cfg: cfg, mux: http.NewServeMux(), processes: newProcessTable(), watchers: newWatcherTable()}
	s.logins.files.etc = "/etc"
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(maxMessageBytes)}
	s.mux.Handle(processconnect.NewProcessHandler(processService{s},
		append(opts, connect.WithCodec(jsonCodec{"json"}), connect.WithCodec(jsonCodec{"json; charset=utf-8"}))...))
	s.mux.Handle(filesystemconnect.NewFilesystemHandler(filesystemService{s}, opts...))
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	s.mux.HandleFunc("GET /files", s.handleDownload)
	s.mux.HandleFunc("POST /files", s.handleUpload)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeHTTPError(w, http.StatusNotFound, "no such envd endpoint: "+r.Method+" "+r.URL.Path)
	})
	return s
}

// ServeHTTP serves the envd routes, relative to where the Service is mounted.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == processconnect.ProcessStartProcedure || r.URL.Path == processconnect.ProcessConnectProcedure {
		sw := &streamWriter{ResponseWriter: w}
		r = r.WithContext(context.WithValue(r.Context(), streamWriterKey{}, sw))
		w = sw
	}
	s.mux.ServeHTTP(w, r)
}

// streamWriter is the response of a process stream. Connect flushes every message it
// sends, and the end of the stream too; once the process's end event is on its way the
// handler returns right after, and net/http writes what is left together with the end
// of the response: one write where the flushes would make three.
type streamWriter struct {
	http.ResponseWriter
	// finishing is set before the stream's last event: no flush from then on.
	finishing bool
}

type streamWriterKey struct{}

// finishStream tells the response of ctx's process stream that what comes next is the
// last of it.
func finishStream(ctx context.Context) {
	if sw, ok := ctx.Value(streamWriterKey{}).(*streamWriter); ok {
		sw.finishing = true
	}
}

func (w *streamWriter) Flush() {
	if !w.finishing {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Close kills every process the Service started and stops every watcher.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		s.watchers.closeAll()
		s.processes.killAll()
	})
	return nil
}

// connectError maps an error of a file system call to its Connect code, keeping the
// message.
func connectError(err error) *connect.Error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	code := connect.CodeInternal
	switch {
	case errors.Is(err, errUnknownUser), errors.Is(err, errBadAuthorization):
		code = connect.CodeInvalidArgument
	case errors.Is(err, fs.ErrNotExist):
		code = connect.CodeNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		code = connect.CodePermissionDenied
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTEMPTY):
		code = connect.CodeAlreadyExists
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ELOOP),
		errors.Is(err, syscall.EINVAL):
		code = connect.CodeInvalidArgument
	case errors.Is(err, syscall.ENOSPC):
		code = connect.CodeResourceExhausted
	}
	return connect.NewError(code, err)
}

// invalidArgument is a caller mistake.
func invalidArgument(format string, args ...any) *connect.Error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

// keepaliveInterval is how long a stream may stay silent before a keepalive message,
// from the Keepalive-Ping-Interval request header (seconds); 0 means none.
func keepaliveInterval(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval"))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// keepalive is a timer for stream keepalives that never fires when the interval is 0.
type keepalive struct {
	interval time.Duration
	timer    *time.Timer
}

func newKeepalive(interval time.Duration) *keepalive {
	k := &keepalive{interval: interval}
	if interval > 0 {
		k.timer = time.NewTimer(interval)
	}
	return k
}

// C fires when the stream has been silent for the interval.
func (k *keepalive) C() <-chan time.Time {
	if k.timer == nil {
		return nil
	}
	return k.timer.C
}

// reset restarts the silence count after a message.
func (k *keepalive) reset() {
	if k.timer != nil {
		k.timer.Reset(k.interval)
	}
}

func (k *keepalive) stop() {
	if k.timer != nil {
		k.timer.Stop()
	}
}
