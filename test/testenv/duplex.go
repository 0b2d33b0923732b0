package testenv

import (
	"bytes"
	"context"
	"io"
	"net/http"
)

// PostAfterAnswer posts first, then second once the answer's head has come, as one
// streamed body to url, and reads the whole answer: a client of a server that answers
// before it has read the request (a stream both ways over HTTP/1.1). A proxy that stops
// forwarding a body once the answer begins never lets the answer come: ctx's end then
// ends the request, and the error says the head never came.
func PostAfterAnswer(ctx context.Context, url string, header http.Header, first, second []byte) (status int, answer []byte, err error) {
	body, send := io.Pipe()
	answered := make(chan struct{})
	go func() {
		if _, err := send.Write(first); err != nil {
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
	req, err := http.NewRequestWithContext(ctx, "POST", url, body)
	if err != nil {
		return 0, nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	close(answered)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, err = io.ReadAll(resp.Body)
	return resp.StatusCode, answer, err
}

// Halves are the two parts PostAfterAnswer sends in the tests that use it: 32 KiB each,
// told apart by case.
func Halves() (first, second []byte) {
	first = bytes.Repeat([]byte("0123456789abcdef"), 2<<10)
	return first, bytes.ToUpper(first)
}
