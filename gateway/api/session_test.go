package api

import (
	"net/http/httptest"
	"testing"
)

func TestSameOrigin(t *testing.T) {
	tests := []struct {
		host, origin string
		want         bool
		public       string
	}{
		{"10.0.0.5:8080", "https://console.example", true, "console.example"},
		{"10.0.0.5:8080", "https://other.example", false, "console.example"},
		{"gw.example", "file://gw.example", false, ""},
		{"gw.example:8080", "http://gw.example:8080", true, ""},
		{"gw.example", "https://gw.example:443", true, ""},
		{"gw.example", "http://gw.example:80", true, ""},
		{"GW.example", "http://gw.EXAMPLE", true, ""},
		{"gw.example", "", false, ""},
		{"gw.example", "null", false, ""},
		{"gw.example", "http://evil.example", false, ""},
		{"gw.example:8080", "http://gw.example:8081", false, ""},
		{"gw.example", "http://gw.example.evil.example", false, ""},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "http://"+tt.host+"/v1/sandboxes/x/proxy/44772/pty/1/ws", nil)
		if tt.origin != "" {
			r.Header.Set("Origin", tt.origin)
		}
		if got := sameOrigin(r, tt.public); got != tt.want {
			t.Errorf("Host %q Origin %q: sameOrigin = %v, want %v", tt.host, tt.origin, got, tt.want)
		}
	}
}

func TestShadowsWildcard(t *testing.T) {
	routes := (&Handler{}).routes()
	for path, want := range map[string]bool{
		"/sandboxes/watch": true,
		"/sandboxes/{id}":  false,
		"/sandboxes":       false,
		"/events/stream":   false,
		"/policy/validate": false,
	} {
		if got := shadowsWildcard(path, routes); got != want {
			t.Errorf("shadowsWildcard(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestLocalRedirectPath(t *testing.T) {
	for in, want := range map[string]string{
		"/":                    "/",
		"/app/x":               "/app/x",
		"//evil.example/":      "/evil.example/",
		"///evil.example":      "/evil.example",
		"/\\evil.example":      "/evil.example",
		"/sandboxes/a/proxy/8": "/sandboxes/a/proxy/8",
		"":                     "/",
	} {
		if got := localRedirectPath(in); got != want {
			t.Errorf("localRedirectPath(%q) = %q, want %q", in, got, want)
		}
	}
}
