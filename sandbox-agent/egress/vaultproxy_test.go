package egress

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

// TestVaultProxyRefusesWithoutDialing: the proxy's own refusals, which come before any
// upstream connection (so the destination below is never dialled): a request that two
// bindings match (the API refuses to create such a pair; this is the second line), and
// a Host header that is not the TLS server name.
func TestVaultProxyRefusesWithoutDialing(t *testing.T) {
	enf := &enforcer{vaultPort: DefaultVaultPort, pins: map[netip.Addr]*pinned{}}
	two := &vaultState{Revision: 1, Credentials: []storedCredential{{Name: "tok", Value: "s3cret", Revision: 1}}}
	for _, name := range []string{"first", "second"} {
		b, err := normalizeBinding(bearer(name, "api.test", "/v1/*"))
		if err != nil {
			t.Fatal(err)
		}
		two.Bindings = append(two.Bindings, storedBinding{Binding: b, Revision: 1})
	}
	enf.vault.Store(two)
	p := &vaultProxy{enf: enf, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	dst := netip.MustParseAddrPort("127.0.0.1:443") // loopback; never dialled on these paths
	for _, tt := range []struct {
		name, host string
		status     int
		code       string
	}{
		{"two bindings match", "api.test", http.StatusForbidden, CodeVaultAmbiguous},
		{"Host is not the server name", "other.test", http.StatusMisdirectedRequest, CodeVaultHostMismatch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "https://"+tt.host+"/v1/models", nil)
			req.Host = tt.host
			rec := httptest.NewRecorder()
			p.forward(rec, req, "https", "api.test", dst)
			var e apiError
			_ = json.Unmarshal(rec.Body.Bytes(), &e)
			if rec.Code != tt.status || e.Code != tt.code {
				t.Fatalf("answer %d %s, want %d %s", rec.Code, rec.Body, tt.status, tt.code)
			}
		})
	}
}
