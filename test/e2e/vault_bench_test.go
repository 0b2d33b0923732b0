package e2e

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// httpsLatencyScript makes one HTTPS request (the handshake) and then N more over the
// same connection, printing the median of those N in nanoseconds. With a CA file it
// trusts only that CA, else the sandbox's default trust store.
const httpsLatencyScript = `import http.client, ssl, sys, time
host, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = ssl.create_default_context(cafile=sys.argv[4]) if len(sys.argv) > 4 else ssl.create_default_context()
c = http.client.HTTPSConnection(host, 443, context=ctx, timeout=20)
def one():
    c.request('GET', path, headers={'Authorization': 'Bearer fake'})
    r = c.getresponse()
    r.read()
    if r.status != 200:
        raise SystemExit('status %d' % r.status)
one()
ts = []
for _ in range(n):
    t = time.perf_counter_ns()
    one()
    ts.append(time.perf_counter_ns() - t)
ts.sort()
print(ts[len(ts) // 2])
`

// BenchmarkVaultHTTPS measures the median latency of an HTTPS request after the first
// handshake, from inside a sandbox, to an echo server the test starts:
//
//   - sandgate-intercepted: a sandbox with the credential vault, to a host a binding
//     names (the request is terminated, matched, injected and sent on by the enforcer);
//   - raw-vault-off: the same request from a sandbox with the same policy and no vault
//     (the baseline);
//   - sandgate-unbound-host: the vault sandbox to a host no binding names (another
//     server, another address), which must cost what raw-vault-off costs.
func BenchmarkVaultHTTPS(b *testing.B) {
	w := newVaultWorld(b)
	w.startEcho(vaultPlainHost)
	policy := map[string]any{"defaultAction": "deny", "egress": []map[string]any{
		{"action": "allow", "target": vaultEchoHost}, {"action": "allow", "target": vaultPlainHost}}}
	vaultID := w.g.createSandbox(map[string]any{"networkPolicy": policy, "credentialProxy": map[string]any{"enabled": true}})
	plainID := w.g.createSandbox(map[string]any{"networkPolicy": policy})
	vaulted, plain := w.g.agent(vaultID), w.g.agent(plainID)
	r := w.g.vault(vaultID, "POST", "/credential-vault", map[string]any{
		"credentials": []map[string]any{{"name": "tok", "source": map[string]any{"type": "inline", "value": "bench-" + randomHex(8)}}},
		"bindings": []map[string]any{{"name": "echo", "match": map[string]any{"hosts": []string{vaultEchoHost}, "paths": []string{"/api/*"}},
			"auth": map[string]any{"type": "bearer", "credential": "tok"}}},
	})
	if r.Status != 201 {
		b.Fatalf("create the vault: %d %s", r.Status, r.Body)
	}
	install := "echo " + base64.StdEncoding.EncodeToString([]byte(httpsLatencyScript)) + " | base64 -d > /tmp/https.py && echo " +
		base64.StdEncoding.EncodeToString(w.ca.caPEM) + " | base64 -d > /tmp/upstream-ca.pem"
	for _, a := range []*agent{vaulted, plain} {
		stdoutOf(a.run(install))
	}
	measure := func(b *testing.B, a *agent, host, cafile string) {
		out := strings.TrimSpace(stdoutOf(a.run(fmt.Sprintf("python3 /tmp/https.py %s /api/x %d %s 2>&1", host, b.N, cafile))))
		ns, err := strconv.ParseFloat(out, 64)
		if err != nil {
			b.Fatalf("latency script: %q", out)
		}
		b.ReportMetric(ns, "ns/p50-request")
	}
	b.Run("sandgate-intercepted", func(b *testing.B) { measure(b, vaulted, vaultEchoHost, "") })
	b.Run("raw-vault-off", func(b *testing.B) { measure(b, plain, vaultEchoHost, "/tmp/upstream-ca.pem") })
	b.Run("sandgate-unbound-host", func(b *testing.B) { measure(b, vaulted, vaultPlainHost, "/tmp/upstream-ca.pem") })
}
