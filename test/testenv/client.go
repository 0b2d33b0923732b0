package testenv

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Response is a decoded API answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as an object and fails the test when it is not one.
func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response %d is not a JSON object: %v: %s", r.Status, err, r.Body)
	}
	return m
}

// Do sends an API request to addr with apiKey. body may be nil, []byte, a string or any
// JSON value; headers are name, value pairs, and an empty value removes the header.
func Do(t testing.TB, client *http.Client, addr, apiKey, method, path string, body any, headers ...string) Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		js, _ := json.Marshal(b)
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, "http://"+addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("OPEN-SANDBOX-API-KEY", apiKey)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}
