package api

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/test/coredeps"
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

func TestPreviewCookieOrigin(t *testing.T) {
	d := coredeps.Start(t)
	svc := gateway.New(gateway.Config{PreviewDomain: "previews.test", PublicURL: "https://console.example"}, d.Store, d.Runtime, d.Policy, d.Log)
	h := New(svc, Options{Logger: d.Log})
	const (
		preview      = "a1b2-8000.previews.test:8443"
		otherPreview = "http://c3d4-8000.previews.test:8443"
		gatewayHost  = "10.0.0.5:8080"
	)
	tests := []struct {
		name, method, host    string
		origin, site, upgrade string
		admitted              bool
	}{
		{"host mode: a GET from any page", "GET", preview, otherPreview, "same-site", "", true},
		{"host mode: a HEAD from any page", "HEAD", preview, otherPreview, "same-site", "", true},
		{"host mode: a POST from the preview's own page", "POST", preview, "http://" + preview, "same-origin", "", true},
		{"host mode: a POST the browser calls same-origin", "POST", preview, "", "same-origin", "", true},
		{"host mode: a POST with the preview's Origin, no Fetch Metadata", "POST", preview, "http://" + preview, "", "", true},
		{"host mode: a POST from another preview", "POST", preview, otherPreview, "same-site", "", false},
		{"host mode: a POST from another preview, no Fetch Metadata", "POST", preview, otherPreview, "", "", false},
		{"host mode: a POST the browser calls same-site, whatever its Origin", "POST", preview, "http://" + preview, "same-site", "", false},
		{"host mode: a POST from an opaque origin", "POST", preview, "null", "", "", false},
		{"host mode: a POST from the console's origin", "POST", preview, "https://console.example", "", "", false},
		{"host mode: a POST saying nothing of where it comes from", "POST", preview, "", "", "", false},
		{"host mode: a PUT from another site", "PUT", preview, "http://evil.example", "cross-site", "", false},
		{"host mode: a DELETE from another preview", "DELETE", preview, otherPreview, "same-site", "", false},
		{"host mode: an OPTIONS with the cookie from another preview", "OPTIONS", preview, otherPreview, "same-site", "", false},
		{"host mode: a WebSocket from the preview's own page", "GET", preview, "http://" + preview, "same-origin", "websocket", true},
		{"host mode: a WebSocket from another preview", "GET", preview, otherPreview, "same-site", "websocket", false},
		{"host mode: a WebSocket without an Origin", "GET", preview, "", "same-origin", "websocket", false},
		{"path mode: a POST from the gateway's origin", "POST", gatewayHost, "http://" + gatewayHost, "same-origin", "", true},
		{"path mode: a POST from the public URL's origin", "POST", gatewayHost, "https://console.example", "", "", true},
		{"path mode: a POST from a preview", "POST", gatewayHost, otherPreview, "cross-site", "", false},
		{"path mode: a POST from an opaque origin", "POST", gatewayHost, "null", "cross-site", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, "http://"+tt.host+"/note", nil)
			for k, v := range map[string]string{"Origin": tt.origin, "Sec-Fetch-Site": tt.site, "Upgrade": tt.upgrade} {
				if v != "" {
					r.Header.Set(k, v)
				}
			}
			err := h.previewCookieOrigin(r)
			if got := err == nil; got != tt.admitted {
				t.Fatalf("admitted = %v (%v), want %v", got, err, tt.admitted)
			}
			if err != nil {
				if e, ok := gateway.AsError(err); !ok || e.Code != gateway.CodeOriginRefused || e.Kind != gateway.KindForbidden {
					t.Fatalf("refusal %v, want 403 %s", err, gateway.CodeOriginRefused)
				}
			}
		})
	}
}
