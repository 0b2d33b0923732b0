package e2e

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// fakeAgentScript is what answers at a sandbox's address once another machine on the
// bridge holds it: it records every request's head (one JSON line per request on
// stdout) and answers each as a willing agent would.
const fakeAgentScript = `import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def handle_one(self):
        print(json.dumps({"method": self.command, "path": self.path, "headers": dict(self.headers)}), flush=True)
        body = b'pong-from-the-fake'
        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)
    do_GET = do_POST = do_PUT = do_DELETE = handle_one
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(('0.0.0.0', 44772), H).serve_forever()
`

// netnsOwner is the container whose network namespace sandbox id's workload is in (a
// namespace holder, or the workload itself).
func netnsOwner(t *testing.T, id string) string {
	t.Helper()
	mode := dockerInspect(t, "{{.HostConfig.NetworkMode}}", "sandgate-"+id)
	if owner, ok := strings.CutPrefix(mode, "container:"); ok {
		return owner
	}
	return "sandgate-" + id
}

// TestAgentAddressTakenOver attacks the gateway ↔ agent link from the bridge: sandbox
// A's namespace leaves the network and a container the test starts (a stand-in for a
// sandbox that took its neighbour's address; the bridge's own anti-spoofing is not
// what this test is about) takes A's IP and MAC and answers on the agent's port. The
// gateway's calls to A then reach the fake: they must carry nothing reusable (neither
// A's agent token nor the caller's credentials, and what they carry is refused when
// replayed to A's real agent), and the fake's answer must not be believed (the client
// gets an error, never the fake's body). Seen failing before the gateway signed agent
// calls: the fake got A's agent token and the client got the fake's answer.
func TestAgentAddressTakenOver(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{})
	a := g.agent(id)
	if r := a.call("GET", "/ping", nil); r.Status != 200 {
		t.Fatalf("ping before: %d %s", r.Status, r.Body)
	}
	agentToken := agentTokenOf(t, id)
	owner := netnsOwner(t, id)
	ip := dockerInspect(t, "{{(index .NetworkSettings.Networks \""+e.Network+"\").IPAddress}}", owner)
	mac := dockerInspect(t, "{{(index .NetworkSettings.Networks \""+e.Network+"\").MacAddress}}", owner)
	gatewayIP := dockerInspect(t, "{{(index .IPAM.Config 0).Gateway}}", e.Network)
	_, prefixLen, _ := strings.Cut(dockerInspect(t, "{{(index .IPAM.Config 0).Subnet}}", e.Network), "/")
	if ip == "" || mac == "" {
		t.Fatalf("sandbox %s: address %q, MAC %q", id, ip, mac)
	}

	if out, err := exec.Command("docker", "network", "disconnect", "-f", e.Network, owner).CombinedOutput(); err != nil {
		t.Fatalf("disconnect: %v: %s", err, out)
	}
	spoofer := "sg-e2e-spoofer-" + randomHex(4)
	script := "ip addr flush dev eth0 && ip link set eth0 down && ip link set eth0 address " + mac +
		" && ip link set eth0 up && ip addr add " + ip + "/" + prefixLen + " dev eth0 && " +
		"python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b\"x\", (\"" + gatewayIP + "\", 9))' ; " +
		"exec python3 -c \"$FAKE\""
	if out, err := exec.Command("docker", "run", "-d", "--name", spoofer, "--network", e.Network, "--cap-add", "NET_ADMIN",
		"--label", "sandgate-e2e=spoofer", "-e", "FAKE="+fakeAgentScript, baseImage, "bash", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("start the spoofer: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", spoofer).Run() })

	// The gateway's calls to A now reach the fake (a GET, which a broken keep-alive
	// connection retries on a new one).
	var captured []map[string]any
	var last response
	waitFor(t, 30*time.Second, func() bool {
		last = a.call("GET", "/ping", nil)
		logs, _ := exec.Command("docker", "logs", spoofer).Output()
		captured = nil
		for _, line := range strings.Split(strings.TrimSpace(string(logs)), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil {
				captured = append(captured, m)
			}
		}
		return len(captured) > 0
	}, "the gateway's call to reach the fake agent")
	if last.Status == 200 || strings.Contains(string(last.Body), "pong-from-the-fake") {
		t.Fatalf("the gateway relayed the fake agent's answer: %d %s", last.Status, last.Body)
	}
	if last.Status != http.StatusBadGateway {
		t.Fatalf("call answered by the fake: %d %s, want 502", last.Status, last.Body)
	}
	raw, _ := json.Marshal(captured)
	for _, secret := range []string{agentToken, g.APIKey, a.headers["X-EXECD-ACCESS-TOKEN"]} {
		if secret != "" && strings.Contains(string(raw), secret) {
			t.Fatalf("the fake agent captured a secret: %s", raw)
		}
	}

	// What it captured is worth nothing to A's real agent.
	_ = exec.Command("docker", "rm", "-f", spoofer).Run()
	if out, err := exec.Command("docker", "network", "connect", e.Network, owner).CombinedOutput(); err != nil {
		t.Fatalf("reconnect: %v: %s", err, out)
	}
	realIP := dockerInspect(t, "{{(index .NetworkSettings.Networks \""+e.Network+"\").IPAddress}}", owner)
	headers, _ := captured[0]["headers"].(map[string]any)
	path, _ := captured[0]["path"].(string)
	req, _ := http.NewRequest("GET", "http://"+realIP+":44772"+path, nil)
	for k, v := range headers {
		if s, ok := v.(string); ok && !strings.EqualFold(k, "Host") && !strings.EqualFold(k, "Content-Length") {
			req.Header.Set(k, s)
		}
	}
	// A diverted request never reached A's agent, so A would take it once, within the
	// freshness window (agentauth.MaxSkew): the head is signed, so it does only what the
	// gateway asked, and the spoofer cannot send it there itself (inter-container
	// traffic is off on the bridge; docs/security.md). Delivered once, it is refused
	// ever after.
	send := func() int {
		var status int
		waitFor(t, 20*time.Second, func() bool {
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req.Clone(req.Context()))
			if err != nil {
				return false
			}
			resp.Body.Close()
			status = resp.StatusCode
			return true
		}, "A's agent to answer again")
		return status
	}
	_ = send()
	if status := send(); status != http.StatusUnauthorized {
		t.Fatalf("a captured request replayed to the real agent: %d, want 401", status)
	}
}
