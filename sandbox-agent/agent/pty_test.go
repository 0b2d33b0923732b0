package agent_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandgate/sandgate/sandbox-agent/agent"
)

// ptyClient is one WebSocket attached to a terminal.
type ptyClient struct {
	t      testing.TB
	conn   *websocket.Conn
	offset int64 // absolute offset of the next output byte
	out    bytes.Buffer
	replay []byte
}

func dialPTY(t testing.TB, a *testAgent, id, query string) (*ptyClient, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(a.srv.URL, "http") + "/pty/" + id + "/ws" + query
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{agent.TokenHeader: {testToken}}})
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { conn.CloseNow() })
	c := &ptyClient{t: t, conn: conn}
	typ, msg, err := conn.Read(ctx)
	if err != nil || typ != websocket.MessageBinary || len(msg) < 9 || msg[0] != 0x03 {
		t.Fatalf("first frame: type %v len %d err %v, want a replay frame", typ, len(msg), err)
	}
	c.offset = int64(binary.BigEndian.Uint64(msg[1:9]))
	c.replay = append([]byte(nil), msg[9:]...)
	c.out.Write(c.replay)
	c.offset += int64(len(c.replay))
	return c, resp, nil
}

func (c *ptyClient) send(s string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageBinary, append([]byte{0x00}, s...)); err != nil {
		c.t.Fatalf("write stdin: %v", err)
	}
}

func (c *ptyClient) control(v any) {
	c.t.Helper()
	b, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, b); err != nil {
		c.t.Fatalf("write control: %v", err)
	}
}

// waitFor reads output until it contains want.
func (c *ptyClient) waitFor(want string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !strings.Contains(c.out.String(), want) {
		typ, msg, err := c.conn.Read(ctx)
		if err != nil {
			c.t.Fatalf("waiting for %q: %v; output so far %q", want, err, c.out.String())
		}
		if typ == websocket.MessageBinary && len(msg) > 0 && msg[0] == 0x01 {
			c.out.Write(msg[1:])
			c.offset += int64(len(msg) - 1)
		}
	}
}

func createPTY(t testing.TB, a *testAgent, body any) string {
	t.Helper()
	var resp struct {
		SessionID string `json:"session_id"`
	}
	a.mustJSON(http.MethodPost, "/pty", body, 200, &resp)
	return resp.SessionID
}

func TestPTY(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	dir := t.TempDir()
	id := createPTY(t, a, map[string]any{"cwd": dir})

	c1, _, err := dialPTY(t, a, id, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("type a command", func(t *testing.T) {
		c1.t = t
		c1.send("echo hi-$((40+2))\r")
		c1.waitFor("hi-42")
		c1.send("pwd\r")
		c1.waitFor(dir)
	})
	t.Run("resize", func(t *testing.T) {
		c1.t = t
		c1.control(map[string]any{"type": "resize", "cols": 123, "rows": 45})
		c1.send("stty size\r")
		c1.waitFor("45 123")
		var st struct {
			Cols, Rows int
			Running    bool
			Attached   bool
		}
		a.with(t).mustJSON(http.MethodGet, "/pty/"+id, nil, 200, &st)
		if st.Cols != 123 || st.Rows != 45 || !st.Running || !st.Attached {
			t.Fatalf("status %+v", st)
		}
	})
	t.Run("signal", func(t *testing.T) {
		c1.t = t
		c1.send("sleep 100\r")
		time.Sleep(200 * time.Millisecond)
		c1.control(map[string]any{"type": "signal", "signal": "SIGINT"})
		c1.send("echo after-$((1+1))\r")
		c1.waitFor("after-2")
	})
	var seen int64
	t.Run("second client needs takeover", func(t *testing.T) {
		_, resp, err := dialPTY(t, a, id, "")
		if err == nil || resp == nil || resp.StatusCode != http.StatusConflict {
			t.Fatalf("second attach: err %v resp %v, want 409", err, resp)
		}
		seen = c1.offset
	})
	t.Run("takeover and replay", func(t *testing.T) {
		c1.t = t
		c1.send("echo marker-$((2*3))\r")
		c1.waitFor("marker-6")
		// Reconnect from an earlier offset: the replay holds exactly what followed it.
		c2, _, err := dialPTY(t, a, id, "?takeover=1&since="+itoa(seen))
		if err != nil {
			t.Fatal(err)
		}
		full := c1.out.String()
		if want := full[seen:]; !strings.HasPrefix(string(c2.replay), want) {
			t.Fatalf("replay %q does not start with %q", c2.replay, want)
		}
		if !strings.Contains(string(c2.replay), "marker-6") {
			t.Fatalf("replay %q misses the output after the offset", c2.replay)
		}
		// The displaced client is closed with the takeover status.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for {
			_, _, err := c1.conn.Read(ctx)
			if err != nil {
				if websocket.CloseStatus(err) != 4001 {
					t.Fatalf("first client closed with %v, want 4001", err)
				}
				break
			}
		}
		c2.t = t
		c2.send("echo from-c2\r")
		c2.waitFor("from-c2")
		// A reconnect without since gets the kept output from its start.
		c2.conn.Close(websocket.StatusNormalClosure, "")
		time.Sleep(100 * time.Millisecond)
		c3, _, err := dialPTY(t, a, id, "")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(c3.replay), "hi-42") || !strings.Contains(string(c3.replay), "from-c2") {
			t.Fatalf("full replay %q", c3.replay)
		}
		// Exit: the client gets an exit message and a normal close.
		c3.t = t
		c3.send("exit 3\r")
		ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel2()
		var exitMsg struct {
			Type     string
			ExitCode int `json:"exit_code"`
		}
		for {
			typ, msg, err := c3.conn.Read(ctx2)
			if err != nil {
				if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
					t.Fatalf("close after exit: %v", err)
				}
				break
			}
			if typ == websocket.MessageText {
				_ = json.Unmarshal(msg, &exitMsg)
			}
		}
		if exitMsg.Type != "exit" || exitMsg.ExitCode != 3 {
			t.Fatalf("exit message %+v", exitMsg)
		}
		var st struct {
			Running  bool
			ExitCode *int `json:"exit_code"`
		}
		a.with(t).mustJSON(http.MethodGet, "/pty/"+id, nil, 200, &st)
		if st.Running || st.ExitCode == nil || *st.ExitCode != 3 {
			t.Fatalf("status after exit %+v", st)
		}
	})
	t.Run("command and delete", func(t *testing.T) {
		a := a.with(t)
		id := createPTY(t, a, map[string]any{"command": "echo from-command; sleep 100"})
		c, _, err := dialPTY(t, a, id, "")
		if err != nil {
			t.Fatal(err)
		}
		c.t = t
		c.waitFor("from-command")
		a.mustJSON(http.MethodDelete, "/pty/"+id, nil, 200, nil)
		a.wantError(http.MethodGet, "/pty/"+id, nil, 404, agent.CodeNotFound)
		a.wantError(http.MethodDelete, "/pty/"+id, nil, 404, agent.CodeNotFound)
		a.wantError(http.MethodPost, "/pty", map[string]any{"cwd": "/no/such"}, 404, agent.CodeFileNotFound)
		_, resp, err := dialPTY(t, a, "nope", "")
		if err == nil || resp.StatusCode != 404 {
			t.Fatalf("dial unknown: %v", err)
		}
	})
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
