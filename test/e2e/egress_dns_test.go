package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

// startZoneResolver runs testenv.DNSZoneScript on network, answering
// allowed.sandgate-test. with answer, and returns the container's name and address
// once it listens.
func startZoneResolver(t *testing.T, network, answer string) (name, addr string) {
	t.Helper()
	name = "sg-e2e-zone-" + randomHex(4)
	if out, err := exec.Command("docker", "run", "-d", "--name", name, "--network", network, "--label", "sandgate-e2e=server",
		baseImage, "python3", "-c", testenv.DNSZoneScript, answer).CombinedOutput(); err != nil {
		t.Fatalf("start resolver: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	waitFor(t, 20*time.Second, func() bool {
		out, _ := exec.Command("docker", "logs", name).CombinedOutput()
		return strings.Contains(string(out), "ready")
	}, "the test's DNS server to listen")
	return name, dockerInspect(t, "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name)
}

// TestSandboxDNSServers: with SANDGATE_SANDBOX_DNS naming a DNS server the test runs,
// a sandbox allowed an external name resolves it (Docker's embedded resolver forwards
// the query to that server, through the enforcer's second proxy) and reaches its
// address; a denied name is refused, also when the workload asks the server itself,
// and the server is never asked it.
func TestSandboxDNSServers(t *testing.T) {
	e := newEnv(t, startRedis(t))
	if out, err := exec.Command("docker", "network", "create", "--label", "sandgate.io/network=sandboxes", e.Network).CombinedOutput(); err != nil {
		t.Fatalf("create network: %v: %s", err, out)
	}
	web := startTestServer(t, e.Network, nil)
	resolverName, resolver := startZoneResolver(t, e.Network, web)
	w := &egressWorld{t: t, e: e, servers: map[string]string{"web": web}}
	w.g = e.startGateway("SANDGATE_SANDBOX_DNS=" + resolver)
	s := w.sandbox(map[string]any{"defaultAction": "deny", "egress": []map[string]string{
		{"action": "allow", "target": "allowed.sandgate-test"},
	}})

	if got := s.sh("getent hosts allowed.sandgate-test | awk '{print $1}'"); got != web {
		t.Fatalf("getent hosts allowed.sandgate-test = %q, want %s", got, web)
	}
	if got := s.httpStatus("allowed.sandgate-test"); got != "200" {
		t.Fatalf("GET http://allowed.sandgate-test:8000/ = %s, want 200", got)
	}
	if got := s.sh("getent hosts denied.sandgate-test || echo none"); got != "none" {
		t.Fatalf("getent hosts denied.sandgate-test = %q", got)
	}
	for _, proto := range []string{"udp", "tcp"} {
		wantPrefix(t, proto+" query of the denied name", s.query("127.0.0.11", "denied.sandgate-test", proto), "rcode=3")
		wantPrefix(t, proto+" query of the denied name to the DNS server", s.query(resolver, "denied.sandgate-test", proto), "rcode=3")
	}
	out, err := exec.Command("docker", "logs", resolverName).CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "ready" && line != "asked allowed.sandgate-test" {
			t.Fatalf("the sandboxes' DNS server was %s", line)
		}
	}
}
