package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestSplitProxyPath(t *testing.T) {
	const id = "3c63fa8e-57f2-454d-931d-46cb9f42c09c"
	tests := []struct {
		name, escaped, id, port string
		prefix, rest            string
		ok                      bool
	}{
		{"bare", "/sandboxes/" + id + "/proxy/8000", id, "8000", "/sandboxes/" + id + "/proxy/8000", "", true},
		{"rest", "/sandboxes/" + id + "/proxy/8000/a/b%2Fc", id, "8000", "/sandboxes/" + id + "/proxy/8000", "/a/b%2Fc", true},
		{"v1", "/v1/sandboxes/" + id + "/proxy/44772/ping", id, "44772", "/v1/sandboxes/" + id + "/proxy/44772", "/ping", true},
		{"escaped id", "/sandboxes/%33" + id[1:] + "/proxy/8000/x", id, "8000", "", "", false},
		{"escaped port", "/sandboxes/" + id + "/proxy/800%30/x", id, "8000", "", "", false},
		{"escaped literal", "/sandboxes/" + id + "/%70roxy/8000/x", id, "8000", "", "", false},
		{"too short", "/sandboxes/" + id, id, "8000", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix, rest, err := splitProxyPath(tt.escaped, tt.id, tt.port)
			if (err == nil) != tt.ok || prefix != tt.prefix || rest != tt.rest {
				t.Fatalf("splitProxyPath(%q) = %q, %q, %v", tt.escaped, prefix, rest, err)
			}
		})
	}
}

// TestProxyPathRouteAgreesWithMux: every path proxyPathRoute takes, the mux routes to
// the same path-mode route with the same id and port; the paths it leaves alone the
// mux still routes (or refuses) as before.
func TestProxyPathRouteAgreesWithMux(t *testing.T) {
	mux := http.NewServeMux()
	for _, p := range []string{proxyPattern, proxyPatternRest, proxyPatternV1, proxyPatternV1Rest} {
		mux.HandleFunc(p, func(http.ResponseWriter, *http.Request) {})
	}
	matched := 0
	for _, target := range []string{
		"/sandboxes/abc/proxy/8000", "/sandboxes/abc/proxy/8000/", "/sandboxes/abc/proxy/8000/a/b?x=1",
		"/v1/sandboxes/abc/proxy/8000", "/v1/sandboxes/abc/proxy/8000/index.html",
		"/sandboxes/abc/proxy/8000//x", "/sandboxes/abc/proxy/8000/./x", "/sandboxes/abc/proxy/8000/../x",
		"/sandboxes/abc/proxy/8000/x/..", "/sandboxes//proxy/8000", "/sandboxes/abc/proxy/", "/sandboxes/abc/proxy",
		"/sandboxes/a%2Fb/proxy/8000", "/sandboxes/abc/proxy%2F8000/x", "/sandboxes/%61bc/proxy/8000",
		"/sandboxes/abc/proxy/8000/a%2Fb", "/v1/sandboxes/abc/other/8000", "/v2/sandboxes/abc/proxy/8000",
		"/sandboxes/abc/proxy/80%2000/x", "/sandboxes/a%20b/proxy/8000", "/sandboxes/watch/proxy/1",
	} {
		r := httptest.NewRequest("GET", target, nil)
		id, port, pattern, ok := proxyPathRoute(r)
		_, muxPattern := mux.Handler(r)
		if !ok {
			continue
		}
		matched++
		if pattern != muxPattern {
			t.Errorf("%s: pattern %q, the mux %q", target, pattern, muxPattern)
			continue
		}
		r.Pattern = ""
		mux.ServeHTTP(httptest.NewRecorder(), r)
		if r.PathValue("id") != id || r.PathValue("port") != port {
			t.Errorf("%s: id %q port %q, the mux %q %q", target, id, port, r.PathValue("id"), r.PathValue("port"))
		}
	}
	if matched != 8 {
		t.Errorf("%d paths taken without the mux, want 8", matched)
	}
}
