package k8s_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/runtimes"
	sgk8s "github.com/sandgate/sandgate/runtimes/kubernetes"
)

// vaultEchoName is the echo server's name in the test's DNS zone, and vaultEchoPort its
// HTTPS port (a sandbox's workload holds no capability to bind a port below 1024).
const (
	vaultEchoName = "echo.vault.test"
	vaultEchoPort = 8443
)

// vaultEchoScript is an HTTPS server that answers every request with the SHA-256 of
// the Authorization header it received, on $PORT, with the certificate and key in
// $CERT_B64 and $KEY_B64.
const vaultEchoScript = `import http.server, ssl, json, hashlib, os, base64
open('/tmp/c.pem', 'wb').write(base64.b64decode(os.environ['CERT_B64']))
open('/tmp/k.pem', 'wb').write(base64.b64decode(os.environ['KEY_B64']))
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def do_GET(self):
        auth = self.headers.get('Authorization', '')
        body = json.dumps({'path': self.path, 'auth': hashlib.sha256(auth.encode()).hexdigest()}).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain('/tmp/c.pem', '/tmp/k.pem')
srv = http.server.ThreadingHTTPServer(('0.0.0.0', int(os.environ['PORT'])), H)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
`

// upstreamCA is a CA of the test's own and a server certificate for host it signed.
type upstreamCA struct {
	caPEM, certPEM, keyPEM []byte
	pool                   *x509.CertPool
}

func newUpstreamCA(t *testing.T, host string) *upstreamCA {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandgate test/k8s upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &upstreamCA{
		caPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		pool:    pool,
	}
}

// TestRealNodeCredentialVault runs the credential vault on the real node. The upstream
// is an HTTPS echo server in a sandbox of its own (a pod on the node's bridge), with a
// certificate from a CA of the test's that the gateway gives the vault as its upstream
// roots; echo.vault.test leads to it through a DNS server the test runs on the host's
// bridge address (SANDGATE_SANDBOX_DNS). The vault sandbox's trust init container
// writes the system bundle with the vault's CA appended, which the workload sees
// mounted over its own; a request the workload makes with a fake token, verifying TLS
// against that bundle, reaches the echo server with the real credential in its
// Authorization header; a path no binding names keeps the fake one; and the workload
// finds the real credential nowhere it can read.
func TestRealNodeCredentialVault(t *testing.T) {
	agentImage := requireRealNode(t)
	ns := realNodeNamespace(t)
	ctx := context.Background()
	zone := startZoneServer(t, realNode.hostIP)
	ca := newUpstreamCA(t, vaultEchoName)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, ca.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, ns, "SANDGATE_K8S_AGENT_IMAGE="+agentImage, "SANDGATE_SANDBOX_DNS="+realNode.hostIP, "SANDGATE_VAULT_UPSTREAM_CA="+caFile)

	echo := g.createSandbox(smallSandbox(map[string]any{
		"entrypoint": []string{"python3", "-c", vaultEchoScript},
		"env": map[string]string{"PORT": strconv.Itoa(vaultEchoPort),
			"CERT_B64": base64.StdEncoding.EncodeToString(ca.certPEM), "KEY_B64": base64.StdEncoding.EncodeToString(ca.keyPEM)},
	}))
	echoPod, err := kube.CoreV1().Pods(ns).Get(ctx, sgk8s.PodName(echo), metav1.GetOptions{})
	if err != nil || echoPod.Status.PodIP == "" {
		t.Fatalf("the echo server's pod IP: %v", err)
	}
	zone.set(vaultEchoName, echoPod.Status.PodIP)
	direct := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, ServerName: vaultEchoName}}}
	t.Cleanup(direct.CloseIdleConnections)
	waitFor(t, 30*time.Second, func() bool {
		resp, err := direct.Get(fmt.Sprintf("https://%s:%d/", echoPod.Status.PodIP, vaultEchoPort))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, "the echo server to answer over TLS")

	id := g.createSandbox(smallSandbox(map[string]any{
		"networkPolicy":   map[string]any{"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": vaultEchoName}}},
		"credentialProxy": map[string]any{"enabled": true},
	}))
	pod, err := kube.CoreV1().Pods(ns).Get(ctx, sgk8s.PodName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var vaultCA string
	for _, c := range pod.Spec.InitContainers {
		if c.Name == sgk8s.VaultTrustContainer {
			vaultCA = envOf(c, sgk8s.EnvVaultCACert)
		}
	}
	if vaultCA == "" {
		t.Fatalf("no %s init container with the vault's CA in the pod", sgk8s.VaultTrustContainer)
	}
	run := func(t *testing.T, command string) string {
		t.Helper()
		out, code, err := g.command(id, command)
		if err != nil || code != 0 {
			t.Fatalf("%s: exit %d %v", command, code, err)
		}
		return out
	}

	t.Run("the trust init container wrote the bundle", func(t *testing.T) {
		for _, st := range pod.Status.InitContainerStatuses {
			if st.Name == sgk8s.VaultTrustContainer && (st.State.Terminated == nil || st.State.Terminated.ExitCode != 0) {
				t.Fatalf("init container %s: %+v, want exited 0", st.Name, st.State)
			}
		}
		// The file the workload's TLS clients read by default is the image's roots with
		// the vault's CA appended.
		bundle := run(t, "cat /etc/ssl/certs/ca-certificates.crt")
		if !strings.Contains(bundle, strings.TrimSpace(vaultCA)) {
			t.Fatal("the workload's system bundle lacks the vault's CA")
		}
		if n := strings.Count(bundle, "BEGIN CERTIFICATE"); n < 2 {
			t.Fatalf("the workload's system bundle holds %d certificates, want the image's roots and the vault's CA", n)
		}
		if got := run(t, `echo "$SSL_CERT_FILE"`); got == "" || !strings.Contains(run(t, "cat \"$SSL_CERT_FILE\""), strings.TrimSpace(vaultCA)) {
			t.Fatalf("SSL_CERT_FILE %q does not hold the vault's CA", got)
		}
	})

	real := "sk-real-" + randomHex(16)
	r := vaultRequest(t, g, id, "POST", "/credential-vault", map[string]any{
		"credentials": []map[string]any{{"name": "echo-token", "source": map[string]any{"type": "inline", "value": real}}},
		"bindings": []map[string]any{{"name": "echo", "match": map[string]any{"hosts": []string{vaultEchoName}, "ports": []int{vaultEchoPort}, "paths": []string{"/api/*"}},
			"auth": map[string]any{"type": "bearer", "credential": "echo-token"}}},
	})
	if r.status != 201 {
		t.Fatalf("POST /credential-vault: %d %s", r.status, r.body)
	}
	sha := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	fetch := func(t *testing.T, path string) string {
		t.Helper()
		// No -k: TLS is verified against the workload's own trust store.
		out := run(t, fmt.Sprintf("curl -sS --max-time 20 -H 'Authorization: Bearer fake-token-in-sandbox' https://%s:%d%s", vaultEchoName, vaultEchoPort, path))
		var answer struct{ Path, Auth string }
		if err := json.Unmarshal([]byte(out), &answer); err != nil || answer.Path != path {
			t.Fatalf("GET %s from the sandbox: %q (%v)", path, out, err)
		}
		return answer.Auth
	}

	t.Run("an intercepted call gets the real header", func(t *testing.T) {
		if got := fetch(t, "/api/models"); got != sha("Bearer "+real) {
			t.Fatalf("the echo server saw an Authorization of SHA-256 %s, want the real credential's %s (the fake one's is %s)", got, sha("Bearer "+real), sha("Bearer fake-token-in-sandbox"))
		}
	})

	t.Run("a path no binding names keeps the workload's header", func(t *testing.T) {
		if got := fetch(t, "/other"); got != sha("Bearer fake-token-in-sandbox") {
			t.Fatalf("the echo server saw an Authorization of SHA-256 %s, want the workload's own", got)
		}
	})

	t.Run("the workload cannot read the credential", func(t *testing.T) {
		// The pattern matches the value without holding it, so that the search itself
		// does not put the value in the sandbox.
		readableAt := func(value string) string {
			var pattern strings.Builder
			for _, c := range value {
				pattern.WriteString("[" + string(c) + "]")
			}
			out, _, err := g.command(id, fmt.Sprintf("grep -rls '%s' /proc/*/environ /tmp /etc /.sandgate 2>/dev/null | head -5", pattern.String()))
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimSpace(out)
		}
		// The search finds a value the workload does hold.
		decoy := "sk-decoy-" + randomHex(8)
		run(t, "echo "+decoy+" > /tmp/decoy")
		if got := readableAt(decoy); got != "/tmp/decoy" {
			t.Fatalf("the search for a planted value found %q, want /tmp/decoy", got)
		}
		if got := readableAt(real); got != "" {
			t.Fatalf("the real credential is readable in the workload at %q", got)
		}
	})
}

// vaultRequest calls a sandbox's credential vault API the SDK way: through the gateway's
// endpoint for the enforcer's port with the headers it hands out.
func vaultRequest(t *testing.T, g *gateway, id, method, path string, body any) agentAnswer {
	t.Helper()
	r := g.do("GET", fmt.Sprintf("/v1/sandboxes/%s/endpoints/%d", id, runtimes.EgressPort), nil)
	if r.Status != http.StatusOK {
		t.Fatalf("egress endpoint: %d %s", r.Status, r.Body)
	}
	var ep struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(r.Body, &ep); err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(body)
	return agentRequest(t, g, method, "http://"+ep.Endpoint+path, ep.Headers, "application/json", strings.NewReader(string(js)))
}
