package e2e

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/test/testenv"
)

// httpsLatencyScript makes one HTTPS request (the handshake) and then N more over the
// same connection, printing the median and the 99th percentile of those N in
// nanoseconds. With a CA file it
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
print(ts[len(ts) // 2], ts[min(len(ts) - 1, len(ts) * 99 // 100)])
`

// BenchmarkVaultHTTPS measures the median latency of an HTTPS request after the first
// handshake, from inside a sandbox, to an echo server the test starts:
//
//   - sandgate-intercepted: a sandbox with the credential vault, to a host a binding
//     names (the request is terminated, matched, injected and sent on by the enforcer);
//   - raw-vault-off: the same request from a sandbox with the same policy and no vault
//     (the baseline);
//   - sandgate-unbound-host: the vault sandbox to a host no binding names (another
//     server, another address), beside raw-unbound-host-vault-off, the same request
//     from the sandbox without the vault: the two must cost the same.
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
	type result struct{ p50, p99 float64 }
	results := map[string]result{}
	measure := func(b *testing.B, name string, a *agent, host, cafile string) {
		out := strings.TrimSpace(stdoutOf(a.run(fmt.Sprintf("python3 /tmp/https.py %s /api/x %d %s 2>&1", host, b.N, cafile))))
		f := strings.Fields(out)
		var p50, p99 float64
		var err error
		if len(f) == 2 {
			if p50, err = strconv.ParseFloat(f[0], 64); err == nil {
				p99, err = strconv.ParseFloat(f[1], 64)
			}
		}
		if len(f) != 2 || err != nil {
			b.Fatalf("latency script: %q", out)
		}
		results[name] = result{p50, p99}
		b.ReportMetric(p50, "ns/p50-request")
	}
	b.Run("sandgate-intercepted", func(b *testing.B) { measure(b, "intercepted", vaulted, vaultEchoHost, "") })
	b.Run("raw-vault-off", func(b *testing.B) { measure(b, "raw", plain, vaultEchoHost, "/tmp/upstream-ca.pem") })
	b.Run("sandgate-unbound-host", func(b *testing.B) { measure(b, "unbound", vaulted, vaultPlainHost, "/tmp/upstream-ca.pem") })
	b.Run("raw-unbound-host-vault-off", func(b *testing.B) { measure(b, "raw-unbound", plain, vaultPlainHost, "/tmp/upstream-ca.pem") })
	raw, ok := results["raw"]
	if !ok {
		return
	}
	ms := func(ns float64) float64 { return ns / 1e6 }
	if r, ok := results["intercepted"]; ok {
		testenv.RecordFigure(b, testenv.Figure{Name: "vault HTTPS request, intercepted (after the handshake)", Unit: "ms",
			P50: ms(r.p50), P99: ms(r.p99), BaselineP50: ms(raw.p50), Target: "<= baseline + 2"})
	}
	if r, ok := results["unbound"]; ok {
		base := raw
		if rb, ok := results["raw-unbound"]; ok {
			base = rb
		}
		testenv.RecordFigure(b, testenv.Figure{Name: "vault sandbox, HTTPS request to a host no binding names", Unit: "ms",
			P50: ms(r.p50), P99: ms(r.p99), BaselineP50: ms(base.p50), Target: "<= baseline"})
	}
}
