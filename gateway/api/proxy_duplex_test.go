package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestProxyStreamsWhileTheSandboxReads: a sandbox's server that answers before it has
// read the request's body, and streams back what it reads, gets the whole body through
// the gateway. The client sends the body's second half only once the answer has begun;
// a gateway that stops forwarding the body once the answer starts (net/http's server
// discards and closes an unread body when the head is written) leaves both sides
// waiting, and the echo is cut short.
func TestProxyStreamsWhileTheSandboxReads(t *testing.T) {
	f := startPreviewFixture(t)
	half := bytes.Repeat([]byte("0123456789abcdef"), 2<<10) // 32 KiB
	second := bytes.ToUpper(half)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	body, send := io.Pipe()
	answered := make(chan struct{})
	req, _ := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("%s/sandboxes/%s/proxy/%d/duplex", f.Gateway, f.ID, benchPreviewPort), body)
	for k, v := range f.Header {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	go func() {
		if _, err := send.Write(half); err != nil {
			return
		}
		select {
		case <-answered:
		case <-ctx.Done():
			_ = send.CloseWithError(ctx.Err()) // the transport waits for its body to end
			return
		}
		_, _ = send.Write(second)
		_ = send.Close()
	}()
	resp, err := http.DefaultClient.Do(req)
	close(answered)
	if err != nil {
		t.Fatalf("the answer's head never came: %v", err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if want := append(append([]byte{}, half...), second...); resp.StatusCode != http.StatusOK || !bytes.Equal(got, want) {
		t.Fatalf("echo: status %d, %d of %d bytes (%v)", resp.StatusCode, len(got), len(want), err)
	}
}
