package agent

import (
	"context"
	"errors"
	"net/http"

	"github.com/sandgate/sandgate/sandbox-agent/initproc"
)

// Freezer stops and continues the sandbox's processes (initproc.Freezer).
type Freezer interface {
	Freeze(ctx context.Context) (int, error)
	Thaw() (int, error)
}

// handleFreeze stops every process of the sandbox but the agent: the gateway's pause
// on a runtime without one of its own. The answer says how many processes are held.
func (s *Server) handleFreeze(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Freezer == nil {
		writeError(w, http.StatusNotImplemented, CodeNotSupported, "this agent cannot freeze its sandbox")
		return
	}
	n, err := s.cfg.Freezer.Freeze(r.Context())
	if errors.Is(err, initproc.ErrStillStarting) {
		writeError(w, http.StatusConflict, CodeInvalidRequest, err.Error())
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntime, "freeze: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"frozen": n})
}

// handleThaw continues the processes a freeze stopped.
func (s *Server) handleThaw(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Freezer == nil {
		writeError(w, http.StatusNotImplemented, CodeNotSupported, "this agent cannot freeze its sandbox")
		return
	}
	n, err := s.cfg.Freezer.Thaw()
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntime, "thaw: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"thawed": n})
}
