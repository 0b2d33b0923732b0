package agent

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/shellsession"
)

// startShell starts a persistent shell in cwd with the default environment.
func (s *Server) startShell(cwd string) (*shellsession.Session, error) {
	if cwd != "" {
		fi, err := os.Stat(cwd)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			return nil, &os.PathError{Op: "chdir", Path: cwd, Err: errNotDir}
		}
	}
	return shellsession.Start(cwd, s.env.Build(nil))
}

var errNotDir = errors.New("not a directory")

type createSessionRequest struct {
	Cwd string `json:"cwd,omitempty"`
}

func (s *Server) handleCreateSession(w http.ResponseWriter, r *http.Request) {
	var req createSessionRequest
	// The body is optional: an empty POST creates a session in the agent's directory.
	if r.ContentLength != 0 {
		if !decodeJSON(w, r, &req) {
			return
		}
	}
	sess, err := s.startShell(req.Cwd)
	if err != nil {
		writeFSError(w, err)
		return
	}
	id := s.sessions.add(sess)
	writeJSON(w, http.StatusOK, map[string]string{"session_id": id})
}

type runInSessionRequest struct {
	Command string `json:"command"`
	Cwd     string `json:"cwd,omitempty"`
	Timeout int64  `json:"timeout,omitempty"`
}

func (s *Server) handleRunInSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sess := s.sessions.get(id)
	if sess == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "session not found: "+id)
		return
	}
	var req runInSessionRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if req.Command == "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "command is required")
		return
	}
	stream := newEventStream(w)
	_ = stream.send(Event{Type: EventInit, Text: id}, true)
	s.runShell(r.Context(), stream, sess, req.Command, req.Cwd, time.Duration(req.Timeout)*time.Millisecond)
	if !sess.Alive() {
		// The run ended the shell (for example with `exit`): forget the session.
		s.sessions.remove(id)
	}
}

// runShell streams one run of a persistent shell as execution events.
func (s *Server) runShell(ctx context.Context, stream *eventStream, sess *shellsession.Session, script, cwd string, timeout time.Duration) {
	stopPing := make(chan struct{})
	go stream.keepAlive(s.cfg.PingInterval, stopPing)
	started := time.Now()
	res, err := sess.Run(ctx, script, cwd, timeout, func(name, line string, flush bool) error {
		return stream.send(Event{Type: name, Text: line}, flush)
	})
	close(stopPing)
	elapsed := time.Since(started).Milliseconds()
	switch {
	case err != nil:
		_ = stream.send(Event{Type: EventErr, ExecutionTime: elapsed, Error: &EventError{
			EName: "CommandExecError", EValue: strconv.Itoa(res.ExitCode), Traceback: []string{"the shell session ended: " + err.Error()},
		}}, true)
	case res.TimedOut:
		_ = stream.send(Event{Type: EventErr, ExecutionTime: elapsed, Error: &EventError{
			EName: "CommandExecError", EValue: strconv.Itoa(res.ExitCode), Traceback: []string{"command timed out after " + timeout.String()},
		}}, true)
	case res.ExitCode != 0:
		_ = stream.send(Event{Type: EventErr, ExecutionTime: elapsed, Error: &EventError{
			EName: "CommandExecError", EValue: strconv.Itoa(res.ExitCode), Traceback: []string{},
		}}, true)
	default:
		_ = stream.send(Event{Type: EventComplete, ExecutionTime: elapsed}, true)
	}
}

func (s *Server) handleDeleteSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sess := s.sessions.remove(id)
	if sess == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "session not found: "+id)
		return
	}
	sess.Close()
	w.WriteHeader(http.StatusOK)
}
