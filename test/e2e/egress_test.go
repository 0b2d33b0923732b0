package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

// Egress tests. Every target is a server the test starts itself: a container of the
// base image running `python3 -m http.server` on the test's own Docker network, named
// through network aliases (allowed.test, a.example.test, …) that Docker's embedded
// resolver (127.0.0.11, the enforcer's upstream) answers. Nothing leaves the machine
// even if enforcement fails.
//
// The sandbox network is created by the test, before the gateway starts, as a plain
// bridge (inter-container communication on), and the gateway adopts it: the gateway's
// own default network disables ICC, which would block sandbox → test server on the same
// bridge whatever the policy says, and a server on another network is unreachable by
// Docker's network isolation. With ICC on, the enforcer is the only thing between a
// sandbox and the servers, which is exactly what these tests need to observe.

// latencyScript times N DNS lookups (mode dns) or TCP connects (mode connect) inside a
// container and prints the mean in nanoseconds.
const latencyScript = `import sys, socket, struct, time, random
mode, target, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def lookup(server, name):
    q = struct.pack('>HHHHHH', random.randint(0, 65535), 0x0100, 1, 0, 0, 0)
    q += b''.join(bytes([len(l)]) + l.encode() for l in name.split('.')) + b'\x00' + struct.pack('>HH', 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.sendto(q, (server, 53)); r = s.recv(4096); s.close()
    if r[3] & 15 != 0:
        raise SystemExit('rcode %d' % (r[3] & 15))
start = time.perf_counter_ns()
for _ in range(n):
    if mode == 'dns':
        lookup('127.0.0.11', target)
    else:
        host, port = target.split(':')
        c = socket.create_connection((host, int(port)), timeout=3); c.close()
print((time.perf_counter_ns() - start) // n)
`

// egressWorld is one gateway on a test-made network with the test's servers on it.
type egressWorld struct {
	t       testing.TB
	e       *env
	g       *gateway
	servers map[string]string // server name → IP
}

// newEgressWorld creates the network, starts one server per entry of servers (name →
// network aliases), then a gateway with the given extra environment, which may refer to
// server IPs as {ip:name}.
func newEgressWorld(t testing.TB, servers map[string][]string, gatewayEnv ...string) *egressWorld {
	t.Helper()
	return newEgressWorldOn(t, newEnv(t, startRedis(t)), servers, gatewayEnv...)
}

// newEgressWorldOn is newEgressWorld in the environment e (its store: Redis, or the
// embedded store when e has none).
func newEgressWorldOn(t testing.TB, e *env, servers map[string][]string, gatewayEnv ...string) *egressWorld {
	t.Helper()
	if out, err := exec.Command("docker", "network", "create", "--label", "sandgate.io/network=sandboxes", e.Network).CombinedOutput(); err != nil {
		t.Fatalf("create network: %v: %s", err, out)
	}
	w := &egressWorld{t: t, e: e, servers: map[string]string{}}
	for name, aliases := range servers {
		w.servers[name] = startTestServer(t, e.Network, aliases)
	}
	for i, kv := range gatewayEnv {
		for name, ip := range w.servers {
			kv = strings.ReplaceAll(kv, "{ip:"+name+"}", ip)
		}
		gatewayEnv[i] = kv
	}
	w.g = e.startGateway(gatewayEnv...)
	return w
}

// startTestServer runs an HTTP server container on network with the given aliases and
// returns its address once it answers.
func startTestServer(t testing.TB, network string, aliases []string) string {
	t.Helper()
	name := "sg-e2e-srv-" + randomHex(4)
	args := []string{"run", "-d", "--name", name, "--network", network, "--label", "sandgate-e2e=server"}
	for _, a := range aliases {
		args = append(args, "--network-alias", a)
	}
	args = append(args, baseImage, "python3", "-m", "http.server", "8000", "--bind", "0.0.0.0")
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("start test server: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	out, err := exec.Command("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name).Output()
	if err != nil {
		t.Fatalf("inspect test server: %v", err)
	}
	ip := strings.TrimSpace(string(out))
	waitFor(t, 20*time.Second, func() bool {
		resp, err := http.Get("http://" + ip + ":8000/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, "test server "+name+" to answer")
	return ip
}

// sandbox is one sandbox of an egressWorld with the DNS script installed.
type egressSandbox struct {
	w  *egressWorld
	id string
	a  *agent
	// standIn is the process an enforcer process's record names while stopEnforcer
	// keeps the enforcer away.
	standIn *exec.Cmd
}

func (w *egressWorld) sandbox(networkPolicy any) *egressSandbox {
	w.t.Helper()
	req := map[string]any{}
	if networkPolicy != nil {
		req["networkPolicy"] = networkPolicy
	}
	id := w.g.createSandbox(req)
	s := &egressSandbox{w: w, id: id, a: w.g.agent(id)}
	s.sh("echo " + base64.StdEncoding.EncodeToString([]byte(testenv.DNSProbeScript)) + " | base64 -d > /tmp/dnsq.py && echo " +
		base64.StdEncoding.EncodeToString([]byte(latencyScript)) + " | base64 -d > /tmp/latency.py")
	return s
}

// sh runs a command in the sandbox and returns its stdout.
func (s *egressSandbox) sh(cmd string) string {
	s.w.t.Helper()
	return strings.TrimSpace(stdoutOf(s.a.run(cmd)))
}

// query asks server (an IP) on port 53 for name's A records over proto and returns
// "rcode=N ips…" or "error …".
func (s *egressSandbox) query(server, name, proto string) string {
	s.w.t.Helper()
	return answerCount.ReplaceAllString(s.sh(fmt.Sprintf("python3 /tmp/dnsq.py %s 53 %s A %s", server, name, proto)), "")
}

// answerCount is the " an=N" of testenv.DNSProbeScript's output, which query leaves out.
var answerCount = regexp.MustCompile(` an=\d+`)

// httpStatus fetches http://host:8000/ and returns the status code, "000" when no
// connection could be made.
func (s *egressSandbox) httpStatus(host string) string {
	s.w.t.Helper()
	return s.sh("curl -s -o /dev/null -w '%{http_code}' --connect-timeout 2 --max-time 4 http://" + host + ":8000/ || true")
}

// egressClient reaches the sandbox's egress API the SDK way: the gateway's endpoint for
// port 18080 with the headers it returns.
func (s *egressSandbox) egress(method string, body any) response {
	s.w.t.Helper()
	g := s.w.g
	r := g.do("GET", "/v1/sandboxes/"+s.id+"/endpoints/18080", nil)
	if r.Status != 200 {
		s.w.t.Fatalf("egress endpoint: %d %s", r.Status, r.Body)
	}
	var ep struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(r.Body, &ep); err != nil {
		s.w.t.Fatal(err)
	}
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		js, _ := json.Marshal(b)
		rd = strings.NewReader(string(js))
	}
	req, err := http.NewRequest(method, "http://"+ep.Endpoint+"/policy", rd)
	if err != nil {
		s.w.t.Fatal(err)
	}
	for k, v := range ep.Headers {
		req.Header.Set(k, v)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.client.Do(req)
	if err != nil {
		s.w.t.Fatalf("%s /policy: %v", method, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// policyOf returns the policy in force as the enforcer reports it.
func (s *egressSandbox) policyOf() string {
	s.w.t.Helper()
	r := s.egress("GET", nil)
	if r.Status != 200 {
		s.w.t.Fatalf("GET /policy: %d %s", r.Status, r.Body)
	}
	var m struct {
		Policy json.RawMessage `json:"policy"`
	}
	if err := json.Unmarshal(r.Body, &m); err != nil {
		s.w.t.Fatal(err)
	}
	return string(m.Policy)
}

func wantPrefix(t *testing.T, what, got, prefix string) {
	t.Helper()
	if !strings.HasPrefix(got, prefix) {
		t.Fatalf("%s = %q, want %q…", what, got, prefix)
	}
}

func TestEgress(t *testing.T) {
	w := newEgressWorld(t, map[string][]string{
		"allowed": {"allowed.test"},
		"denied":  {"denied.test"},
		"wild":    {"a.example.test", "example.test"},
		"cidr":    {"cidr.test"},
		"blocked": {"blocked.test"},
	}, "SANDGATE_EGRESS_ALWAYS_DENY={ip:blocked}")
	ip := w.servers
	s := w.sandbox(map[string]any{"defaultAction": "deny", "egress": []map[string]string{
		{"action": "allow", "target": "allowed.test"},
		{"action": "allow", "target": "*.example.test"},
		{"action": "allow", "target": ip["cidr"] + "/32"},
		{"action": "allow", "target": "blocked.test"},
		{"action": "allow", "target": ip["blocked"]},
	}})

	t.Run("workload has no NET_ADMIN or NET_RAW", func(t *testing.T) {
		capEff := s.sh("awk '/^CapEff/ {print $2}' /proc/self/status")
		v, err := strconv.ParseUint(capEff, 16, 64)
		if err != nil {
			t.Fatalf("CapEff %q: %v", capEff, err)
		}
		if v&(1<<12) != 0 || v&(1<<13) != 0 {
			t.Fatalf("CapEff %s holds NET_ADMIN or NET_RAW", capEff)
		}
	})
	t.Run("workload cannot read the enforcer's token", func(t *testing.T) {
		// The enforcer has its own PID namespace: the workload cannot even find it (see
		// TestEnforcerAttacks), let alone read its environment or root.
		if got := s.sh(`for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c 'sandbox-agent[ ]egress' || true`); got != "0" {
			t.Fatalf("the workload sees %s enforcer processes", got)
		}
		if got := s.sh("env | grep -c SANDGATE_ || true"); got != "0" {
			t.Fatalf("SANDGATE_* variables visible to the workload: %s", got)
		}
		if got := s.sh("tr '\\0' '\\n' < /proc/1/environ | grep -c SANDGATE_EGRESS || true"); got != "0" {
			t.Fatalf("the workload's PID 1 holds the egress token")
		}
	})
	t.Run("allowed name resolves and connects", func(t *testing.T) {
		if got := s.query("127.0.0.11", "allowed.test", "udp"); got != "rcode=0 "+ip["allowed"] {
			t.Fatalf("query = %q, want rcode=0 %s", got, ip["allowed"])
		}
		if got := s.httpStatus("allowed.test"); got != "200" {
			t.Fatalf("GET allowed.test = %s, want 200", got)
		}
	})
	t.Run("denied name gets NXDOMAIN", func(t *testing.T) {
		wantPrefix(t, "query denied.test", s.query("127.0.0.11", "denied.test", "udp"), "rcode=3")
		wantPrefix(t, "query denied.test over TCP", s.query("127.0.0.11", "denied.test", "tcp"), "rcode=3")
		if got := s.sh("getent hosts denied.test || echo none"); got != "none" {
			t.Fatalf("getent hosts denied.test = %q", got)
		}
	})
	t.Run("direct IP of the denied server fails", func(t *testing.T) {
		if got := s.httpStatus(ip["denied"]); got != "000" {
			t.Fatalf("GET %s = %s, want no connection", ip["denied"], got)
		}
	})
	t.Run("a query to another resolver is answered by the proxy", func(t *testing.T) {
		// The denied server runs no DNS server: an answer can only come from the proxy.
		for _, proto := range []string{"udp", "tcp"} {
			if got := s.query(ip["denied"], "allowed.test", proto); got != "rcode=0 "+ip["allowed"] {
				t.Fatalf("%s query to %s = %q, want the proxy's answer rcode=0 %s", proto, ip["denied"], got, ip["allowed"])
			}
			wantPrefix(t, proto+" query for denied.test to "+ip["denied"], s.query(ip["denied"], "denied.test", proto), "rcode=3")
		}
	})
	t.Run("wildcard admits subdomains only", func(t *testing.T) {
		if got := s.httpStatus("a.example.test"); got != "200" {
			t.Fatalf("GET a.example.test = %s, want 200", got)
		}
		wantPrefix(t, "query example.test", s.query("127.0.0.11", "example.test", "udp"), "rcode=3")
	})
	t.Run("CIDR rule admits its addresses", func(t *testing.T) {
		if got := s.httpStatus(ip["cidr"]); got != "200" {
			t.Fatalf("GET %s = %s, want 200", ip["cidr"], got)
		}
	})
	t.Run("platform deny beats the sandbox's own allow", func(t *testing.T) {
		for _, host := range []string{"blocked.test", ip["blocked"]} {
			if got := s.httpStatus(host); got != "000" {
				t.Fatalf("GET %s = %s, want no connection", host, got)
			}
		}
		// A PATCH cannot undo it either: the enforcer holds it in --platform-deny.
		if r := s.egress("PATCH", []map[string]string{{"action": "allow", "target": ip["blocked"] + "/32"}}); r.Status != 200 {
			t.Fatalf("PATCH: %d %s", r.Status, r.Body)
		}
		if got := s.httpStatus(ip["blocked"]); got != "000" {
			t.Fatalf("GET %s after PATCH = %s, want no connection", ip["blocked"], got)
		}
		// GET lists the platform denies apart from the sandbox's own rules.
		r := s.egress("GET", nil)
		var got struct {
			Policy       json.RawMessage `json:"policy"`
			PlatformDeny []string        `json:"platformDeny"`
		}
		if err := json.Unmarshal(r.Body, &got); err != nil {
			t.Fatal(err)
		}
		if deny := strings.Join(got.PlatformDeny, " "); !strings.Contains(deny, "169.254.0.0/16") || !strings.Contains(deny, ip["blocked"]) {
			t.Fatalf("platformDeny %v lacks the platform denies", got.PlatformDeny)
		}
		if strings.Contains(string(got.Policy), "169.254.0.0/16") {
			t.Fatalf("policy.egress holds the platform denies: %s", got.Policy)
		}
	})
	t.Run("PATCH through the gateway takes effect without a restart", func(t *testing.T) {
		marker := randomHex(8)
		s.sh("echo " + marker + " > /tmp/marker")
		r := s.egress("PATCH", []map[string]string{{"action": "allow", "target": "denied.test"}})
		if r.Status != 200 {
			t.Fatalf("PATCH: %d %s", r.Status, r.Body)
		}
		if m := r.JSON(t); m["status"] != "ok" || m["mode"] != "enforcing" {
			t.Fatalf("PATCH answer: %s", r.Body)
		}
		deadline := time.Now().Add(time.Second)
		for s.httpStatus("denied.test") != "200" {
			if time.Now().After(deadline) {
				t.Fatalf("denied.test still unreachable a second after the PATCH; policy %s", s.policyOf())
			}
		}
		if got := s.sh("cat /tmp/marker"); got != marker {
			t.Fatalf("the sandbox restarted: marker %q, want %q", got, marker)
		}
		// And back: DELETE removes the rule again.
		if r := s.egress("DELETE", []string{"denied.test"}); r.Status != 200 {
			t.Fatalf("DELETE: %d %s", r.Status, r.Body)
		}
		wantPrefix(t, "query denied.test after DELETE", s.query("127.0.0.11", "denied.test", "udp"), "rcode=3")
	})
	t.Run("bad input through the egress API is refused, policy unchanged", func(t *testing.T) {
		before := s.policyOf()
		tooMany := make([]map[string]string, 300)
		for i := range tooMany {
			tooMany[i] = map[string]string{"action": "allow", "target": fmt.Sprintf("h%d.test", i)}
		}
		for _, tc := range []struct {
			name, method string
			body         any
			mention      string
		}{
			{"empty wildcard", "PATCH", []map[string]string{{"action": "allow", "target": "*."}}, "*."},
			{"URL", "PATCH", []map[string]string{{"action": "allow", "target": "http://x"}}, "http://x"},
			{"bad IPv4", "PATCH", []map[string]string{{"action": "allow", "target": "300.1.1.1"}}, "300.1.1.1"},
			{"bad prefix length", "PATCH", []map[string]string{{"action": "allow", "target": "10.0.0.0/33"}}, "10.0.0.0/33"},
			{"unknown action", "PATCH", []map[string]string{{"action": "maybe", "target": "x.test"}}, "maybe"},
			{"too many rules", "PUT", map[string]any{"defaultAction": "deny", "egress": tooMany}, "rules"},
			{"unknown defaultAction", "POST", map[string]any{"defaultAction": "sometimes"}, "sometimes"},
			{"not JSON", "PATCH", "[{", "PATCH body"},
			{"bad DELETE target", "DELETE", []string{"http://x"}, "http://x"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := s.egress(tc.method, tc.body)
				expectError(t, r, 400, "EGRESS::INVALID_POLICY")
				if msg := r.JSON(t)["message"].(string); !strings.Contains(msg, tc.mention) {
					t.Fatalf("message %q does not mention %q", msg, tc.mention)
				}
				if after := s.policyOf(); after != before {
					t.Fatalf("policy changed:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
	})
	t.Run("killing the DNS proxy does not open the network", func(t *testing.T) {
		// The workload cannot reach the enforcer (its own PID namespace); a crash is
		// what this models, done from the sidecar. Stop the restart loop first so the gap
		// stays open.
		s.install()
		s.stopEnforcer()
		wantPrefix(t, "query allowed.test with the proxy dead", s.query("127.0.0.11", "allowed.test", "udp"), "error")
		wantPrefix(t, "query to another resolver with the proxy dead", s.query(ip["denied"], "allowed.test", "udp"), "error")
		if got := s.httpStatus(ip["denied"]); got != "000" {
			t.Fatalf("GET %s with the proxy dead = %s, want no connection", ip["denied"], got)
		}
		if got := s.httpStatus(ip["cidr"]); got != "200" {
			t.Fatalf("GET %s (a static allow) with the proxy dead = %s, want 200", ip["cidr"], got)
		}
		// The restart loop brings the enforcer back with the same table.
		s.resumeEnforcer("allowed.test")
		if got := s.httpStatus(ip["denied"]); got != "000" {
			t.Fatalf("GET %s after the restart = %s, want no connection", ip["denied"], got)
		}
	})

	t.Run("no networkPolicy gets the platform default", func(t *testing.T) {
		d := w.sandbox(nil)
		wantPrefix(t, "query allowed.test", d.query("127.0.0.11", "allowed.test", "udp"), "rcode=3")
		if got := d.httpStatus(ip["allowed"]); got != "000" {
			t.Fatalf("GET %s = %s, want no connection", ip["allowed"], got)
		}
		r := d.egress("GET", nil)
		if body := string(r.Body); !strings.Contains(body, `"platformDeny":[`) || !strings.Contains(body, `"169.254.0.0/16"`) || !strings.Contains(body, ip["blocked"]) {
			t.Fatalf("default policy lacks the platform denies: %s", body)
		}
	})

	t.Run("bad input at create is refused", func(t *testing.T) {
		before := len(w.e.containers())
		for _, tc := range []struct {
			name    string
			policy  any
			mention string
		}{
			{"empty wildcard", map[string]any{"egress": []map[string]string{{"action": "allow", "target": "*."}}}, "*."},
			{"URL", map[string]any{"egress": []map[string]string{{"action": "allow", "target": "http://x"}}}, "http://x"},
			{"bad IPv4", map[string]any{"egress": []map[string]string{{"action": "allow", "target": "300.1.1.1"}}}, "300.1.1.1"},
			{"bad prefix length", map[string]any{"egress": []map[string]string{{"action": "allow", "target": "10.0.0.0/33"}}}, "10.0.0.0/33"},
			{"unknown action", map[string]any{"egress": []map[string]string{{"action": "maybe", "target": "x.test"}}}, "maybe"},
			{"too many rules", map[string]any{"egress": func() []map[string]string {
				rules := make([]map[string]string, 300)
				for i := range rules {
					rules[i] = map[string]string{"action": "allow", "target": fmt.Sprintf("h%d.test", i)}
				}
				return rules
			}()}, "rules"},
			{"not an object", []string{"allowed.test"}, "networkPolicy"},
			{"unknown field", map[string]any{"allow": []string{"allowed.test"}}, "allow"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := w.g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage},
					"entrypoint": []string{"tail", "-f", "/dev/null"}, "networkPolicy": tc.policy})
				if r.Status != 400 {
					t.Fatalf("status %d, want 400: %s", r.Status, r.Body)
				}
				m := r.JSON(t)
				if code := m["code"]; code != "EGRESS::INVALID_POLICY" && code != "SANDBOX::INVALID_PARAMETER" {
					t.Fatalf("code %v: %s", code, r.Body)
				}
				if msg, _ := m["message"].(string); !strings.Contains(msg, tc.mention) {
					t.Fatalf("message %q does not mention %q", msg, tc.mention)
				}
			})
		}
		if after := len(w.e.containers()); after != before {
			t.Fatalf("containers on the network: %d before, %d after refused creates", before, after)
		}
	})

	t.Run("deleting the sandbox removes its enforcer", func(t *testing.T) {
		d := w.sandbox(nil)
		if !enforcerExists(d.id) {
			t.Fatalf("enforcer of %s not found", d.id)
		}
		pid := d.enforcerPID()
		if r := w.g.do("DELETE", "/v1/sandboxes/"+d.id, nil); r.Status != 204 {
			t.Fatalf("delete: %d %s", r.Status, r.Body)
		}
		// Delete answers once the enforcer is gone.
		if enforcerExists(d.id) {
			t.Fatalf("the enforcer of deleted sandbox %s is still there", d.id)
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			t.Fatalf("the enforcer process %s of deleted sandbox %s still runs", pid, d.id)
		}
		waitFor(t, 10*time.Second, func() bool {
			out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=sandgate.io/id="+d.id).Output()
			return len(strings.Fields(string(out))) == 0
		}, "the sandbox's containers to be gone")
	})

	t.Run("an enforcer left behind by a failed create is swept", func(t *testing.T) {
		// What a create that failed while Docker timed out leaves: a sidecar in state
		// Created whose workload is gone.
		gone := "e2e0" + randomHex(2) + "-0000-4000-8000-" + randomHex(6)
		name := "sandgate-" + gone + "-egress"
		if out, err := exec.Command("docker", "create", "--name", name, "--label", "sandgate.io/role=egress",
			"--label", "sandgate.io/id="+gone, "--network", "none", baseImage, "true").CombinedOutput(); err != nil {
			t.Fatalf("docker create: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
		waitFor(t, 30*time.Second, func() bool {
			out, _ := exec.Command("docker", "ps", "-aq", "--filter", "name=^"+name+"$").Output()
			return len(strings.Fields(string(out))) == 0
		}, "the reconciler to remove the leftover enforcer")
		// A live sandbox keeps its enforcer, and its policy still holds.
		if !enforcerExists(s.id) {
			t.Fatalf("the enforcer of live sandbox %s was removed", s.id)
		}
		wantPrefix(t, "query denied.test after the sweep", s.query("127.0.0.11", "denied.test", "udp"), "rcode=3")
		if got := s.httpStatus("allowed.test"); got != "200" {
			t.Fatalf("GET allowed.test = %s after the sweep, want 200", got)
		}
	})
}

// TestEgressPoolClaim checks that warm members start behind an enforcer with the
// platform default and that a claim's networkPolicy reaches it.
func TestEgressPoolClaim(t *testing.T) {
	w := newEgressWorld(t, map[string][]string{"allowed": {"allowed.test"}, "denied": {"denied.test"}})
	w.g.createPool("egress", 1, 1, 0, 2, nil)
	w.g.waitAvailable("egress", 1, 60*time.Second)
	r := w.g.do("POST", "/v1/sandboxes", map[string]any{"extensions": map[string]string{"poolRef": "egress"},
		"networkPolicy": map[string]any{"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": "allowed.test"}}}})
	if r.Status != 202 {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	s := &egressSandbox{w: w, id: id, a: w.g.agent(id)}
	s.sh("echo " + base64.StdEncoding.EncodeToString([]byte(testenv.DNSProbeScript)) + " | base64 -d > /tmp/dnsq.py")
	if got := s.httpStatus("allowed.test"); got != "200" {
		t.Fatalf("GET allowed.test from the claimed sandbox = %s, want 200", got)
	}
	wantPrefix(t, "query denied.test", s.query("127.0.0.11", "denied.test", "udp"), "rcode=3")
	if got := s.httpStatus(w.servers["denied"]); got != "000" {
		t.Fatalf("GET %s = %s, want no connection", w.servers["denied"], got)
	}
}

// BenchmarkEgressDNS measures one DNS lookup of an allowed name from inside a sandbox,
// through the enforcer's proxy (which pins the answer into nftables before replying),
// beside the raw baseline: the same lookup from a plain container on the same network,
// answered by Docker's embedded resolver directly.
func BenchmarkEgressDNS(b *testing.B) {
	benchmarkEgress(b, "dns", func(w *egressWorld) string { return "allowed.test" })
}

// BenchmarkEgressConnect measures one TCP connect to an allowed address from inside a
// sandbox (through the enforcer's nftables chains) beside a plain container on the
// same network. The target accepts and closes at once with a deep backlog, so that the
// figure is the network path's and not a slow server's.
func BenchmarkEgressConnect(b *testing.B) {
	benchmarkEgress(b, "connect", func(w *egressWorld) string { return w.servers["allowed"] + ":9000" })
}

// acceptServer listens on port 9000 of a test server and closes every connection at once.
const acceptServer = `import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 9000)); s.listen(4096)
while True:
    c, _ = s.accept(); c.close()
`

func benchmarkEgress(b *testing.B, mode string, target func(*egressWorld) string) {
	w := newEgressWorld(b, map[string][]string{"allowed": {"allowed.test"}})
	s := w.sandbox(map[string]any{"defaultAction": "deny", "egress": []map[string]string{
		{"action": "allow", "target": "allowed.test"}, {"action": "allow", "target": w.servers["allowed"]}}})
	raw := "sg-e2e-raw-" + randomHex(4)
	if out, err := exec.Command("docker", "run", "-d", "--name", raw, "--network", w.e.Network, baseImage, "sleep", "3600").CombinedOutput(); err != nil {
		b.Fatalf("start raw container: %v: %s", err, out)
	}
	b.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", raw).Run() })
	if mode == "connect" {
		srv, err := exec.Command("docker", "ps", "-q", "--filter", "network="+w.e.Network, "--filter", "label=sandgate-e2e=server").Output()
		if err != nil || len(strings.Fields(string(srv))) != 1 {
			b.Fatalf("find the test server: %v %q", err, srv)
		}
		if out, err := exec.Command("docker", "exec", "-d", strings.TrimSpace(string(srv)), "python3", "-c", acceptServer).CombinedOutput(); err != nil {
			b.Fatalf("start accept server: %v: %s", err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	script := base64.StdEncoding.EncodeToString([]byte(latencyScript))
	if out, err := exec.Command("docker", "exec", raw, "sh", "-c", "echo "+script+" | base64 -d > /tmp/latency.py").CombinedOutput(); err != nil {
		b.Fatalf("install script: %v: %s", err, out)
	}
	report := func(b *testing.B, out string) {
		ns, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
		if err != nil {
			b.Fatalf("latency script: %q", out)
		}
		b.ReportMetric(ns, "ns/"+mode)
	}
	b.Run("sandgate", func(b *testing.B) {
		report(b, s.sh(fmt.Sprintf("python3 /tmp/latency.py %s %s %d", mode, target(w), b.N)))
	})
	b.Run("raw-docker", func(b *testing.B) {
		out, err := exec.Command("docker", "exec", raw, "python3", "/tmp/latency.py", mode, target(w), strconv.Itoa(b.N)).CombinedOutput()
		if err != nil {
			b.Fatalf("raw: %v: %s", err, out)
		}
		report(b, string(out))
	})
}

// TestEgressOff is the control for the tests above: with enforcement turned off the same
// sandbox reaches the "denied" server, so their failures to connect come from the
// enforcer and not from the network; and a networkPolicy is refused, not ignored.
func TestEgressOff(t *testing.T) {
	w := newEgressWorld(t, map[string][]string{"denied": {"denied.test"}}, "SANDGATE_EGRESS=off")
	s := w.sandbox(nil)
	if got := s.httpStatus("denied.test"); got != "200" {
		t.Fatalf("GET denied.test with egress off = %s, want 200", got)
	}
	if enforcerExists(s.id) {
		t.Fatalf("an enforcer runs although egress is off")
	}
	r := w.g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage},
		"entrypoint": []string{"tail", "-f", "/dev/null"}, "networkPolicy": map[string]any{"defaultAction": "deny"}})
	expectError(t, r, 400, "SANDBOX::INVALID_PARAMETER")
}
