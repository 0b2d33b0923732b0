package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestMCPRefusalsAreJSON: what the MCP handler refuses (a wrong Content-Type or Accept,
// a body that is not JSON-RPC, a GET with no session) answers the gateway's
// {code, message}, as every other route does, not plain text.
func TestMCPRefusalsAreJSON(t *testing.T) {
	srv := newTestAPI(t)
	for _, tt := range []struct {
		name, method, contentType, accept, body string
		status                                  int
		code                                    string
	}{
		{"wrong content type", "POST", "text/plain", "application/json, text/event-stream", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, 415, "MCP::UNSUPPORTED_MEDIA_TYPE"},
		{"not JSON-RPC", "POST", "application/json", "application/json, text/event-stream", `{not json`, 400, "MCP::INVALID_REQUEST"},
		{"no accepted answer type", "POST", "application/json", "text/html", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, 400, "MCP::INVALID_REQUEST"},
		{"GET without a session", "GET", "", "text/event-stream", "", 405, "METHOD_NOT_ALLOWED"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+"/mcp", strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer admin-key")
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			req.Header.Set("Accept", tt.accept)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct{ Code, Message string }
			decodeErr := json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != tt.status || decodeErr != nil || body.Code != tt.code || body.Message == "" ||
				resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %q %+v (%v), want %d %s as JSON", resp.StatusCode, resp.Header.Get("Content-Type"), body, decodeErr, tt.status, tt.code)
			}
		})
	}
	t.Run("a good call still answers", func(t *testing.T) {
		req, _ := http.NewRequest("POST", srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Authorization", "Bearer admin-key")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("tools/list: %d", resp.StatusCode)
		}
	})
}
