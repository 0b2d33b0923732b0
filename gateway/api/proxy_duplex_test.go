package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

// TestProxyStreamsWhileTheSandboxReads: a sandbox's server that answers before it has
// read the request's body, and streams back what it reads, gets the whole body through
// the gateway. The client sends the body's second half only once the answer has begun;
// a gateway that stops forwarding the body once the answer starts (net/http's server
// discards and closes an unread body when the head is written) leaves both sides
// waiting, and the echo is cut short.
func TestProxyStreamsWhileTheSandboxReads(t *testing.T) {
	f := startPreviewFixture(t)
	first, second := testenv.Halves()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	header := http.Header{"Content-Type": {"application/octet-stream"}}
	for k, v := range f.Header {
		header.Set(k, v)
	}
	status, got, err := testenv.PostAfterAnswer(ctx, fmt.Sprintf("%s/sandboxes/%s/proxy/%d/duplex", f.Gateway, f.ID, benchPreviewPort), header, first, second)
	if want := append(append([]byte{}, first...), second...); status != http.StatusOK || !bytes.Equal(got, want) {
		t.Fatalf("echo: status %d, %d of %d bytes (%v)", status, len(got), len(want), err)
	}
}
