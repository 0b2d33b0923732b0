package egress

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/egress/egressauth"
	"github.com/sandgate/sandgate/sandbox-agent/egress/vaultca"
)

// vaultTestSecret is the credential the vault tests bind; vaultTestFake the token the
// workload sends itself.
const (
	vaultTestSecret = "s3cret-netns-token"
	vaultTestFake   = "fake-token-in-sandbox"
)

func authDigest(auth string) string {
	return fmt.Sprintf("authorization-sha256=%x", sha256.Sum256([]byte(auth)))
}

// upstreamTLS starts, in the server namespace, an HTTPS server on port 443 of every
// address answering as echoServer does, with a certificate for hosts from a CA of the
// test's own; it returns that CA in PEM (the enforcer's upstream roots).
func (top *topology) upstreamTLS(tb testing.TB, hosts ...string) []byte {
	tb.Helper()
	caPEM, caKeyPEM, err := vaultca.New("upstream", time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	caPair, err := tls.X509KeyPair(caPEM, caKeyPEM)
	if err != nil {
		tb.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caPair.Certificate[0])
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: hosts[0]}, DNSNames: hosts,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, &key.PublicKey, caPair.PrivateKey)
	if err != nil {
		tb.Fatal(err)
	}
	var ln net.Listener
	if err := inNetns(top.server, func() error {
		var err error
		ln, err = net.Listen("tcp", ":443")
		return err
	}); err != nil {
		tb.Fatalf("listen on 443 in %s: %v", top.server, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(echoServer), TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
	}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	tb.Cleanup(func() { _ = srv.Close() })
	return caPEM
}

// callVault sends a signed request to the enforcer's vault API and returns its status
// and body.
func (top *topology) callVault(tb testing.TB, method, body string) (int, string) {
	tb.Helper()
	req, err := http.NewRequest(method, "http://"+sandboxIP+":18080/credential-vault", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	egressauth.Sign(req, testToken, []byte(body), time.Now())
	resp, err := top.apiClient().Do(req)
	if err != nil {
		tb.Fatalf("%s /credential-vault: %v", method, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// workloadRequest is one request the workload sends to addr (ip:port) without asking
// DNS, as `curl --resolve` does: over TLS with the server name sni when sni is set
// (verified against roots, or not at all when roots is nil), in plain HTTP otherwise.
type workloadRequest struct {
	addr, sni, host, target string
	roots                   *x509.CertPool
}

// workloadAnswer is what the workload got: the status and body, and the issuer of the
// certificate it was shown over TLS.
type workloadAnswer struct {
	status int
	body   string
	issuer string
}

func (top *topology) send(tb testing.TB, r workloadRequest) (workloadAnswer, error) {
	tb.Helper()
	var conn net.Conn
	if err := inNetns(top.sandbox, func() error {
		var err error
		conn, err = net.DialTimeout("tcp", r.addr, 2*time.Second)
		return err
	}); err != nil {
		return workloadAnswer{}, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var ans workloadAnswer
	if r.sni != "" {
		tc := tls.Client(conn, &tls.Config{ServerName: r.sni, RootCAs: r.roots, InsecureSkipVerify: r.roots == nil, NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			return workloadAnswer{}, fmt.Errorf("TLS handshake: %w", err)
		}
		if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 {
			ans.issuer = certs[0].Issuer.CommonName
		}
		conn = tc
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", r.target, r.host, vaultTestFake); err != nil {
		return workloadAnswer{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return workloadAnswer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	ans.status, ans.body = resp.StatusCode, string(b)
	return ans, nil
}

// TestVaultInterceptionInNetns runs the enforcer with the credential proxy against
// servers of the server namespace (HTTP on 80, HTTPS on 443): a binding of allowed.test
// for https and plain http under /api/ injects on both schemes, also when the workload
// never asked DNS and connects to the host's address directly (`curl --resolve`), since
// the enforcer resolves bound hosts itself and intercepts by address; a connection to
// that address under another server name or Host gets nothing, a request outside
// /api/ gets nothing, and a path an upstream may normalise into another is refused on
// plain http as on https. A bound host the egress policy denies stays unreachable: the
// enforcer resolves only names the policy allows.
func TestVaultInterceptionInNetns(t *testing.T) {
	top := newTopology(t)
	upstreamCA := top.upstreamTLS(t, "allowed.test", "short.test")
	caPEM, caKeyPEM, err := vaultca.New("netns", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sandboxRoots := x509.NewCertPool()
	sandboxRoots.AppendCertsFromPEM(caPEM)
	sandboxCA, _ := pem.Decode(caPEM)
	sandboxCert, _ := x509.ParseCertificate(sandboxCA.Bytes)

	policy := `{"defaultAction":"deny","egress":[{"action":"allow","target":"allowed.test"},{"action":"allow","target":"short.test"},{"action":"allow","target":"*.example.test"}]}`
	top.startEnforcer(t, []string{
		EnvToken + "=" + testToken, EnvPolicy + "=" + policy,
		EnvVaultCACert + "=" + string(caPEM), EnvVaultCAKey + "=" + string(caKeyPEM), EnvVaultUpstreamCA + "=" + string(upstreamCA),
	}, "--credential-proxy", "--min-ttl", "1s")

	vault, _ := json.Marshal(map[string]any{
		"credentials": []any{map[string]any{"name": "tok", "source": map[string]any{"type": "inline", "value": vaultTestSecret}}},
		"bindings": []any{
			map[string]any{"name": "api", "match": map[string]any{"schemes": []string{"https", "http"}, "ports": []int{443, 80}, "hosts": []string{"allowed.test"}, "paths": []string{"/api/*"}},
				"auth": map[string]any{"type": "bearer", "credential": "tok"}},
			map[string]any{"name": "short", "match": map[string]any{"schemes": []string{"http"}, "hosts": []string{"short.test"}},
				"auth": map[string]any{"type": "bearer", "credential": "tok"}},
			// The gateway's vault policy refuses a host the egress denies; the enforcer
			// must not make one reachable by resolving it either.
			map[string]any{"name": "denied", "match": map[string]any{"schemes": []string{"http"}, "hosts": []string{"denied.test"}},
				"auth": map[string]any{"type": "bearer", "credential": "tok"}},
		},
	})
	if code, body := top.callVault(t, "POST", string(vault)); code != http.StatusCreated {
		t.Fatalf("POST /credential-vault: %d %s", code, body)
	}
	injected, untouched := authDigest("Bearer "+vaultTestSecret), authDigest("Bearer "+vaultTestFake)

	// The workload asks no DNS before these: every connection is pinned by address.
	for _, tt := range []struct {
		name   string
		req    workloadRequest
		status int
		want   string // in the body
		issuer string // of the certificate the workload is shown, when set
	}{
		{"pinned https to the bound host is injected", workloadRequest{addr: allowedIP + ":443", sni: "allowed.test", host: "allowed.test", target: "/api/models", roots: sandboxRoots}, 200, injected, sandboxCert.Subject.CommonName},
		{"pinned http to the bound host is injected", workloadRequest{addr: allowedIP + ":80", host: "allowed.test", target: "/api/models"}, 200, injected, ""},
		{"pinned https under another server name is spliced", workloadRequest{addr: allowedIP + ":443", sni: "a.example.test", host: "a.example.test", target: "/api/models"}, 200, untouched, "sandgate credential vault upstream"},
		{"pinned http under another Host is untouched", workloadRequest{addr: allowedIP + ":80", host: "a.example.test", target: "/api/models"}, 200, untouched, ""},
		{"pinned http under a bound Host of another address is refused", workloadRequest{addr: allowedIP + ":80", host: "short.test", target: "/"}, 403, CodeVaultHostMismatch, ""},
		{"https Host other than the server name is refused", workloadRequest{addr: allowedIP + ":443", sni: "allowed.test", host: "a.example.test", target: "/api/models", roots: sandboxRoots}, 421, CodeVaultHostMismatch, ""},
		{"http outside the bound paths is untouched", workloadRequest{addr: allowedIP + ":80", host: "allowed.test", target: "/other"}, 200, untouched, ""},
		{"http dot segments are refused", workloadRequest{addr: allowedIP + ":80", host: "allowed.test", target: "/api/../debug"}, 400, CodeVaultAmbiguousPath, ""},
		{"http encoded dots are refused", workloadRequest{addr: allowedIP + ":80", host: "allowed.test", target: "/api/%2e%2e/debug"}, 400, CodeVaultAmbiguousPath, ""},
		{"http encoded slashes are refused", workloadRequest{addr: allowedIP + ":80", host: "allowed.test", target: "/api%2f..%2fdebug"}, 400, CodeVaultAmbiguousPath, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ans, err := top.send(t, tt.req)
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			if ans.status != tt.status || !strings.Contains(ans.body, tt.want) {
				t.Fatalf("answer %d %q, want %d with %q", ans.status, ans.body, tt.status, tt.want)
			}
			if strings.Contains(ans.body, vaultTestSecret) {
				t.Fatalf("the workload got the secret: %q", ans.body)
			}
			if tt.issuer != "" && !strings.HasPrefix(ans.issuer, tt.issuer) {
				t.Fatalf("certificate issued by %q, want %q", ans.issuer, tt.issuer)
			}
		})
	}

	t.Run("a bound host the policy denies is not resolved for the workload", func(t *testing.T) {
		if ans, err := top.send(t, workloadRequest{addr: deniedIP + ":80", host: "denied.test", target: "/"}); !isTimeoutOrRefused(err) {
			t.Fatalf("pinned http to denied.test: %+v %v, want the connection dropped", ans, err)
		}
	})

	t.Run("http after a DNS lookup is injected", func(t *testing.T) {
		if ip, _ := top.resolve(t, "allowed.test"); ip != allowedIP {
			t.Fatalf("allowed.test = %q", ip)
		}
		ans, err := top.send(t, workloadRequest{addr: allowedIP + ":80", host: "allowed.test", target: "/api/x"})
		if err != nil || ans.status != 200 || !strings.Contains(ans.body, injected) {
			t.Fatalf("answer %+v %v, want the credential upstream", ans, err)
		}
	})

	t.Run("the enforcer's own resolution is refreshed", func(t *testing.T) {
		// short.test is answered with a 1s TTL: its first pin has expired by now.
		time.Sleep(2500 * time.Millisecond)
		ans, err := top.send(t, workloadRequest{addr: shortIP + ":80", host: "short.test", target: "/"})
		if err != nil || ans.status != 200 || !strings.Contains(ans.body, injected) {
			t.Fatalf("answer %+v %v, want the credential upstream", ans, err)
		}
	})
}
