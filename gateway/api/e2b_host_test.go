package api

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway"
)

// e2bTestDomain is the preview domain of the host-form tests: a .test name nothing
// resolves, sent only in the Host header of requests to the test's own listener.
const e2bTestDomain = "e2b-previews.test"

// callHost sends a request to the fixture's listener with host in its Host header.
func callHost(t *testing.T, f *e2bFixture, method, host, pathAndQuery string, body io.Reader, hdr map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.URL+pathAndQuery, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// e2bHostOf is E2B's get_host(port) of a sandbox: {port}-{id}.<domain>.
func e2bHostOf(id string, port int) string {
	return strconv.Itoa(port) + "-" + id + "." + e2bTestDomain
}

// TestE2BHostRouting: with a preview domain, the create answers it as the sandbox's
// domain and a request for {port}-{id}.<domain> is routed as the door's headers route
// it, with the same tokens; a host naming one sandbox never opens with another's.
func TestE2BHostRouting(t *testing.T) {
	f := startE2BFixtureWith(t, gateway.Config{PreviewDomain: e2bTestDomain})
	status, body := call(t, "POST", f.URL+"/e2b/v2/sandboxes", map[string]any{"templateID": "base"}, f.TenantA)
	var created struct {
		SandboxID string  `json:"sandboxID"`
		Domain    *string `json:"domain"`
	}
	if err := json.Unmarshal(body, &created); status != http.StatusCreated || err != nil {
		t.Fatalf("create: %d %s", status, body)
	}
	call(t, "DELETE", f.URL+"/e2b/sandboxes/"+created.SandboxID, nil, f.Admin)
	if created.Domain == nil || *created.Domain != e2bTestDomain {
		t.Errorf("the create answers domain %v, want %q", created.Domain, e2bTestDomain)
	}

	a := f.create(t, f.TenantA, nil)
	status, body = call(t, "GET", f.URL+"/e2b/sandboxes/"+a.SandboxID, nil, f.TenantA)
	if err := json.Unmarshal(body, &created); status != 200 || err != nil || created.Domain == nil || *created.Domain != e2bTestDomain {
		t.Errorf("GET /sandboxes/{id}: %d %s, want domain %q", status, body, e2bTestDomain)
	}
	other := f.create(t, f.TenantA, nil)
	b := f.create(t, f.TenantB, nil)
	const port = 8000
	startUpstreamProcess(t, net.JoinHostPort(f.inspect(a.SandboxID), strconv.Itoa(port)))

	status, body = callHost(t, f, "GET", e2bHostOf(a.SandboxID, port)+":443", "/headers?x=1", nil, map[string]string{"E2B-Traffic-Access-Token": *a.TrafficAccessToken})
	var echo struct {
		Path    string
		Headers map[string][]string
	}
	if err := json.Unmarshal(body, &echo); status != 200 || err != nil || echo.Path != "/headers?x=1" {
		t.Fatalf("the sandbox's port by host with its traffic token: %d %s", status, body)
	}
	if _, ok := echo.Headers["E2b-Traffic-Access-Token"]; ok {
		t.Error("the sandbox received the traffic token")
	}
	if status, body = callHost(t, f, "GET", e2bHostOf(a.SandboxID, e2bEnvdPort), "/health", nil, map[string]string{"X-Access-Token": a.EnvdAccessToken}); status != http.StatusNoContent {
		t.Errorf("envd's health by host with its token: %d %s, want envd's 204", status, body)
	}
	if status, body = callHost(t, f, "GET", strings.ToUpper(e2bHostOf(a.SandboxID, e2bCodeInterpreterPort)), "/health", nil, map[string]string{"E2B-Traffic-Access-Token": *a.TrafficAccessToken}); status != http.StatusOK {
		t.Errorf("the code interpreter's health by host with the traffic token: %d %s", status, body)
	}

	refusals := []struct {
		name string
		host string
		hdr  map[string]string
		want int
	}{
		{"envd without a token", e2bHostOf(a.SandboxID, e2bEnvdPort), nil, 401},
		{"envd with another sandbox's token", e2bHostOf(a.SandboxID, e2bEnvdPort), map[string]string{"X-Access-Token": other.EnvdAccessToken}, 403},
		{"a host naming A with tenant B's envd token", e2bHostOf(a.SandboxID, e2bEnvdPort), map[string]string{"X-Access-Token": b.EnvdAccessToken}, 403},
		{"a host naming A with tenant B's traffic token", e2bHostOf(a.SandboxID, port), map[string]string{"E2B-Traffic-Access-Token": *b.TrafficAccessToken}, 403},
		{"a host naming A with B's tokens both", e2bHostOf(a.SandboxID, port), map[string]string{"X-Access-Token": b.EnvdAccessToken, "E2B-Traffic-Access-Token": *b.TrafficAccessToken}, 403},
		{"the code interpreter with the traffic token of another", e2bHostOf(a.SandboxID, e2bCodeInterpreterPort), map[string]string{"E2B-Traffic-Access-Token": *other.TrafficAccessToken}, 403},
		{"port without a token", e2bHostOf(a.SandboxID, port), nil, 401},
		{"the agent's own port", e2bHostOf(a.SandboxID, 44772), map[string]string{"X-Access-Token": a.EnvdAccessToken}, 403},
		{"the enforcer's port", e2bHostOf(a.SandboxID, 18080), map[string]string{"X-Access-Token": a.EnvdAccessToken}, 403},
		{"an unknown sandbox", e2bHostOf("00000000-0000-4000-8000-000000000000", e2bEnvdPort), map[string]string{"X-Access-Token": a.EnvdAccessToken}, 502},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			status, body := callHost(t, f, "GET", tt.host, "/headers", nil, tt.hdr)
			wantE2BError(t, tt.name, status, body, tt.want)
		})
	}

	// The preview form {id}-{port} under the same domain is still a preview, which E2B's
	// tokens do not open.
	status, body = callHost(t, f, "GET", a.SandboxID+"-"+strconv.Itoa(port)+"."+e2bTestDomain, "/headers", nil, map[string]string{"E2B-Traffic-Access-Token": *a.TrafficAccessToken})
	if status == 200 {
		t.Errorf("a preview host with an E2B traffic token: %d %s, want a refusal", status, body)
	}
}

// sdkFileSignature is the signature E2B's Python SDK (e2b/sandbox/signature.py) makes for
// a file URL: v1_ and the unpadded base64 of SHA-256 over
// path:operation:user:token[:expiration].
func sdkFileSignature(path, operation, user, envdToken string, expiration int64) string {
	material := path + ":" + operation + ":" + user + ":" + envdToken
	if expiration != 0 {
		material += ":" + strconv.FormatInt(expiration, 10)
	}
	sum := sha256.Sum256([]byte(material))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// signedFilesURL is /files?… as the SDK's download_url and upload_url write it.
func signedFilesURL(path, user, signature string, expiration int64) string {
	q := url.Values{"path": {path}, "signature": {signature}}
	if user != "" {
		q.Set("username", user)
	}
	if expiration != 0 {
		q.Set("signature_expiration", strconv.FormatInt(expiration, 10))
	}
	return "/files?" + q.Encode()
}

// TestE2BSignedFileURLs: a signed file URL opens envd's /files without X-Access-Token,
// by host and by the door's headers, for exactly the path, operation, user, expiry
// and sandbox it was signed for.
func TestE2BSignedFileURLs(t *testing.T) {
	f := startE2BFixtureWith(t, gateway.Config{PreviewDomain: e2bTestDomain})
	a := f.create(t, f.TenantA, nil)
	other := f.create(t, f.TenantA, nil)
	b := f.create(t, f.TenantB, nil)
	dir := t.TempDir()
	file, elsewhere := filepath.Join(dir, "signed.txt"), filepath.Join(dir, "other.txt")
	if err := os.WriteFile(elsewhere, []byte("not for this signature"), 0o644); err != nil {
		t.Fatal(err)
	}
	envdHost := e2bHostOf(a.SandboxID, e2bEnvdPort)
	later := time.Now().Add(time.Hour).Unix()

	up := signedFilesURL(file, "", sdkFileSignature(file, "write", "", a.EnvdAccessToken, later), later)
	status, body := callHost(t, f, "POST", envdHost, up, strings.NewReader("hello signed"), map[string]string{"Content-Type": "application/octet-stream"})
	if status != http.StatusOK {
		t.Fatalf("a signed upload by host: %d %s", status, body)
	}
	if got, err := os.ReadFile(file); err != nil || string(got) != "hello signed" {
		t.Fatalf("the upload wrote %q, %v", got, err)
	}
	down := signedFilesURL(file, "", sdkFileSignature(file, "read", "", a.EnvdAccessToken, 0), 0)
	if status, body = callHost(t, f, "GET", envdHost, down, nil, nil); status != 200 || string(body) != "hello signed" {
		t.Errorf("a signed download by host: %d %s", status, body)
	}
	// The door's headers name the sandbox as well as its host does.
	status, body = call(t, "GET", f.URL+down, nil, map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": strconv.Itoa(e2bEnvdPort)})
	if status != 200 || string(body) != "hello signed" {
		t.Errorf("a signed download by the door's headers: %d %s", status, body)
	}

	past := time.Now().Add(-time.Minute).Unix()
	refusals := []struct {
		name   string
		method string
		host   string
		target string
		want   int
	}{
		{"expired", "GET", envdHost, signedFilesURL(file, "", sdkFileSignature(file, "read", "", a.EnvdAccessToken, past), past), 401},
		{"an expiry moved later", "GET", envdHost, signedFilesURL(file, "", sdkFileSignature(file, "read", "", a.EnvdAccessToken, past), later), 403},
		{"an expiry removed", "GET", envdHost, signedFilesURL(file, "", sdkFileSignature(file, "read", "", a.EnvdAccessToken, past), 0), 403},
		{"another path", "GET", envdHost, signedFilesURL(elsewhere, "", sdkFileSignature(file, "read", "", a.EnvdAccessToken, 0), 0), 403},
		{"a read signature for a write", "POST", envdHost, signedFilesURL(file, "", sdkFileSignature(file, "read", "", a.EnvdAccessToken, 0), 0), 403},
		{"a write signature for a read", "GET", envdHost, signedFilesURL(file, "", sdkFileSignature(file, "write", "", a.EnvdAccessToken, 0), 0), 403},
		{"another user", "GET", envdHost, signedFilesURL(file, "root", sdkFileSignature(file, "read", "", a.EnvdAccessToken, 0), 0), 403},
		{"another sandbox's token", "GET", envdHost, signedFilesURL(file, "", sdkFileSignature(file, "read", "", other.EnvdAccessToken, 0), 0), 403},
		{"tenant B's token on A's host", "GET", envdHost, signedFilesURL(file, "", sdkFileSignature(file, "read", "", b.EnvdAccessToken, 0), 0), 403},
		{"A's signature on B's host", "GET", e2bHostOf(b.SandboxID, e2bEnvdPort), signedFilesURL(file, "", sdkFileSignature(file, "read", "", a.EnvdAccessToken, 0), 0), 403},
		{"the traffic token's signature", "GET", envdHost, signedFilesURL(file, "", sdkFileSignature(file, "read", "", *a.TrafficAccessToken, 0), 0), 403},
		{"a forged signature", "GET", envdHost, signedFilesURL(file, "", "v1_forged", 0), 403},
		{"a signature for another route", "GET", envdHost, strings.Replace(signedFilesURL(file, "", sdkFileSignature(file, "read", "", a.EnvdAccessToken, 0), 0), "/files", "/health", 1), 403},
		{"a signature on the code interpreter", "GET", e2bHostOf(a.SandboxID, e2bCodeInterpreterPort), signedFilesURL(file, "", sdkFileSignature(file, "read", "", a.EnvdAccessToken, 0), 0), 401},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			status, body := callHost(t, f, tt.method, tt.host, tt.target, strings.NewReader("overwritten"), map[string]string{"Content-Type": "application/octet-stream"})
			wantE2BError(t, tt.name, status, body, tt.want)
		})
	}
	if got, _ := os.ReadFile(file); string(got) != "hello signed" {
		t.Errorf("after the refusals the file holds %q", got)
	}
}
