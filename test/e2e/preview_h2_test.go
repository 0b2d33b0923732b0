package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestPreviewWebSocketOverHTTP2 opens a WebSocket to a sandbox's port as an HTTP/2 stream
// (RFC 8441 extended CONNECT over h2c): the gateway must advertise the extension, check
// the credential as for any request, and carry frames both ways through the stream.
func TestPreviewWebSocketOverHTTP2(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{})
	startPreviewServer(t, g, id)

	// h2c with prior knowledge: every request is HTTP/2. x/net's transport, because
	// net/http's refuses the :protocol pseudo-header in a request.
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	url := fmt.Sprintf("http://%s/v1/sandboxes/%s/proxy/%d/ws", g.Addr, id, previewPort)

	connect := func(headers map[string]string) (*http.Response, *io.PipeWriter) {
		t.Helper()
		pr, pw := io.Pipe()
		req, err := http.NewRequest(http.MethodConnect, url, pr)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(":protocol", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("extended CONNECT: %v", err)
		}
		if resp.ProtoMajor != 2 {
			t.Fatalf("answered over HTTP/%d, want 2", resp.ProtoMajor)
		}
		return resp, pw
	}

	// Without a credential the stream is refused like any other request.
	resp, pw := connect(nil)
	pw.Close()
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a key: status %d, want 401", resp.StatusCode)
	}

	// A console session is no credential on a preview route, whatever the Origin: a
	// page the sandbox serves would otherwise act with it.
	r := g.do("POST", "/v1/session", map[string]any{"apiKey": g.APIKey})
	var session string
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		if c.Name == "sandgate_session" {
			session = c.Value
		}
	}
	if r.Status != 200 || session == "" {
		t.Fatalf("sign-in: %d %s", r.Status, r.Body)
	}
	cookie := "sandgate_session=" + session
	for _, origin := range []string{"http://evil.example", "http://" + g.Addr} {
		resp, pw = connect(map[string]string{"Cookie": cookie, "Origin": origin})
		pw.Close()
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("session from %s: status %d, want 401", origin, resp.StatusCode)
		}
	}

	resp, pw = connect(map[string]string{"OPEN-SANDBOX-API-KEY": g.APIKey})
	defer resp.Body.Close()
	defer pw.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("with the owner's key: status %d %s, want 200", resp.StatusCode, b)
	}
	for _, msg := range []string{"hello over h2", string(bytes.Repeat([]byte("y"), 70000))} {
		if _, err := pw.Write(clientFrame(0x1, []byte(msg))); err != nil {
			t.Fatal(err)
		}
		op, got, err := readFrame(resp.Body)
		if err != nil || op != 0x1 || string(got) != msg {
			t.Fatalf("echo of %d bytes: opcode %d, %d bytes, %v", len(msg), op, len(got), err)
		}
	}
	if _, err := pw.Write(clientFrame(0x8, nil)); err != nil {
		t.Fatal(err)
	}
	if op, _, err := readFrame(resp.Body); err != nil || op != 0x8 {
		t.Fatalf("close: opcode %d, %v", op, err)
	}
}

// clientFrame encodes one final, masked WebSocket frame (clients must mask, RFC 6455 §5.3).
func clientFrame(opcode byte, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteByte(0x80 | opcode)
	switch n := len(payload); {
	case n < 126:
		b.WriteByte(0x80 | byte(n))
	case n < 1<<16:
		b.WriteByte(0x80 | 126)
		_ = binary.Write(&b, binary.BigEndian, uint16(n))
	default:
		b.WriteByte(0x80 | 127)
		_ = binary.Write(&b, binary.BigEndian, uint64(n))
	}
	mask := make([]byte, 4)
	_, _ = rand.Read(mask)
	b.Write(mask)
	for i, c := range payload {
		b.WriteByte(c ^ mask[i%4])
	}
	return b.Bytes()
}

// readFrame reads one unmasked server frame.
func readFrame(r io.Reader) (opcode byte, payload []byte, err error) {
	head := make([]byte, 2)
	if _, err = io.ReadFull(r, head); err != nil {
		return 0, nil, err
	}
	n := uint64(head[1] & 0x7f)
	switch n {
	case 126:
		var v uint16
		err = binary.Read(r, binary.BigEndian, &v)
		n = uint64(v)
	case 127:
		err = binary.Read(r, binary.BigEndian, &n)
	}
	if err != nil {
		return 0, nil, err
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(r, payload)
	return head[0] & 0x0f, payload, err
}
