package api

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func TestConfineToOpaqueOrigin(t *testing.T) {
	const prefix = "/sandboxes/x/proxy/8000/"
	tests := []struct {
		name     string
		upstream http.Header
		cookies  []string // Set-Cookie lines left, in order
	}{
		{"no cookies", http.Header{}, nil},
		{"the app's own cookie is scoped to the preview", http.Header{"Set-Cookie": {"app=1; Path=/"}}, []string{"app=1; Path=" + prefix}},
		{"a cookie already below the prefix stays", http.Header{"Set-Cookie": {"app=1; Path=" + prefix + "sub"}}, []string{"app=1; Path=" + prefix + "sub"}},
		{"the gateway's cookie names are dropped", http.Header{"Set-Cookie": {"sandgate_session=evil; Path=/v1", "SANDGATE_preview=x", "ok=1"}}, []string{"ok=1; Path=" + prefix}},
		{"a cookie for a domain is dropped", http.Header{"Set-Cookie": {"d=1; Domain=example.com"}}, nil},
		{"a __Host- cookie is dropped", http.Header{"Set-Cookie": {"__Host-x=1; Path=/; Secure"}}, nil},
		{"Clear-Site-Data is dropped", http.Header{"Clear-Site-Data": {`"cookies"`}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			w := confineToOpaqueOrigin(rec, prefix)
			for k, vs := range tt.upstream {
				for _, v := range vs {
					w.Header().Add(k, v)
				}
			}
			w.Header().Set("Content-Security-Policy", "default-src 'self'") // an upstream's own
			w.WriteHeader(200)
			got := rec.Result().Header
			if !slices.Contains(got.Values("Content-Security-Policy"), sandboxCSP) {
				t.Errorf("CSP = %q, want %q among them", got.Values("Content-Security-Policy"), sandboxCSP)
			}
			if strings.Contains(sandboxCSP, "allow-same-origin") {
				t.Errorf("the CSP grants the gateway's origin")
			}
			if got.Get("Clear-Site-Data") != "" {
				t.Errorf("Clear-Site-Data passed")
			}
			if c := got.Values("Set-Cookie"); !slices.Equal(c, tt.cookies) {
				t.Errorf("Set-Cookie = %q, want %q", c, tt.cookies)
			}
		})
	}
}

func TestCutPathToken(t *testing.T) {
	for _, tt := range []struct{ rest, token, after string }{
		{"/_sandgate/k1.123.mac/app.js", "k1.123.mac", "/app.js"},
		{"/_sandgate/k1.123.mac", "k1.123.mac", "/"},
		{"/_sandgate//x", "", "/_sandgate//x"},
		{"/app/_sandgate/t/x", "", "/app/_sandgate/t/x"},
		{"/", "", "/"},
	} {
		tok, after, ok := cutPathToken(tt.rest)
		if tok != tt.token || after != tt.after || ok != (tt.token != "") {
			t.Errorf("cutPathToken(%q) = %q, %q, %v; want %q, %q", tt.rest, tok, after, ok, tt.token, tt.after)
		}
	}
}
