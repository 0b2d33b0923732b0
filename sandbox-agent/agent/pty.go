package agent

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/sandgate/sandgate/sandbox-agent/ptyhub"
)

// PTY WebSocket frame prefixes (binary frames).
const (
	ptyFrameStdin  = 0x00
	ptyFrameStdout = 0x01
	// 0x02 (stderr) is part of the framing but never sent: on a terminal, stdout and
	// stderr are the same device.
	ptyFrameReplay = 0x03
)

// wsStatusTakenOver closes a PTY socket whose terminal another client took over.
const wsStatusTakenOver websocket.StatusCode = 4001

type createPTYRequest struct {
	Cwd     string `json:"cwd,omitempty"`
	Command string `json:"command,omitempty"`
	Cols    uint16 `json:"cols,omitempty"`
	Rows    uint16 `json:"rows,omitempty"`
}

type ptyStatus struct {
	SessionID string `json:"session_id"`
	Running   bool   `json:"running"`
	ExitCode  *int   `json:"exit_code,omitempty"`
	Offset    int64  `json:"output_offset"`
	Cols      uint16 `json:"cols"`
	Rows      uint16 `json:"rows"`
	Attached  bool   `json:"attached"`
}

func (s *Server) handleCreatePTY(w http.ResponseWriter, r *http.Request) {
	var req createPTYRequest
	if r.ContentLength != 0 {
		if !decodeJSON(w, r, &req) {
			return
		}
	}
	if req.Cwd != "" {
		fi, err := os.Stat(req.Cwd)
		if err != nil {
			writeFSError(w, err)
			return
		}
		if !fi.IsDir() {
			writeError(w, http.StatusBadRequest, CodeNotADirectory, req.Cwd+" is not a directory")
			return
		}
	}
	opt := ptyhub.Options{Dir: req.Cwd, Env: s.env.Build(nil), Cols: req.Cols, Rows: req.Rows}
	if strings.TrimSpace(req.Command) != "" {
		opt.Argv = []string{shellPath(), "-c", req.Command}
	}
	sess, err := ptyhub.Start(opt)
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntime, err.Error())
		return
	}
	id := s.ptys.add(sess)
	writeJSON(w, http.StatusOK, map[string]string{"session_id": id})
}

func (s *Server) handleGetPTY(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sess := s.ptys.get(id)
	if sess == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "pty session not found: "+id)
		return
	}
	st := sess.Status()
	out := ptyStatus{SessionID: id, Running: st.Running, Offset: st.Offset, Cols: st.Cols, Rows: st.Rows, Attached: st.Attached}
	if !st.Running {
		out.ExitCode = &st.ExitCode
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleDeletePTY(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sess := s.ptys.remove(id)
	if sess == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "pty session not found: "+id)
		return
	}
	sess.Close()
	w.WriteHeader(http.StatusOK)
}

type ptyControl struct {
	Type   string `json:"type"`
	Cols   uint16 `json:"cols,omitempty"`
	Rows   uint16 `json:"rows,omitempty"`
	Signal string `json:"signal,omitempty"`
}

var signalsByName = map[string]syscall.Signal{
	"SIGINT": syscall.SIGINT, "SIGTERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL,
	"SIGHUP": syscall.SIGHUP, "SIGQUIT": syscall.SIGQUIT, "SIGTSTP": syscall.SIGTSTP,
	"SIGCONT": syscall.SIGCONT, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2,
	"SIGWINCH": syscall.SIGWINCH,
}

// handlePTYSocket attaches a WebSocket client to a terminal: first a replay frame with
// the output since ?since= (default: all that is kept), then live output; input and
// control frames go the other way. ?takeover=1 displaces an attached client.
func (s *Server) handlePTYSocket(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sess := s.ptys.get(id)
	if sess == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "pty session not found: "+id)
		return
	}
	var since int64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, "since must be a non-negative byte offset")
			return
		}
		since = n
	}
	takeover := r.URL.Query().Get("takeover")
	client, replay, off, err := sess.Attach(since, takeover == "1" || takeover == "true")
	if errors.Is(err, ptyhub.ErrBusy) {
		writeError(w, http.StatusConflict, CodeConflict, "another client is attached to this terminal; reconnect with takeover=1")
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntime, err.Error())
		return
	}
	// The token (checked in ServeHTTP) is the access control; browsers reach the agent
	// only through the gateway, which checks origins itself.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		sess.Detach(client)
		return
	}
	conn.SetReadLimit(1 << 20)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer sess.Detach(client)

	frame := make([]byte, 9+len(replay))
	frame[0] = ptyFrameReplay
	binary.BigEndian.PutUint64(frame[1:9], uint64(off))
	copy(frame[9:], replay)
	if err := conn.Write(ctx, websocket.MessageBinary, frame); err != nil {
		conn.CloseNow()
		return
	}

	go s.ptyInput(ctx, cancel, conn, sess)

	for {
		select {
		case chunk, ok := <-client.Output:
			if !ok {
				s.closePTYSocket(conn, sess, client.Reason())
				return
			}
			msg := make([]byte, 1+len(chunk))
			msg[0] = ptyFrameStdout
			copy(msg[1:], chunk)
			if err := conn.Write(ctx, websocket.MessageBinary, msg); err != nil {
				conn.CloseNow()
				return
			}
		case <-ctx.Done():
			conn.CloseNow()
			return
		}
	}
}

func (s *Server) closePTYSocket(conn *websocket.Conn, sess *ptyhub.Session, reason string) {
	switch reason {
	case "exited":
		st := sess.Status()
		msg, _ := json.Marshal(map[string]any{"type": "exit", "exit_code": st.ExitCode})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = conn.Write(ctx, websocket.MessageText, msg)
		cancel()
		conn.Close(websocket.StatusNormalClosure, "process exited")
	case "takeover":
		conn.Close(wsStatusTakenOver, "taken over by another client")
	case "slow":
		conn.Close(websocket.StatusTryAgainLater, "client too slow; reconnect with since=")
	default:
		conn.Close(websocket.StatusNormalClosure, "")
	}
}

// ptyInput reads client frames: stdin bytes and JSON control messages.
func (s *Server) ptyInput(ctx context.Context, cancel context.CancelFunc, conn *websocket.Conn, sess *ptyhub.Session) {
	defer cancel()
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return
		}
		switch typ {
		case websocket.MessageBinary:
			if len(data) == 0 || data[0] != ptyFrameStdin {
				continue
			}
			if err := sess.Write(data[1:]); err != nil {
				return
			}
		case websocket.MessageText:
			var c ptyControl
			if json.Unmarshal(data, &c) != nil {
				continue
			}
			switch c.Type {
			case "resize":
				_ = sess.Resize(c.Cols, c.Rows)
			case "signal":
				name := strings.ToUpper(c.Signal)
				if !strings.HasPrefix(name, "SIG") {
					name = "SIG" + name
				}
				if sig, ok := signalsByName[name]; ok {
					_ = sess.Signal(sig)
				}
			}
		}
	}
}
