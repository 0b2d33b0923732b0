package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
)

// ErrKernelDied is returned by Execute when the kernel died or its socket closed during
// the execution.
var ErrKernelDied = errors.New("jupyter: kernel connection lost")

// Kernel is one running kernel with an open channels WebSocket.
type Kernel struct {
	ID      string
	Name    string
	server  *Server
	conn    *websocket.Conn
	session string

	execMu  sync.Mutex // one execution at a time, like a notebook
	mu      sync.Mutex
	pending map[string]*pendingReply
	closed  chan struct{}
	err     error
}

// pendingReply routes the messages answering one request. gone is closed when the
// requester stops listening, so that the read loop never blocks on an abandoned channel.
type pendingReply struct {
	ch   chan message
	gone chan struct{}
}

type header struct {
	MsgID    string `json:"msg_id"`
	MsgType  string `json:"msg_type"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	Version  string `json:"version"`
}

type message struct {
	Header       header          `json:"header"`
	ParentHeader header          `json:"parent_header"`
	Metadata     map[string]any  `json:"metadata"`
	Content      json.RawMessage `json:"content"`
	Channel      string          `json:"channel"`
	Buffers      []any           `json:"buffers"`
}

// StartKernel starts a kernel of the given spec with working directory cwd (absolute)
// and connects to it.
func (s *Server) StartKernel(ctx context.Context, name, cwd string) (*Kernel, error) {
	body := map[string]any{"name": name}
	if cwd != "" {
		// root_dir is "/", so the API path of a directory is its absolute path
		// without the leading slash.
		body["path"] = strings.TrimPrefix(cwd, "/")
	}
	var resp struct {
		ID string `json:"id"`
	}
	if err := s.do(ctx, http.MethodPost, "/api/kernels", body, &resp); err != nil {
		return nil, err
	}
	k := &Kernel{ID: resp.ID, Name: name, server: s, session: uuid.NewString(), pending: map[string]*pendingReply{}, closed: make(chan struct{})}
	wsURL := "ws" + strings.TrimPrefix(s.base, "http") + "/api/kernels/" + k.ID + "/channels?session_id=" + k.session
	conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"token " + s.token}},
		HTTPClient: s.client,
	})
	if err != nil {
		_ = s.do(context.Background(), http.MethodDelete, "/api/kernels/"+k.ID, nil, nil)
		return nil, fmt.Errorf("jupyter: connect kernel %s: %w", k.ID, err)
	}
	conn.SetReadLimit(64 << 20) // rich outputs (images) arrive as one message
	k.conn = conn
	go k.readLoop()
	// Wait until the kernel answers: the first execute would otherwise race its
	// startup.
	infoCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := k.kernelInfo(infoCtx); err != nil {
		k.Shutdown()
		return nil, fmt.Errorf("jupyter: kernel %s did not become ready: %w", k.ID, err)
	}
	return k, nil
}

func (k *Kernel) readLoop() {
	defer func() {
		k.mu.Lock()
		for id, p := range k.pending {
			close(p.ch)
			delete(k.pending, id)
		}
		k.mu.Unlock()
		close(k.closed)
	}()
	for {
		_, data, err := k.conn.Read(context.Background())
		if err != nil {
			k.mu.Lock()
			k.err = err
			k.mu.Unlock()
			return
		}
		var m message
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		k.mu.Lock()
		p := k.pending[m.ParentHeader.MsgID]
		k.mu.Unlock()
		if p != nil {
			// Blocking here is the backpressure of a slow client; an abandoned
			// request releases it.
			select {
			case p.ch <- m:
			case <-p.gone:
			}
		}
	}
}

func (k *Kernel) send(ctx context.Context, channel, msgType string, content any) (string, chan message, error) {
	id := uuid.NewString()
	ch := make(chan message, 1024)
	k.mu.Lock()
	select {
	case <-k.closed:
		k.mu.Unlock()
		return "", nil, ErrKernelDied
	default:
	}
	k.pending[id] = &pendingReply{ch: ch, gone: make(chan struct{})}
	k.mu.Unlock()
	m := map[string]any{
		"header": header{MsgID: id, MsgType: msgType, Session: k.session, Username: "sandgate",
			Date: time.Now().UTC().Format(time.RFC3339Nano), Version: "5.3"},
		"parent_header": map[string]any{},
		"metadata":      map[string]any{},
		"content":       content,
		"channel":       channel,
		"buffers":       []any{},
	}
	b, _ := json.Marshal(m)
	if err := k.conn.Write(ctx, websocket.MessageText, b); err != nil {
		k.forget(id)
		return "", nil, fmt.Errorf("%w: %v", ErrKernelDied, err)
	}
	return id, ch, nil
}

func (k *Kernel) forget(id string) {
	k.mu.Lock()
	if p := k.pending[id]; p != nil {
		close(p.gone)
		delete(k.pending, id)
	}
	k.mu.Unlock()
}

func (k *Kernel) kernelInfo(ctx context.Context) error {
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		id, ch, err := k.send(attemptCtx, "shell", "kernel_info_request", map[string]any{})
		if err != nil {
			cancel()
			return err
		}
		for done := false; !done; {
			select {
			case m, ok := <-ch:
				if !ok {
					cancel()
					return ErrKernelDied
				}
				if m.Header.MsgType == "kernel_info_reply" {
					cancel()
					k.forget(id)
					return nil
				}
			case <-attemptCtx.Done():
				done = true
			}
		}
		cancel()
		k.forget(id)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// Output is one piece of an execution's output, in arrival order.
type Output struct {
	// Kind is "stream", "execute_input", "execute_result", "display_data" or "error".
	Kind           string
	Stream         string // stdout or stderr, for Kind "stream"
	Text           string
	Data           map[string]any
	ExecutionCount int
	EName, EValue  string
	Traceback      []string
}

// Execute runs code and calls fn for each output until the kernel reports the
// execution finished. When ctx ends first, Execute returns ctx.Err() without waiting
// (the caller interrupts the kernel if the code should stop).
//
// Every cell is sent without stop_on_error: each run stands alone (one at a time,
// execMu), and a kernel told to stop on an error aborts the requests that reach it
// until its loop ends the abort, which can be the next run, sent the moment the
// failure was answered.
func (k *Kernel) Execute(ctx context.Context, code string, silent bool, fn func(Output)) error {
	k.execMu.Lock()
	defer k.execMu.Unlock()
	id, ch, err := k.send(ctx, "shell", "execute_request", map[string]any{
		"code": code, "silent": silent, "store_history": !silent,
		"user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": false,
	})
	if err != nil {
		return err
	}
	defer k.forget(id)
	gotReply, gotIdle := false, false
	for !(gotReply && gotIdle) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m, ok := <-ch:
			if !ok {
				return ErrKernelDied
			}
			switch m.Header.MsgType {
			case "execute_reply":
				gotReply = true
			case "status":
				var c struct {
					ExecutionState string `json:"execution_state"`
				}
				_ = json.Unmarshal(m.Content, &c)
				switch c.ExecutionState {
				case "idle":
					gotIdle = true
				case "dead":
					return ErrKernelDied
				}
			case "stream":
				var c struct {
					Name string `json:"name"`
					Text string `json:"text"`
				}
				_ = json.Unmarshal(m.Content, &c)
				fn(Output{Kind: "stream", Stream: c.Name, Text: c.Text})
			case "execute_input":
				var c struct {
					ExecutionCount int `json:"execution_count"`
				}
				_ = json.Unmarshal(m.Content, &c)
				fn(Output{Kind: "execute_input", ExecutionCount: c.ExecutionCount})
			case "execute_result", "display_data":
				var c struct {
					Data           map[string]any `json:"data"`
					ExecutionCount int            `json:"execution_count"`
				}
				_ = json.Unmarshal(m.Content, &c)
				fn(Output{Kind: m.Header.MsgType, Data: c.Data, ExecutionCount: c.ExecutionCount})
			case "error":
				var c struct {
					EName     string   `json:"ename"`
					EValue    string   `json:"evalue"`
					Traceback []string `json:"traceback"`
				}
				_ = json.Unmarshal(m.Content, &c)
				fn(Output{Kind: "error", EName: c.EName, EValue: c.EValue, Traceback: c.Traceback})
			}
		}
	}
	return nil
}

// Interrupt asks the kernel to interrupt the running cell (KeyboardInterrupt in Python).
func (k *Kernel) Interrupt(ctx context.Context) error {
	return k.server.do(ctx, http.MethodPost, "/api/kernels/"+k.ID+"/interrupt", nil, nil)
}

// Shutdown stops the kernel and closes its socket.
func (k *Kernel) Shutdown() {
	if k.conn != nil {
		k.conn.CloseNow()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = k.server.do(ctx, http.MethodDelete, "/api/kernels/"+k.ID, nil, nil)
}
