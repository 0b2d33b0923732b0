package sandgate

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/coder/websocket"
)

// PTYRequest starts an interactive terminal in a sandbox.
type PTYRequest struct {
	Command    string `json:"command,omitempty"` // default: the sandbox's login shell
	Cwd        string `json:"cwd,omitempty"`
	Cols, Rows uint16 `json:"-"`
}

// Terminal is an attached PTY: Read returns what the terminal prints (stdout and
// stderr interleaved, as a terminal shows them), Write types. It behaves like a
// net.Conn without addresses or deadlines; cancel the context given to OpenPTY to
// abandon a blocked Read.
type Terminal struct {
	ID string

	conn    *websocket.Conn
	ctx     context.Context
	mu      sync.Mutex // one writer at a time
	pending []byte
	exit    *int
	rerr    error
}

// OpenPTY starts a terminal and attaches to it.
func (a *Agent) OpenPTY(ctx context.Context, req PTYRequest) (*Terminal, error) {
	body := map[string]any{}
	if req.Command != "" {
		body["command"] = req.Command
	}
	if req.Cwd != "" {
		body["cwd"] = req.Cwd
	}
	if req.Cols > 0 && req.Rows > 0 {
		body["cols"], body["rows"] = req.Cols, req.Rows
	}
	var out struct {
		ID string `json:"session_id"`
	}
	if err := a.do(ctx, http.MethodPost, "/pty", nil, body, &out); err != nil {
		return nil, err
	}
	return a.AttachPTY(ctx, out.ID, false)
}

// AttachPTY attaches to an existing terminal; takeover detaches another client.
func (a *Agent) AttachPTY(ctx context.Context, id string, takeover bool) (*Terminal, error) {
	u := strings.Replace(a.base, "http", "ws", 1) + "/pty/" + id + "/ws"
	if takeover {
		u += "?takeover=1"
	}
	h := http.Header{}
	for k, v := range a.headers {
		h.Set(k, v)
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h, HTTPClient: a.c.http})
	if err != nil {
		if resp != nil && resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusSwitchingProtocols {
			if resp.Body != nil {
				return nil, errorFrom(resp)
			}
		}
		return nil, fmt.Errorf("sandgate: attach terminal %s: %w", id, err)
	}
	conn.SetReadLimit(16 << 20)
	return &Terminal{ID: id, conn: conn, ctx: ctx}, nil
}

// Read reads terminal output. It returns io.EOF once the process exited (ExitCode
// then tells its code).
func (t *Terminal) Read(p []byte) (int, error) {
	for len(t.pending) == 0 {
		if t.rerr != nil {
			return 0, t.rerr
		}
		typ, data, err := t.conn.Read(t.ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure || t.exit != nil {
				t.rerr = io.EOF
			} else {
				t.rerr = err
			}
			continue
		}
		if typ == websocket.MessageText {
			var msg struct {
				Type     string `json:"type"`
				ExitCode *int   `json:"exit_code"`
			}
			if json.Unmarshal(data, &msg) == nil && msg.Type == "exit" {
				code := -1
				if msg.ExitCode != nil {
					code = *msg.ExitCode
				}
				t.exit = &code
			}
			continue
		}
		if len(data) == 0 {
			continue
		}
		switch data[0] {
		case 0x01, 0x02:
			t.pending = data[1:]
		case 0x03:
			if len(data) >= 9 {
				_ = binary.BigEndian.Uint64(data[1:9])
				t.pending = data[9:]
			}
		}
	}
	n := copy(p, t.pending)
	t.pending = t.pending[n:]
	return n, nil
}

// Write types p into the terminal.
func (t *Terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	msg := make([]byte, 1+len(p))
	copy(msg[1:], p)
	if err := t.conn.Write(t.ctx, websocket.MessageBinary, msg); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (t *Terminal) control(v any) error {
	data, _ := json.Marshal(v)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conn.Write(t.ctx, websocket.MessageText, data)
}

// Resize sets the terminal's size.
func (t *Terminal) Resize(cols, rows uint16) error {
	return t.control(map[string]any{"type": "resize", "cols": cols, "rows": rows})
}

// Signal sends a signal ("SIGINT", "SIGTERM", …) to the terminal's process.
func (t *Terminal) Signal(sig string) error {
	return t.control(map[string]any{"type": "signal", "signal": sig})
}

// ExitCode is the process's exit code once Read returned io.EOF; ok is false before.
func (t *Terminal) ExitCode() (code int, ok bool) {
	if t.exit == nil {
		return 0, false
	}
	return *t.exit, true
}

// Close detaches; the terminal keeps running (DeletePTY ends it).
func (t *Terminal) Close() error {
	return t.conn.Close(websocket.StatusNormalClosure, "")
}

// DeletePTY ends a terminal and its process.
func (a *Agent) DeletePTY(ctx context.Context, id string) error {
	return a.do(ctx, http.MethodDelete, "/pty/"+id, nil, nil, nil)
}
