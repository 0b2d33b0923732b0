package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/runtimes/docker"
)

// Credential vault tests. The upstream is an HTTPS echo server (plain HTTP on port 80
// too) the test starts in a container on the sandbox network, with a certificate from a
// CA the test makes (the gateway trusts it for upstream TLS through SANDGATE_VAULT_UPSTREAM_CA);
// it answers with the SHA-256 of the Authorization header it received, and echoes the
// header itself back as a response header (which the vault must redact).

// vaultEchoHost is the echo server's name on the sandbox network; vaultPlainHost a
// second server's (the benchmark's host that no binding names).
const (
	vaultEchoHost  = "echo.vault.test"
	vaultPlainHost = "plain.vault.test"
)

const vaultEchoScript = `import http.server, ssl, json, hashlib, sys, os, base64
open('/tmp/c.pem', 'wb').write(base64.b64decode(os.environ['CERT_B64']))
open('/tmp/k.pem', 'wb').write(base64.b64decode(os.environ['KEY_B64']))
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    disable_nagle_algorithm = True
    def answer(self):
        n = int(self.headers.get('Content-Length') or 0)
        if n:
            self.rfile.read(n)
        auth = self.headers.get('Authorization', '')
        digest = hashlib.sha256(auth.encode()).hexdigest()
        sys.stderr.write('seen %s %s auth-sha256=%s\n' % (self.command, self.path, digest))
        sys.stderr.flush()
        body = json.dumps({'path': self.path, 'auth': digest, 'apiKey': hashlib.sha256(self.headers.get('X-Api-Key', '').encode()).hexdigest()}).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.send_header('X-Echo-Authorization', auth)
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = answer
    def log_message(self, *a):
        pass
import threading
plain = http.server.ThreadingHTTPServer(('0.0.0.0', 80), H)
threading.Thread(target=plain.serve_forever, daemon=True).start()
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain('/tmp/c.pem', '/tmp/k.pem')
srv = http.server.ThreadingHTTPServer(('0.0.0.0', 443), H)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
`

// testCA is a CA of the test's own and a server certificate it signed.
type testCA struct {
	caPEM, certPEM, keyPEM []byte
	pool                   *x509.CertPool
}

func newTestCA(t testing.TB, hosts ...string) *testCA {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandgate e2e upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: hosts[0]}, DNSNames: hosts,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &testCA{
		caPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		pool:    pool,
	}
}

// vaultWorld is a gateway whose sandboxes' enforcers trust the test's CA upstream,
// with the echo server on the sandbox network.
type vaultWorld struct {
	t      testing.TB
	e      *env
	g      *gateway
	ca     *testCA
	echo   string // the echo server's container name
	echoIP string
}

func newVaultWorld(t testing.TB, gatewayEnv ...string) *vaultWorld {
	t.Helper()
	e := newEnv(t, startRedis(t))
	if out, err := exec.Command("docker", "network", "create", "--label", "sandgate.io/network=sandboxes", e.Network).CombinedOutput(); err != nil {
		t.Fatalf("create network: %v: %s", err, out)
	}
	ca := newTestCA(t, vaultEchoHost, vaultPlainHost)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, ca.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	w := &vaultWorld{t: t, e: e, ca: ca}
	w.echo, w.echoIP = w.startEcho(vaultEchoHost)
	w.g = e.startGateway(append([]string{"SANDGATE_VAULT_UPSTREAM_CA=" + caFile}, gatewayEnv...)...)
	return w
}

// startEcho runs an HTTPS echo server container named alias on the world's network and
// returns its container name and address once it answers over TLS.
func (w *vaultWorld) startEcho(alias string) (string, string) {
	w.t.Helper()
	return w.startEchoWith(alias, w.ca)
}

// startEchoWith is startEcho with a certificate from ca.
func (w *vaultWorld) startEchoWith(alias string, ca *testCA) (string, string) {
	t := w.t
	t.Helper()
	name := "sg-e2e-echo-" + randomHex(4)
	args := []string{"run", "-d", "--name", name, "--network", w.e.Network, "--network-alias", alias, "--label", "sandgate-e2e=server",
		"-e", "CERT_B64=" + base64.StdEncoding.EncodeToString(ca.certPEM), "-e", "KEY_B64=" + base64.StdEncoding.EncodeToString(ca.keyPEM),
		baseImage, "python3", "-c", vaultEchoScript}
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("start echo server: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	out, err := exec.Command("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name).Output()
	if err != nil {
		t.Fatalf("inspect echo server: %v", err)
	}
	ip := strings.TrimSpace(string(out))
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, ServerName: alias}}}
	waitFor(t, 30*time.Second, func() bool {
		resp, err := client.Get("https://" + ip + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, "the echo server to answer over TLS")
	return name, ip
}

// vaultPolicy allows the echo server only.
var vaultPolicy = map[string]any{"defaultAction": "deny", "egress": []map[string]any{{"action": "allow", "target": vaultEchoHost}}}

// vaultSandbox creates a sandbox with the credential proxy behind vaultPolicy.
func (w *vaultWorld) vaultSandbox(env map[string]string) (string, *agent) {
	w.t.Helper()
	req := map[string]any{"networkPolicy": vaultPolicy, "credentialProxy": map[string]any{"enabled": true}}
	if env != nil {
		req["env"] = env
	}
	id := w.g.createSandbox(req)
	return id, w.g.agent(id)
}

// vault calls a sandbox's vault API (or another path of its egress API) the SDK way:
// the gateway's endpoint for port 18080 with the headers it returns. A string body is
// sent as it is, anything else as JSON.
func (g *gateway) vault(id, method, path string, body any) response {
	g.t.Helper()
	r := g.do("GET", "/v1/sandboxes/"+id+"/endpoints/18080", nil)
	if r.Status != 200 {
		g.t.Fatalf("egress endpoint: %d %s", r.Status, r.Body)
	}
	var ep struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(r.Body, &ep); err != nil {
		g.t.Fatal(err)
	}
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string: // sent as it is, for bodies that are not JSON
		rd = strings.NewReader(b)
	default:
		js, _ := json.Marshal(b)
		rd = strings.NewReader(string(js))
	}
	req, err := http.NewRequest(method, "http://"+ep.Endpoint+path, rd)
	if err != nil {
		g.t.Fatal(err)
	}
	for k, v := range ep.Headers {
		req.Header.Set(k, v)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.client.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// vaultRevision reads the vault's revision (fatal unless 200).
func (g *gateway) vaultRevision(id string) float64 {
	g.t.Helper()
	r := g.vault(id, "GET", "/credential-vault", nil)
	if r.Status != 200 {
		g.t.Fatalf("GET /credential-vault: %d %s", r.Status, r.Body)
	}
	return r.JSON(g.t)["revision"].(float64)
}

// echoAnswer is what the echo server says it received.
type echoAnswer struct {
	Path   string `json:"path"`
	Auth   string `json:"auth"`
	APIKey string `json:"apiKey"`
}

// curlEcho fetches https://echo.vault.test<path> from the sandbox with a fake token,
// verifying TLS with the sandbox's own trust store (no -k), and returns the answer and
// the response headers.
func curlEcho(t testing.TB, a *agent, method, path string) (echoAnswer, string) {
	t.Helper()
	out := strings.TrimSpace(stdoutOf(a.run(fmt.Sprintf(
		"curl -sS --max-time 20 -X %s -H 'Authorization: Bearer fake-token-in-sandbox' -D /tmp/vault-h https://%s%s; echo; echo ---; cat /tmp/vault-h", method, vaultEchoHost, path))))
	body, headers, _ := strings.Cut(out, "---")
	var ans echoAnswer
	if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &ans); err != nil {
		t.Fatalf("curl %s %s from the sandbox: %v; output:\n%s", method, path, err, out)
	}
	return ans, headers
}

// literalFree turns s into a regular expression that matches s but does not contain
// it, so that searching a sandbox for a secret does not put the secret in the sandbox.
func literalFree(s string) string {
	var b strings.Builder
	for _, c := range s {
		b.WriteString("[" + regexp.QuoteMeta(string(c)) + "]")
	}
	return b.String()
}

// enforcerEnv returns the value of key in the environment sandbox id's enforcer was
// started with: its process's, read from /proc, or its sidecar's configuration.
func enforcerEnv(t testing.TB, id, key string) string {
	t.Helper()
	var env []string
	if rec, ok := docker.EnforcerProcessOf(id); ok {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(rec.PID) + "/environ")
		if err != nil {
			t.Fatalf("environment of the enforcer process: %v", err)
		}
		env = strings.Split(string(b), "\x00")
	} else {
		out, err := exec.Command("docker", "inspect", "-f", "{{json .Config.Env}}", "sandgate-"+id+"-egress").Output()
		if err != nil {
			t.Fatalf("inspect sidecar: %v", err)
		}
		_ = json.Unmarshal(out, &env)
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// enforcerLogs returns what sandbox id's enforcer logged: its process's log file, or its
// sidecar's container log.
func enforcerLogs(id string) string {
	if _, ok := docker.EnforcerProcessOf(id); ok {
		b, _ := os.ReadFile(filepath.Join("/var/lib/sandgate/enforcers", id, "enforcer.log"))
		return string(b)
	}
	out, _ := exec.Command("docker", "logs", "sandgate-"+id+"-egress").CombinedOutput()
	return string(out)
}

// crashEnforcer kills sandbox id's enforcer the way a crash does, leaving what restarts
// it in place (its runtime for a process, the restart loop for a sidecar's enforcer).
func crashEnforcer(t testing.TB, id string) {
	t.Helper()
	if rec, ok := docker.EnforcerProcessOf(id); ok {
		if out, err := exec.Command("kill", "-KILL", strconv.Itoa(rec.PID)).CombinedOutput(); err != nil {
			t.Fatalf("kill the enforcer process: %v: %s", err, out)
		}
		return
	}
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", "sandgate-"+id+"-egress").Output()
	if err != nil {
		t.Fatalf("inspect the sidecar: %v", err)
	}
	loop := strings.TrimSpace(string(out))
	if out, err := exec.Command("pkill", "-KILL", "-P", loop).CombinedOutput(); err != nil {
		t.Fatalf("kill the enforcer (children of %s): %v: %s", loop, err, out)
	}
}

// removeEnforcer removes sandbox id's enforcer for good, as an operator's mistake would:
// a process's record goes before the process (its runtime then does not start it again),
// a sidecar container is removed. The reconciler restores a new one.
func removeEnforcer(t testing.TB, id string) {
	t.Helper()
	if rec, ok := docker.EnforcerProcessOf(id); ok {
		if err := os.Remove(filepath.Join("/var/lib/sandgate/enforcers", id, "enforcer.json")); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("kill", "-KILL", strconv.Itoa(rec.PID)).CombinedOutput(); err != nil {
			t.Fatalf("kill the enforcer process: %v: %s", err, out)
		}
		return
	}
	removeEnforcer(t, id)
}

func TestCredentialVault(t *testing.T) {
	w := newVaultWorld(t)
	g := w.g
	real := "sk-real-" + randomHex(16)
	id, a := w.vaultSandbox(map[string]string{"ECHO_TOKEN": "fake-token-in-sandbox"})

	t.Run("credentialProxy needs a networkPolicy", func(t *testing.T) {
		r := g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"},
			"credentialProxy": map[string]any{"enabled": true}})
		expectError(t, r, 400, "SANDBOX::CREDENTIAL_PROXY_REQUIRES_NETWORK_POLICY")
	})

	t.Run("no vault yet", func(t *testing.T) {
		expectError(t, g.vault(id, "GET", "/credential-vault", nil), 404, "VAULT::NOT_FOUND")
	})

	binding := map[string]any{"name": "echo", "match": map[string]any{"hosts": []string{vaultEchoHost}, "paths": []string{"/api/*"}},
		"auth": map[string]any{"type": "bearer", "credential": "echo-token"}}
	t.Run("create", func(t *testing.T) {
		r := g.vault(id, "POST", "/credential-vault", map[string]any{
			"credentials": []map[string]any{{"name": "echo-token", "source": map[string]any{"type": "inline", "value": real}}},
			"bindings":    []map[string]any{binding},
		})
		if r.Status != 201 {
			t.Fatalf("POST /credential-vault: %d %s", r.Status, r.Body)
		}
		if strings.Contains(string(r.Body), real) {
			t.Fatalf("the answer holds the credential's value: %s", r.Body)
		}
		var st struct {
			Revision    int `json:"revision"`
			Credentials []struct {
				Name, SourceType string
				Revision         int
			} `json:"credentials"`
			Bindings []struct {
				Name     string `json:"name"`
				Revision int    `json:"revision"`
				Match    struct {
					Schemes []string `json:"schemes"`
					Ports   []int    `json:"ports"`
					Hosts   []string `json:"hosts"`
					Methods []string `json:"methods"`
					Paths   []string `json:"paths"`
				} `json:"match"`
				Auth map[string]any `json:"auth"`
			} `json:"bindings"`
		}
		if err := json.Unmarshal(r.Body, &st); err != nil {
			t.Fatal(err)
		}
		if st.Revision != 1 || len(st.Credentials) != 1 || st.Credentials[0].SourceType != "inline" || len(st.Bindings) != 1 ||
			st.Bindings[0].Match.Ports[0] != 443 || st.Bindings[0].Match.Schemes[0] != "https" || len(st.Bindings[0].Match.Methods) != 5 ||
			st.Bindings[0].Auth["type"] != "bearer" || len(st.Bindings[0].Auth) != 1 {
			t.Fatalf("state = %s", r.Body)
		}
		if r := g.vault(id, "POST", "/credential-vault", map[string]any{"credentials": []any{}, "bindings": []any{}}); r.Status != 409 {
			t.Fatalf("second POST: %d %s, want 409", r.Status, r.Body)
		}
		for _, p := range []string{"/credential-vault/credentials", "/credential-vault/credentials/echo-token", "/credential-vault/bindings", "/credential-vault/bindings/echo"} {
			r := g.vault(id, "GET", p, nil)
			if r.Status != 200 || strings.Contains(string(r.Body), real) {
				t.Fatalf("GET %s: %d %s", p, r.Status, r.Body)
			}
		}
		expectError(t, g.vault(id, "GET", "/credential-vault/bindings/nope", nil), 404, "VAULT::NOT_FOUND")
	})

	t.Run("a matching request carries the real token, the sandbox sees neither it nor the key", func(t *testing.T) {
		ans, headers := curlEcho(t, a, "GET", "/api/models")
		if ans.Auth != sha256Hex([]byte("Bearer "+real)) {
			t.Fatalf("the echo server did not get the real token: auth sha256 %s (the fake one is %s)", ans.Auth, sha256Hex([]byte("Bearer fake-token-in-sandbox")))
		}
		if strings.Contains(headers, real) || !strings.Contains(headers, "[REDACTED]") {
			t.Fatalf("the echoed Authorization response header is not redacted:\n%s", headers)
		}
		out, _ := exec.Command("docker", "logs", w.echo).CombinedOutput()
		if !strings.Contains(string(out), "auth-sha256="+sha256Hex([]byte("Bearer "+real))) {
			t.Fatalf("the echo server's log does not show the real token's request:\n%s", out)
		}
	})

	t.Run("a path no binding names gets no header", func(t *testing.T) {
		ans, _ := curlEcho(t, a, "GET", "/other")
		if ans.Auth != sha256Hex([]byte("Bearer fake-token-in-sandbox")) {
			t.Fatalf("a non-matching path was changed: auth sha256 %s", ans.Auth)
		}
		ans, _ = curlEcho(t, a, "OPTIONS", "/api/models")
		if ans.Auth != sha256Hex([]byte("Bearer fake-token-in-sandbox")) {
			t.Fatalf("a method no binding names was changed: auth sha256 %s", ans.Auth)
		}
	})

	t.Run("bad input is refused and changes nothing", func(t *testing.T) {
		rev := g.vaultRevision(id)
		for _, tc := range []struct {
			name string
			body map[string]any
			code string
		}{
			{"unknown auth type", map[string]any{"bindings": map[string]any{"add": []any{map[string]any{"name": "x", "match": map[string]any{"hosts": []string{vaultEchoHost}, "paths": []string{"/x/*"}}, "auth": map[string]any{"type": "oauth", "credential": "echo-token"}}}}}, "VAULT::UNKNOWN_AUTH_TYPE"},
			{"unknown credential", map[string]any{"bindings": map[string]any{"add": []any{map[string]any{"name": "x", "match": map[string]any{"hosts": []string{vaultEchoHost}, "paths": []string{"/x/*"}}, "auth": map[string]any{"type": "bearer", "credential": "nope"}}}}}, "VAULT::UNKNOWN_CREDENTIAL"},
			{"overlapping bindings", map[string]any{"bindings": map[string]any{"add": []any{map[string]any{"name": "x", "match": map[string]any{"hosts": []string{vaultEchoHost}, "paths": []string{"/api/v2/*"}}, "auth": map[string]any{"type": "bearer", "credential": "echo-token"}}}}}, "VAULT::OVERLAPPING_BINDINGS"},
			{"header name not a token", map[string]any{"bindings": map[string]any{"add": []any{map[string]any{"name": "x", "match": map[string]any{"hosts": []string{vaultEchoHost}, "paths": []string{"/x/*"}}, "auth": map[string]any{"type": "apiKey", "name": "X Key:", "credential": "echo-token"}}}}}, "VAULT::INVALID_HEADER_NAME"},
			{"value with CR/LF", map[string]any{"credentials": map[string]any{"add": []any{map[string]any{"name": "y", "source": map[string]any{"type": "inline", "value": "abc\r\nX-Evil: 1"}}}}}, "VAULT::INVALID_VALUE"},
			{"delete a credential in use", map[string]any{"credentials": map[string]any{"delete": []string{"echo-token"}}}, "VAULT::UNKNOWN_CREDENTIAL"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				expectError(t, g.vault(id, "PATCH", "/credential-vault", tc.body), 400, tc.code)
				if got := g.vaultRevision(id); got != rev {
					t.Fatalf("revision %v after a refused change, want %v", got, rev)
				}
			})
		}
		// Two bindings that could match one request are refused at creation, so that
		// no request ever has two to choose from.
		ans, _ := curlEcho(t, a, "GET", "/api/v2/x")
		if ans.Auth != sha256Hex([]byte("Bearer "+real)) {
			t.Fatalf("after the refused overlap the one binding no longer injects: %s", ans.Auth)
		}
	})

	t.Run("the vault policy refuses a host the egress does not allow, and plain http", func(t *testing.T) {
		rev := g.vaultRevision(id)
		expectError(t, g.vault(id, "PATCH", "/credential-vault", map[string]any{"bindings": map[string]any{"add": []any{
			map[string]any{"name": "elsewhere", "match": map[string]any{"hosts": []string{"collect.attacker.test"}}, "auth": map[string]any{"type": "bearer", "credential": "echo-token"}}}}}),
			403, "VAULT::HOST_NOT_ALLOWED")
		expectError(t, g.vault(id, "PATCH", "/credential-vault", map[string]any{"bindings": map[string]any{"add": []any{
			map[string]any{"name": "plain", "match": map[string]any{"schemes": []string{"http"}, "hosts": []string{vaultEchoHost}, "paths": []string{"/plain/*"}}, "auth": map[string]any{"type": "bearer", "credential": "echo-token"}}}}}),
			403, "VAULT::SCHEME_NOT_ALLOWED")
		if got := g.vaultRevision(id); got != rev {
			t.Fatalf("revision %v after refused bindings, want %v", got, rev)
		}
	})

	t.Run("PATCH with a stale revision is a 409; a current one applies", func(t *testing.T) {
		rev := g.vaultRevision(id)
		expectError(t, g.vault(id, "PATCH", "/credential-vault", map[string]any{"expectedRevision": rev - 1,
			"credentials": map[string]any{"add": []any{map[string]any{"name": "k2", "source": map[string]any{"value": "v2-" + randomHex(4)}}}}}), 409, "VAULT::REVISION_CONFLICT")
		r := g.vault(id, "PATCH", "/credential-vault", map[string]any{"expectedRevision": rev,
			"credentials": map[string]any{"add": []any{map[string]any{"name": "k2", "source": map[string]any{"value": "v2-" + randomHex(4)}}}},
			"bindings":    map[string]any{"add": []any{map[string]any{"name": "key", "match": map[string]any{"hosts": []string{vaultEchoHost}, "paths": []string{"/keyed"}}, "auth": map[string]any{"type": "apiKey", "name": "X-Api-Key", "credential": "k2"}}}}})
		if r.Status != 200 || r.JSON(t)["revision"].(float64) != rev+1 {
			t.Fatalf("PATCH: %d %s", r.Status, r.Body)
		}
	})

	// Before the restart below: the enforcer keeps injection records in memory until the
	// gateway drains them on its next sync pass, so a crash loses at most that much
	// (docs/security.md, "What is not covered").
	t.Run("each injection is an audit record", func(t *testing.T) {
		var body string
		waitFor(t, 60*time.Second, func() bool {
			body = string(g.do("GET", "/v1/audit?limit=500", nil).Body)
			return strings.Contains(body, `"source":"vault"`) && strings.Contains(body, `"type":"vault.injection"`) &&
				strings.Contains(body, `"binding":"echo"`) && strings.Contains(body, `"path":"/api/models"`)
		}, "the vault's injection records in the audit stream")
		if strings.Contains(body, `"path":"/other"`) {
			t.Errorf("a request without injection was audited as one: %s", tail(body, 2000))
		}
	})

	t.Run("the vault survives an enforcer restart", func(t *testing.T) {
		rev := g.vaultRevision(id)
		// kill -9 of the enforcer (what restarts it brings it back with its state): a
		// crash, without the reconciler's restore of a removed enforcer (which would start
		// a new, empty vault: TestCredentialVaultEnforcerRestored).
		crashEnforcer(t, id)
		waitFor(t, 60*time.Second, func() bool {
			r := g.vault(id, "GET", "/credential-vault", nil)
			return r.Status == 200
		}, "the restarted enforcer's vault API")
		if got := g.vaultRevision(id); got != rev {
			t.Fatalf("revision after restart %v, want %v", got, rev)
		}
		ans, _ := curlEcho(t, a, "POST", "/api/again")
		if ans.Auth != sha256Hex([]byte("Bearer "+real)) {
			t.Fatalf("after the restart the real token was not injected: %s", ans.Auth)
		}
		// An enforcer process restarted by its gateway is counted; a sidecar's own loop
		// restarts it out of the gateway's sight.
		if _, ok := docker.EnforcerProcessOf(id); ok {
			_, metrics := scrape(t, "http://"+g.Addr+"/metrics", g.APIKey)
			if n, _ := seriesValue(metrics, "sandgate_enforcer_process_restarts_total"); n < 1 {
				t.Errorf("sandgate_enforcer_process_restarts_total %v after a restart, want at least 1", n)
			}
		}
	})

	t.Run("the real value is nowhere the workload or the logs can see", func(t *testing.T) {
		pattern := literalFree(real)
		caKey := enforcerEnv(t, id, "SANDGATE_VAULT_CA_KEY")
		if caKey == "" {
			t.Fatal("the sidecar has no CA key")
		}
		keyLines := strings.Split(strings.TrimSpace(caKey), "\n")
		keyChunk := literalFree(keyLines[1][:40])
		for what, cmd := range map[string]string{
			"environment":     "env | grep -cE '" + pattern + "' || true",
			"/proc/*/environ": "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -cE '" + pattern + "' || true",
			"files under /":   "grep -rlIsE --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev '" + pattern + "' / | head -5; echo 0",
			"the CA key":      "grep -rlIsE --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev '" + keyChunk + "' / | head -5; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -cE 'SANDGATE_VAULT_CA_KEY|" + keyChunk + "' || true",
		} {
			if out := strings.TrimSpace(stdoutOf(a.run(cmd))); out != "0" {
				t.Errorf("%s of the sandbox holds the secret: %q", what, out)
			}
		}
		if out := strings.TrimSpace(stdoutOf(a.run("echo $SSL_CERT_FILE $REQUESTS_CA_BUNDLE $NODE_EXTRA_CA_CERTS; grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt"))); !strings.Contains(out, "/.sandgate/vault/ca-bundle.pem /.sandgate/vault/ca-bundle.pem /.sandgate/vault/ca.pem") {
			t.Errorf("trust variables: %q", out)
		}
		if strings.Contains(g.proc.Logs(), real) {
			t.Error("the gateway's log holds the credential's value")
		}
		for _, p := range []string{"/v1/events?sandboxId=" + id, "/v1/audit"} {
			if r := g.do("GET", p, nil); strings.Contains(string(r.Body), real) {
				t.Errorf("GET %s holds the credential's value", p)
			}
		}
		if r := g.do("GET", "/v1/events?sandboxId="+id, nil); !strings.Contains(string(r.Body), "sandbox.vault.updated") {
			t.Errorf("no sandbox.vault.updated event: %s", tail(string(r.Body), 2000))
		}
		logs := enforcerLogs(id)
		if strings.Contains(logs, real) {
			t.Error("the enforcer's log holds the credential's value")
		}
		if !strings.Contains(logs, "vault injection") || !strings.Contains(logs, "binding=echo") {
			t.Errorf("the enforcer logged no injection audit record:\n%s", tail(logs, 3000))
		}
	})

	t.Run("DELETE removes the vault and its interception", func(t *testing.T) {
		if r := g.vault(id, "DELETE", "/credential-vault", nil); r.Status != 204 {
			t.Fatalf("DELETE: %d %s", r.Status, r.Body)
		}
		expectError(t, g.vault(id, "GET", "/credential-vault", nil), 404, "VAULT::NOT_FOUND")
		// Without interception the workload meets the echo server's own certificate,
		// which its trust store does not hold: curl fails to verify, as it would have
		// before the vault.
		out := strings.TrimSpace(stdoutOf(a.run("curl -s -o /dev/null -w '%{http_code}' --max-time 10 https://" + vaultEchoHost + "/api/x; echo \" $?\"")))
		if !strings.HasSuffix(out, " 60") {
			t.Fatalf("after DELETE curl got %q, want a certificate error (exit 60): traffic is still intercepted", out)
		}
	})
}

func TestCredentialVaultNotEnabled(t *testing.T) {
	w := newVaultWorld(t)
	id := w.g.createSandbox(map[string]any{"networkPolicy": vaultPolicy})
	expectError(t, w.g.vault(id, "GET", "/credential-vault", nil), 412, "VAULT::PROXY_NOT_ENABLED")
	expectError(t, w.g.vault(id, "POST", "/credential-vault", map[string]any{"credentials": []any{}, "bindings": []any{}}), 412, "VAULT::PROXY_NOT_ENABLED")
}

// TestCredentialVaultNullLists: a create whose credentials and bindings are null (what
// clients send for "none") makes an empty vault through gateway and enforcer alike; one
// that leaves a list out is still refused.
func TestCredentialVaultNullLists(t *testing.T) {
	w := newVaultWorld(t)
	id, _ := w.vaultSandbox(nil)
	expectError(t, w.g.vault(id, "POST", "/credential-vault", map[string]any{"credentials": nil}), 400, "VAULT::INVALID_REQUEST")
	r := w.g.vault(id, "POST", "/credential-vault", map[string]any{"credentials": nil, "bindings": nil})
	if r.Status != 201 {
		t.Fatalf("POST /credential-vault with null lists: %d %s", r.Status, r.Body)
	}
	if st := r.JSON(t); st["revision"] != float64(1) || fmt.Sprint(st["credentials"]) != "[]" || fmt.Sprint(st["bindings"]) != "[]" {
		t.Fatalf("state %s, want revision 1 and empty lists", r.Body)
	}
}

// TestCredentialVaultPoolsAndBatches: credentialProxy in a pool's template gives its
// warm members (and a claim of one) the vault; in a batch's template, every member.
func TestCredentialVaultPoolsAndBatches(t *testing.T) {
	w := newVaultWorld(t)
	g := w.g
	tmpl := map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"},
		"networkPolicy": vaultPolicy, "credentialProxy": map[string]any{"enabled": true}}
	// 404 VAULT::NOT_FOUND (no vault yet) and not 412 VAULT::PROXY_NOT_ENABLED: the
	// sandbox's enforcer runs the vault.
	enabled := func(t *testing.T, id string) {
		t.Helper()
		expectError(t, g.vault(id, "GET", "/credential-vault", nil), 404, "VAULT::NOT_FOUND")
	}
	t.Run("pool", func(t *testing.T) {
		r := g.do("POST", "/v1/pools", map[string]any{"name": "vaulted", "template": tmpl,
			"capacitySpec": map[string]int{"bufferMin": 1, "bufferMax": 1, "poolMin": 1, "poolMax": 2}})
		if r.Status != 201 {
			t.Fatalf("create pool: %d %s", r.Status, r.Body)
		}
		g.waitAvailable("vaulted", 1, 90*time.Second)
		id := g.createSandbox(map[string]any{"extensions": map[string]string{"poolRef": "vaulted"}, "credentialProxy": map[string]any{"enabled": true}})
		enabled(t, id)
		if out := stdoutOf(g.agent(id).run("echo $SSL_CERT_FILE")); out != "/.sandgate/vault/ca-bundle.pem" {
			t.Fatalf("claimed member's SSL_CERT_FILE = %q", out)
		}
	})
	t.Run("batch", func(t *testing.T) {
		r := g.do("POST", "/v1/batches", map[string]any{"count": 2, "template": tmpl})
		if r.Status != 202 {
			t.Fatalf("batch: %d %s", r.Status, r.Body)
		}
		var b struct {
			ID      string `json:"id"`
			Members []struct {
				ID string `json:"id"`
			} `json:"members"`
		}
		_ = json.Unmarshal(r.Body, &b)
		waitFor(t, 90*time.Second, func() bool {
			s := g.do("GET", "/v1/batches/"+b.ID, nil).JSON(t)["summary"].(map[string]any)
			return s["running"].(float64) == 2
		}, "both members to run")
		for _, m := range b.Members {
			enabled(t, m.ID)
		}
	})
}

// TestSDKJSCredentialVault runs test/sdk-js/vault.test.mjs: the published OpenSandbox
// JavaScript SDK's credentialVault helpers against the vault, unchanged.
func TestSDKJSCredentialVault(t *testing.T) {
	node, dir := sdkJSSuite(t)
	w := newVaultWorld(t)
	secret := "sk-sdk-" + randomHex(16)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-concurrency=1", "--test-reporter=tap", "vault.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"SANDGATE_SDK_DOMAIN="+w.g.Addr,
		"SANDGATE_SDK_API_KEY="+w.g.APIKey,
		"SANDGATE_SDK_IMAGE="+baseImage,
		"SANDGATE_SDK_VAULT_HOST="+vaultEchoHost,
		"SANDGATE_SDK_VAULT_SECRET="+secret,
		"OPENSANDBOX_DISABLE_METRICS=1",
		"NO_COLOR=1",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test vault.test.mjs: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "\n# fail 0") || strings.Contains(string(out), "\n# tests 0") {
		t.Fatalf("the suite ran no tests or did not report `# fail 0`:\n%s", out)
	}
	if strings.Contains(w.g.proc.Logs(), secret) {
		t.Fatal("the gateway's log holds the credential's value")
	}
	t.Logf("%s", out)
}

// TestCredentialVaultEnforcerRestored: a sidecar removed by hand is restored by the
// reconciler with the vault turned on again: its vault starts empty (the old one lived
// in the removed sidecar) under a new CA that the workload trusts at once.
func TestCredentialVaultEnforcerRestored(t *testing.T) {
	w := newVaultWorld(t)
	g := w.g
	id, a := w.vaultSandbox(nil)
	real := "sk-restored-" + randomHex(12)
	body := map[string]any{
		"credentials": []map[string]any{{"name": "tok", "source": map[string]any{"type": "inline", "value": real}}},
		"bindings": []map[string]any{{"name": "echo", "match": map[string]any{"hosts": []string{vaultEchoHost}, "paths": []string{"/api/*"}},
			"auth": map[string]any{"type": "bearer", "credential": "tok"}}},
	}
	if r := g.vault(id, "POST", "/credential-vault", body); r.Status != 201 {
		t.Fatalf("POST: %d %s", r.Status, r.Body)
	}
	oldCA := enforcerEnv(t, id, "SANDGATE_VAULT_CA_CERT")
	removeEnforcer(t, id)
	waitFor(t, 90*time.Second, func() bool {
		return g.vault(id, "GET", "/credential-vault", nil).Status == 404
	}, "the restored enforcer's (empty) vault")
	if newCA := enforcerEnv(t, id, "SANDGATE_VAULT_CA_CERT"); newCA == "" || newCA == oldCA {
		t.Fatal("the restored enforcer has no new CA")
	}
	if r := g.vault(id, "POST", "/credential-vault", body); r.Status != 201 {
		t.Fatalf("POST after the restore: %d %s", r.Status, r.Body)
	}
	ans, _ := curlEcho(t, a, "GET", "/api/x")
	if ans.Auth != sha256Hex([]byte("Bearer "+real)) {
		t.Fatalf("after the restore the real token was not injected: %s", ans.Auth)
	}
}

// TestCredentialVaultUpstreamVerified: the enforcer sends a credential only over TLS it
// verified for the bound host. A server under a bound, allowed name whose certificate
// comes from a CA nobody trusts (the test's second CA) gets no request at all: the
// workload gets 502 VAULT::UPSTREAM_UNAVAILABLE.
func TestCredentialVaultUpstreamVerified(t *testing.T) {
	w := newVaultWorld(t)
	const rogueHost = "rogue.vault.test"
	rogue, _ := w.startEchoWith(rogueHost, newTestCA(t, rogueHost))
	id := w.g.createSandbox(map[string]any{"credentialProxy": map[string]any{"enabled": true},
		"networkPolicy": map[string]any{"defaultAction": "deny", "egress": []map[string]any{{"action": "allow", "target": rogueHost}}}})
	a := w.g.agent(id)
	real := "sk-rogue-" + randomHex(12)
	if r := w.g.vault(id, "POST", "/credential-vault", map[string]any{
		"credentials": []map[string]any{{"name": "tok", "source": map[string]any{"type": "inline", "value": real}}},
		"bindings": []map[string]any{{"name": "rogue", "match": map[string]any{"hosts": []string{rogueHost}},
			"auth": map[string]any{"type": "bearer", "credential": "tok"}}},
	}); r.Status != 201 {
		t.Fatalf("POST: %d %s", r.Status, r.Body)
	}
	out := strings.TrimSpace(stdoutOf(a.run("curl -sS --max-time 20 -w ' %{http_code}' https://" + rogueHost + "/api/x")))
	if !strings.HasSuffix(out, " 502") || !strings.Contains(out, "VAULT::UPSTREAM_UNAVAILABLE") {
		t.Fatalf("curl to a server whose certificate nobody trusts: %q, want 502 VAULT::UPSTREAM_UNAVAILABLE", out)
	}
	logs, _ := exec.Command("docker", "logs", rogue).CombinedOutput()
	if strings.Contains(string(logs), "/api/x") {
		t.Fatalf("the untrusted server received the request (only the test's own readiness probe may be there):\n%s", logs)
	}
}

// TestCredentialVaultReadOnlyRootfs: with read-only root filesystems the system bundle
// cannot change; the workload trusts the vault's CA through SSL_CERT_FILE (curl, Python)
// pointing at the bundle in the agent's volume.
func TestCredentialVaultReadOnlyRootfs(t *testing.T) {
	w := newVaultWorld(t, "SANDGATE_READ_ONLY_ROOTFS=on")
	id, a := w.vaultSandbox(nil)
	real := "sk-ro-" + randomHex(12)
	if r := w.g.vault(id, "POST", "/credential-vault", map[string]any{
		"credentials": []map[string]any{{"name": "tok", "source": map[string]any{"type": "inline", "value": real}}},
		"bindings": []map[string]any{{"name": "echo", "match": map[string]any{"hosts": []string{vaultEchoHost}},
			"auth": map[string]any{"type": "bearer", "credential": "tok"}}},
	}); r.Status != 201 {
		t.Fatalf("POST: %d %s", r.Status, r.Body)
	}
	ans, _ := curlEcho(t, a, "GET", "/api/x")
	if ans.Auth != sha256Hex([]byte("Bearer "+real)) {
		t.Fatalf("curl: the real token was not injected: %s", ans.Auth)
	}
	py := `python3 -c "import urllib.request, json; print(json.load(urllib.request.urlopen(urllib.request.Request('https://` + vaultEchoHost + `/api/py', headers={'Authorization': 'Bearer fake'})))['auth'])"`
	if out := strings.TrimSpace(stdoutOf(a.run(py))); out != sha256Hex([]byte("Bearer "+real)) {
		t.Fatalf("python: %q", out)
	}
}

// TestVaultPathTraversalNotInjected: a binding limited to /api/* must not put the real
// token on a request that an upstream which normalises paths (as nginx does) serves
// from outside /api/. Each path below matches /api/* as sent; the vault refuses it
// (400 VAULT::AMBIGUOUS_PATH) and the echo server never sees it.
// curl runs with --path-as-is, so that the dot segments reach the vault unchanged.
func TestVaultPathTraversalNotInjected(t *testing.T) {
	w := newVaultWorld(t)
	g := w.g
	real := "sk-traversal-" + randomHex(16)
	id, a := w.vaultSandbox(nil)
	if r := g.vault(id, "POST", "/credential-vault", map[string]any{
		"credentials": []map[string]any{{"name": "tok", "source": map[string]any{"type": "inline", "value": real}}},
		"bindings": []map[string]any{{"name": "api", "match": map[string]any{"hosts": []string{vaultEchoHost}, "paths": []string{"/api/*"}},
			"auth": map[string]any{"type": "bearer", "credential": "tok"}}},
	}); r.Status != 201 {
		t.Fatalf("POST /credential-vault: %d %s", r.Status, r.Body)
	}
	if ans, _ := curlEcho(t, a, "GET", "/api/models"); ans.Auth != sha256Hex([]byte("Bearer "+real)) {
		t.Fatalf("a request under /api/ did not carry the real token: auth sha256 %s", ans.Auth)
	}
	for _, path := range []string{
		"/api/../debug/echo",
		"/api/%2e%2e/debug/echo",
		"/api/%2E%2E/debug/echo",
		"/api/.%2e/debug/echo",
		"/api/x/../../debug/echo",
		"/api/..;/debug/echo",
		"/api/..%2fdebug/echo",
		"/api%2f..%2fdebug/echo",
		"/api/..%5cdebug/echo",
	} {
		t.Run(path, func(t *testing.T) {
			out := strings.TrimSpace(stdoutOf(a.run(fmt.Sprintf(
				"curl -sS --path-as-is --max-time 20 -w ' %%{http_code}' -H 'Authorization: Bearer fake-token-in-sandbox' 'https://%s%s'", vaultEchoHost, path))))
			if !strings.HasSuffix(out, " 400") || !strings.Contains(out, "VAULT::AMBIGUOUS_PATH") {
				t.Errorf("curl %s: %q, want 400 VAULT::AMBIGUOUS_PATH", path, out)
			}
		})
	}
	logs, _ := exec.Command("docker", "logs", w.echo).CombinedOutput()
	if strings.Contains(string(logs), "debug") {
		t.Errorf("the echo server received a traversal (real token's sha256 %s):\n%s", sha256Hex([]byte("Bearer "+real)), logs)
	}
	if n := strings.Count(string(logs), "auth-sha256="+sha256Hex([]byte("Bearer "+real))); n != 1 {
		t.Errorf("the echo server got the real token %d times, want once (GET /api/models):\n%s", n, logs)
	}
}

// TestPolicyBodiesWithTrailingDataRefused: a vault or egress policy body that ends with
// a stray '}' or ']' is refused by the gateway (400 with a code and a message) and
// changes nothing. The vault bodies carry a plain-http binding for a host the egress
// denies: relayed unjudged to an enforcer whose decoder accepts trailing data, they
// would install what the Rego vault policy refuses.
func TestPolicyBodiesWithTrailingDataRefused(t *testing.T) {
	w := newVaultWorld(t)
	g := w.g
	id, _ := w.vaultSandbox(nil)
	const steal = `{"name": "steal", "match": {"schemes": ["http"], "hosts": ["collect.attacker.test"]}, "auth": {"type": "bearer", "credential": "tok"}}`
	const cred = `{"name": "tok", "source": {"type": "inline", "value": "sk-trailing-value"}}`

	t.Run("vault POST", func(t *testing.T) {
		for _, body := range []string{
			`{"credentials": [` + cred + `], "bindings": [` + steal + `]}}`,
			`{"credentials": [` + cred + `], "bindings": [` + steal + `]}]`,
		} {
			expectError(t, g.vault(id, "POST", "/credential-vault", body), 400, "VAULT::INVALID_REQUEST")
			expectError(t, g.vault(id, "GET", "/credential-vault", nil), 404, "VAULT::NOT_FOUND")
		}
	})

	t.Run("vault PATCH", func(t *testing.T) {
		if r := g.vault(id, "POST", "/credential-vault", `{"credentials": [`+cred+`], "bindings": []}`); r.Status != 201 {
			t.Fatalf("POST /credential-vault: %d %s", r.Status, r.Body)
		}
		rev := g.vaultRevision(id)
		for _, body := range []string{
			`{"bindings": {"add": [` + steal + `]}}}`,
			`{"bindings": {"add": [` + steal + `]}}]`,
			"{\"bindings\": {\"add\": [" + steal + "]}}\n]",
		} {
			expectError(t, g.vault(id, "PATCH", "/credential-vault", body), 400, "VAULT::INVALID_REQUEST")
		}
		if got := g.vaultRevision(id); got != rev {
			t.Fatalf("revision %v after refused bodies, want %v", got, rev)
		}
		expectError(t, g.vault(id, "GET", "/credential-vault/bindings/steal", nil), 404, "VAULT::NOT_FOUND")
		// The same binding without the stray bracket meets the Rego vault policy.
		if r := g.vault(id, "PATCH", "/credential-vault", `{"bindings": {"add": [`+steal+`]}}`); r.Status != 403 {
			t.Fatalf("the binding alone: %d %s, want 403 from the vault policy", r.Status, r.Body)
		}
	})

	t.Run("egress policy", func(t *testing.T) {
		before := g.vault(id, "GET", "/policy", nil)
		if before.Status != 200 {
			t.Fatalf("GET /policy: %d %s", before.Status, before.Body)
		}
		for _, tc := range []struct{ method, body string }{
			{"PUT", `{"defaultAction": "allow"}}`},
			{"POST", `{"defaultAction": "allow"}]`},
			{"PATCH", `[{"action": "allow", "target": "collect.attacker.test"}]]`},
			{"PATCH", `{"egress": [{"action": "allow", "target": "collect.attacker.test"}]}}`},
			{"DELETE", `["` + vaultEchoHost + `"]]`},
		} {
			expectError(t, g.vault(id, tc.method, "/policy", tc.body), 400, "EGRESS::INVALID_POLICY")
		}
		if after := g.vault(id, "GET", "/policy", nil); string(after.Body) != string(before.Body) {
			t.Fatalf("the policy changed:\nbefore %s\nafter  %s", before.Body, after.Body)
		}
	})
}

// curlAnswer runs curl in the sandbox with the fake token and the given arguments (the
// URL among them) and returns the echo server's answer; a refusal of the vault (no
// JSON of the echo server) is fatal unless wantStatus names it, and then its body is
// returned in raw.
func curlAnswer(t testing.TB, a *agent, args string) (ans echoAnswer, status, raw string) {
	t.Helper()
	out := strings.TrimSpace(stdoutOf(a.run("curl -sS --max-time 20 -H 'Authorization: Bearer fake-token-in-sandbox' -w ' %{http_code}' " + args)))
	i := strings.LastIndex(out, " ")
	if i < 0 {
		t.Fatalf("curl %s: %q", args, out)
	}
	raw, status = out[:i], out[i+1:]
	if status == "200" {
		if err := json.Unmarshal([]byte(raw), &ans); err != nil {
			t.Fatalf("curl %s: %v; output:\n%s", args, err, out)
		}
	}
	return ans, status, raw
}

// TestCredentialVaultPlainHTTPAndPinnedAddresses: with the operator's vault_schemes
// allowing http, a binding for https and http injects over plain HTTP as over TLS; and
// a workload that never asks DNS but pins the bound host's address itself (`curl
// --resolve`, for port 443 and for port 80) is intercepted and injected, because the
// enforcer resolves bound hosts itself and intercepts by address. The same address
// under another server name or Host, a path outside the binding's, and a path an
// upstream may normalise into another get nothing. The default vault_schemes refusing
// http is in TestCredentialVault.
func TestCredentialVaultPlainHTTPAndPinnedAddresses(t *testing.T) {
	w := newVaultWorld(t, "SANDGATE_VAULT_SCHEMES=https,http")
	g := w.g
	real := "sk-plain-" + randomHex(16)
	id, a := w.vaultSandbox(nil)
	if r := g.vault(id, "POST", "/credential-vault", map[string]any{
		"credentials": []map[string]any{{"name": "tok", "source": map[string]any{"type": "inline", "value": real}}},
		"bindings": []map[string]any{
			{"name": "api", "match": map[string]any{"schemes": []string{"https", "http"}, "ports": []int{443, 80}, "hosts": []string{vaultEchoHost}, "paths": []string{"/api/*"}},
				"auth": map[string]any{"type": "bearer", "credential": "tok"}},
			{"name": "tls-only", "match": map[string]any{"hosts": []string{vaultEchoHost}, "paths": []string{"/tls/*"}},
				"auth": map[string]any{"type": "bearer", "credential": "tok"}},
		},
	}); r.Status != 201 {
		t.Fatalf("POST /credential-vault: %d %s", r.Status, r.Body)
	}
	injected, untouched := sha256Hex([]byte("Bearer "+real)), sha256Hex([]byte("Bearer fake-token-in-sandbox"))
	https443 := fmt.Sprintf("--resolve %s:443:%s ", vaultEchoHost, w.echoIP)
	http80 := fmt.Sprintf("--resolve %s:80:%s ", vaultEchoHost, w.echoIP)

	// No lookup of the echo server's name from the sandbox before these: the workload
	// reaches its address only because it names it itself.
	for _, tt := range []struct {
		name, args string
		status     string
		auth       string // the echo server's answer, for a 200
		code       string // the vault's refusal, otherwise
	}{
		{"pinned https is injected", https443 + "https://" + vaultEchoHost + "/api/pinned", "200", injected, ""},
		{"pinned plain http is injected", http80 + "http://" + vaultEchoHost + "/api/pinned", "200", injected, ""},
		{"pinned https under another server name is spliced, not injected", fmt.Sprintf("-k --resolve %s:443:%s https://%s/api/other-name", vaultPlainHost, w.echoIP, vaultPlainHost), "200", untouched, ""},
		{"pinned plain http under another Host is not injected", fmt.Sprintf("--resolve %s:80:%s http://%s/api/other-name", vaultPlainHost, w.echoIP, vaultPlainHost), "200", untouched, ""},
		{"pinned https with a Host other than the server name is refused", https443 + "-H 'Host: " + vaultPlainHost + "' https://" + vaultEchoHost + "/api/host", "421", "", "VAULT::HOST_MISMATCH"},
		{"plain http outside the binding's paths is not injected", http80 + "http://" + vaultEchoHost + "/other", "200", untouched, ""},
		{"plain http to an https-only binding is not injected", http80 + "http://" + vaultEchoHost + "/tls/x", "200", untouched, ""},
		{"plain http dot segments are refused", http80 + "--path-as-is http://" + vaultEchoHost + "/api/../debug/echo", "400", "", "VAULT::AMBIGUOUS_PATH"},
		{"plain http encoded dots are refused", http80 + "--path-as-is http://" + vaultEchoHost + "/api/%2e%2e/debug/echo", "400", "", "VAULT::AMBIGUOUS_PATH"},
		{"plain http encoded slashes are refused", http80 + "--path-as-is 'http://" + vaultEchoHost + "/api%2f..%2fdebug/echo'", "400", "", "VAULT::AMBIGUOUS_PATH"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ans, status, raw := curlAnswer(t, a, tt.args)
			if status != tt.status || (tt.auth != "" && ans.Auth != tt.auth) || (tt.code != "" && !strings.Contains(raw, tt.code)) {
				t.Fatalf("answer %s %q (auth sha256 %s), want %s %s%s (injected is %s)", status, raw, ans.Auth, tt.status, tt.auth, tt.code, injected)
			}
		})
	}

	t.Run("plain http after a DNS lookup is injected", func(t *testing.T) {
		if ans, status, raw := curlAnswer(t, a, "http://"+vaultEchoHost+"/api/looked-up"); status != "200" || ans.Auth != injected {
			t.Fatalf("answer %s %q (auth sha256 %s), want the real token", status, raw, ans.Auth)
		}
	})

	logs, _ := exec.Command("docker", "logs", w.echo).CombinedOutput()
	if strings.Contains(string(logs), "debug") {
		t.Errorf("the echo server received a traversal:\n%s", logs)
	}
	if strings.Contains(g.proc.Logs(), real) {
		t.Error("the gateway's log holds the credential's value")
	}
	if strings.Contains(enforcerLogs(id), real) {
		t.Error("the enforcer's log holds the credential's value")
	}
}
