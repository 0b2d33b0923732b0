package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/runtimes/docker"
)

// Attacks of a hostile workload on its own egress enforcer,
// each run from inside a sandbox against servers the test started on its own network.

// resolverScript is a DNS server the test runs in its own container on the sandbox
// network: it answers every A query with 192.0.2.53 (an address that is only data; no
// packet goes there) on UDP 53 and on TCP 53 and 853.
const resolverScript = `import socket, struct, threading
def answer(q):
    i = 12
    while q[i] != 0:
        i += q[i] + 1
    i += 5
    hdr = q[:2] + struct.pack('>HHHHH', 0x8180, 1, 1, 0, 0)
    return hdr + q[12:i] + b'\xc0\x0c' + struct.pack('>HHIH', 1, 1, 60, 4) + socket.inet_aton('192.0.2.53')
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', 53))
    while True:
        q, a = s.recvfrom(4096)
        try:
            s.sendto(answer(q), a)
        except Exception:
            pass
def tcp(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', port)); s.listen(16)
    while True:
        c, _ = s.accept()
        try:
            n = struct.unpack('>H', c.recv(2))[0]; q = b''
            while len(q) < n:
                q += c.recv(n - len(q))
            r = answer(q); c.sendall(struct.pack('>H', len(r)) + r)
        except Exception:
            pass
        c.close()
for f, a in ((udp, ()), (tcp, (53,)), (tcp, (853,))):
    threading.Thread(target=f, args=a, daemon=True).start()
threading.Event().wait()
`

// fakeEnforcerScript is what a hostile workload runs on port 18080 while its enforcer
// is down: it records every request (method, path, headers, body) and answers
// "allow_all" to everything.
const fakeEnforcerScript = `import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def any(self):
        n = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(n) if n else b''
        with open('/tmp/captured.jsonl', 'a') as f:
            f.write(json.dumps({'method': self.command, 'path': self.path, 'headers': dict(self.headers), 'body': body.decode()}) + '\n')
        out = json.dumps({'status': 'ok', 'mode': 'allow_all', 'enforcementMode': 'dns+nft', 'policy': {'defaultAction': 'allow', 'egress': []}}).encode()
        self.send_response(200); self.send_header('Content-Type', 'application/json'); self.send_header('Content-Length', str(len(out))); self.end_headers(); self.wfile.write(out)
    do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = any
    def log_message(self, *a):
        pass
http.server.HTTPServer(('0.0.0.0', 18080), H).serve_forever()
`

// replayScript sends every captured request again to the real enforcer, and then a
// PUT of allow-all with the captured headers, printing each status.
const replayScript = `import http.client, json
out = []
for line in open('/tmp/captured.jsonl'):
    r = json.loads(line)
    hdrs = {k: v for k, v in r['headers'].items() if k.lower() not in ('content-length', 'host', 'connection')}
    for method, path, body in ((r['method'], r['path'], r['body']), ('PUT', '/policy', '{"defaultAction":"allow"}')):
        c = http.client.HTTPConnection('127.0.0.1', 18080, timeout=5)
        c.request(method, path, body=body.encode(), headers=hdrs)
        out.append('%s=%d' % (method, c.getresponse().status))
print(' '.join(out))
`

// install writes the attack scripts into the sandbox.
func (s *egressSandbox) install() {
	s.w.t.Helper()
	for name, script := range map[string]string{"fake.py": fakeEnforcerScript, "replay.py": replayScript} {
		s.sh("echo " + base64.StdEncoding.EncodeToString([]byte(script)) + " | base64 -d > /tmp/" + name)
	}
}

// probe runs testenv.DNSProbeScript (installed by newEgressSandbox) in the sandbox.
func (s *egressSandbox) probe(server string, port int, name, qtype, proto string) string {
	s.w.t.Helper()
	return s.sh(fmt.Sprintf("python3 /tmp/dnsq.py %s %d %s %s %s", server, port, name, qtype, proto))
}

// sidecar is the name of the sandbox's enforcer container, when its enforcer is one
// (SANDGATE_ENFORCER=container, or auto where the host cannot run processes).
func (s *egressSandbox) sidecar() string { return "sandgate-" + s.id + "-egress" }

// enforcerProcess is the runtime's record of the sandbox's enforcer process; ok is false
// when its enforcer is a sidecar.
func (s *egressSandbox) enforcerProcess() (docker.EnforcerRecord, bool) {
	return docker.EnforcerProcessOf(s.id)
}

// enforcerPID is the host pid of the sandbox's enforcer: the process, or the sidecar's
// main process (its restart loop).
func (s *egressSandbox) enforcerPID() string {
	s.w.t.Helper()
	if rec, ok := s.enforcerProcess(); ok {
		return strconv.Itoa(rec.PID)
	}
	return dockerInspect(s.w.t, "{{.State.Pid}}", s.sidecar())
}

// enforcerNamespace is the enforcer's namespace of kind ("pid", "net"…), read from the
// host (neither the sidecar's image nor the process's root has a shell).
func (s *egressSandbox) enforcerNamespace(kind string) string {
	s.w.t.Helper()
	ns, err := os.Readlink("/proc/" + s.enforcerPID() + "/ns/" + kind)
	if err != nil {
		s.w.t.Fatalf("namespace of the enforcer: %v", err)
	}
	return ns
}

// enforcerToken is the token the enforcer was started with.
func (s *egressSandbox) enforcerToken() string {
	s.w.t.Helper()
	if rec, ok := s.enforcerProcess(); ok {
		return rec.Token
	}
	for _, kv := range strings.Split(dockerInspect(s.w.t, "{{range .Config.Env}}{{println .}}{{end}}", s.sidecar()), "\n") {
		if v, ok := strings.CutPrefix(kv, "SANDGATE_EGRESS_TOKEN="); ok {
			return v
		}
	}
	return ""
}

// enforcerExists reports whether the sandbox has an enforcer, running or not: a process
// record or a sidecar container.
func enforcerExists(id string) bool {
	if _, ok := docker.EnforcerProcessOf(id); ok {
		return true
	}
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", "name=^sandgate-"+id+"-egress$").Output()
	return len(strings.Fields(string(out))) > 0
}

// killEnforcer kills the enforcer for good, as an operator's mistake or a failed restart
// would, so that only the reconciler brings one back (with the policy the gateway's
// record keeps): the process after its record is removed (its runtime then does not start
// it again), or `docker kill` of the sidecar. A crash, which the enforcer survives with
// its state, is crashEnforcer.
func (s *egressSandbox) killEnforcer() {
	s.w.t.Helper()
	if _, ok := s.enforcerProcess(); ok {
		removeEnforcer(s.w.t, s.id)
		return
	}
	if out, err := exec.Command("docker", "kill", s.sidecar()).CombinedOutput(); err != nil {
		s.w.t.Fatalf("docker kill the enforcer: %v: %s", err, out)
	}
}

// stopEnforcer kills the enforcer and keeps it from being started again, the way a crash
// with a broken restart would leave it: the gap stays open until resumeEnforcer. A
// sidecar's restart loop is frozen (the signals come from the host: the loop is PID 1 of
// the sidecar's namespace, which ignores SIGSTOP sent from inside it). A process's
// record is made to name a stand-in process (a `sleep` the test starts) first: the
// runtime then neither starts the enforcer again (its record names another process) nor
// takes it for missing (the recorded process runs).
func (s *egressSandbox) stopEnforcer() {
	t := s.w.t
	t.Helper()
	if rec, ok := s.enforcerProcess(); ok {
		standIn := exec.Command("sleep", "600")
		if err := standIn.Start(); err != nil {
			t.Fatal(err)
		}
		s.standIn = standIn
		t.Cleanup(func() { _ = standIn.Process.Kill(); _ = standIn.Wait() })
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(standIn.Process.Pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		rewritten := rec
		rewritten.PID, rewritten.Start = standIn.Process.Pid, fields[19]
		b, _ := json.Marshal(rewritten)
		record := filepath.Join("/var/lib/sandgate/enforcers", s.id, "enforcer.json")
		if err := os.WriteFile(record+".tmp", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(record+".tmp", record); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("kill", "-KILL", strconv.Itoa(rec.PID)).CombinedOutput(); err != nil {
			t.Fatalf("kill the enforcer process: %v: %s", err, out)
		}
		waitFor(t, 10*time.Second, func() bool {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(rec.PID) + "/stat")
			return err != nil || strings.Contains(string(b), ") Z ")
		}, "the enforcer to be gone")
		return
	}
	loop := dockerInspect(t, "{{.State.Pid}}", s.sidecar())
	if out, err := exec.Command("kill", "-STOP", loop).CombinedOutput(); err != nil {
		t.Fatalf("kill -STOP %s: %v: %s", loop, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("kill", "-CONT", loop).Run() })
	_ = exec.Command("pkill", "-KILL", "-P", loop).Run()
	waitFor(t, 10*time.Second, func() bool {
		// Every child of the loop is gone or a zombie (the stopped loop cannot reap it).
		out, _ := exec.Command("sh", "-c", "for c in $(pgrep -P "+loop+"); do awk '{print $3}' /proc/$c/stat; done").Output()
		return strings.Trim(strings.ReplaceAll(string(out), "Z", ""), "\n ") == ""
	}, "the enforcer to be gone")
}

// resumeEnforcer lets the enforcer come back (the sidecar's restart loop, or, for a
// process, the reconciler, which finds the recorded stand-in gone and restores the
// enforcer) and waits until its DNS proxy answers.
func (s *egressSandbox) resumeEnforcer(allowedName string) {
	s.w.t.Helper()
	if s.standIn != nil {
		_ = s.standIn.Process.Kill()
		_ = s.standIn.Wait()
		s.standIn = nil
	} else {
		loop := dockerInspect(s.w.t, "{{.State.Pid}}", s.sidecar())
		if out, err := exec.Command("kill", "-CONT", loop).CombinedOutput(); err != nil {
			s.w.t.Fatalf("kill -CONT %s: %v: %s", loop, err, out)
		}
	}
	waitFor(s.w.t, 20*time.Second, func() bool {
		return strings.HasPrefix(s.probe("127.0.0.11", 53, allowedName, "A", "udp"), "rcode=0 an=1")
	}, "the enforcer to come back")
}

func dockerInspect(t testing.TB, format, name string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", format, name).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// startResolver runs resolverScript in a container of the base image on network and
// returns its address.
func startResolver(t *testing.T, network string) string {
	t.Helper()
	name := "sg-e2e-dns-" + randomHex(4)
	if out, err := exec.Command("docker", "run", "-d", "--name", name, "--network", network, "--label", "sandgate-e2e=server",
		baseImage, "python3", "-c", resolverScript).CombinedOutput(); err != nil {
		t.Fatalf("start resolver: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	return dockerInspect(t, "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name)
}

func TestEnforcerAttacks(t *testing.T) {
	// Both forms of the enforcer on Docker: the process this host runs by default, and
	// the sidecar a host that cannot run processes gets.
	t.Run("process", func(t *testing.T) { enforcerAttacks(t) })
	t.Run("sidecar", func(t *testing.T) { enforcerAttacks(t, "SANDGATE_ENFORCER=container") })
}

func enforcerAttacks(t *testing.T, gatewayEnv ...string) {
	w := newEgressWorld(t, map[string][]string{
		"allowed": {"allowed.test", "dup.test"},
		"removed": {"removed.test"},
	}, gatewayEnv...)
	ip := w.servers
	resolver := startResolver(t, w.e.Network)
	// The resolver answers on TCP 853 as soon as it runs; wait for that from the host.
	waitFor(t, 20*time.Second, func() bool {
		return exec.Command("python3", "-c", "import socket; socket.create_connection(('"+resolver+"', 853), timeout=1)").Run() == nil
	}, "the test resolver to listen")
	s := w.sandbox(map[string]any{"defaultAction": "deny", "egress": []map[string]string{
		{"action": "allow", "target": "allowed.test"},
		{"action": "allow", "target": ip["removed"]},
		{"action": "allow", "target": resolver},
	}})
	s.install()

	t.Run("the workload cannot see or signal its enforcer", func(t *testing.T) {
		out := s.sh(`for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c 'sandbox-agent[ ]egress' || true`)
		if out != "0" {
			t.Fatalf("the workload sees %s enforcer processes", out)
		}
		if got := s.sh(`pkill -KILL -f '^/.sandgate/bin/sandbox-agent egress'; echo $?`); got != "1" {
			t.Fatalf("pkill of the enforcer from the workload: exit %s, want 1 (no such process)", got)
		}
		workloadNS := s.sh("readlink /proc/1/ns/pid")
		if enforcerNS := s.enforcerNamespace("pid"); enforcerNS == workloadNS {
			t.Fatalf("the enforcer shares the workload's PID namespace %s", workloadNS)
		}
		if got := s.probe("127.0.0.11", 53, "allowed.test", "A", "udp"); got != "rcode=0 an=1 "+ip["allowed"] {
			t.Fatalf("the enforcer stopped answering after the attempt: %q", got)
		}
	})

	t.Run("the workload cannot take port 18080 from a running enforcer", func(t *testing.T) {
		addr := sandboxIP(t, s.id)
		script := `import socket, sys
out = []
for host in ('0.0.0.0', '127.0.0.1', sys.argv[1]):
    for opt in (None, socket.SO_REUSEADDR, socket.SO_REUSEPORT):
        s = socket.socket()
        if opt:
            s.setsockopt(socket.SOL_SOCKET, opt, 1)
        try:
            s.bind((host, 18080)); s.listen(1); out.append('bound:%s:%s' % (host, opt))
        except OSError:
            pass
        s.close()
print(' '.join(out) or 'none')
`
		got := s.sh("echo " + base64.StdEncoding.EncodeToString([]byte(script)) + " | base64 -d > /tmp/bind.py && python3 /tmp/bind.py " + addr)
		if got != "none" {
			t.Fatalf("the workload bound the enforcer's port: %s", got)
		}
	})

	t.Run("a restarted enforcer keeps the policy changed at runtime and stays closed meanwhile", func(t *testing.T) {
		if got := s.httpStatus(ip["removed"]); got != "200" {
			t.Fatalf("GET %s before the change = %s, want 200", ip["removed"], got)
		}
		if r := s.egress("DELETE", []string{ip["removed"]}); r.Status != 200 {
			t.Fatalf("DELETE %s: %d %s", ip["removed"], r.Status, r.Body)
		}
		if got := s.httpStatus(ip["removed"]); got != "000" {
			t.Fatalf("GET %s after DELETE = %s, want no connection", ip["removed"], got)
		}
		s.stopEnforcer()
		if got := s.httpStatus(ip["removed"]); got != "000" {
			t.Fatalf("GET %s while no enforcer runs = %s, want no connection", ip["removed"], got)
		}
		wantPrefix(t, "DNS while no enforcer runs", s.probe("127.0.0.11", 53, "removed.test", "A", "udp"), "error")
		s.resumeEnforcer("allowed.test")
		if got := s.httpStatus(ip["removed"]); got != "000" {
			t.Fatalf("GET %s after kill -9 = %s, want no connection (the create-time policy came back)", ip["removed"], got)
		}
		// A restart of the whole enforcer keeps it too: the sidecar's container, or the
		// process, which its runtime starts again with its state.
		if _, ok := s.enforcerProcess(); ok {
			crashEnforcer(t, s.id)
		} else if out, err := exec.Command("docker", "restart", "-t", "1", s.sidecar()).CombinedOutput(); err != nil {
			t.Fatalf("docker restart: %v: %s", err, out)
		}
		waitFor(t, 30*time.Second, func() bool {
			return strings.HasPrefix(s.probe("127.0.0.11", 53, "allowed.test", "A", "udp"), "rcode=0 an=1")
		}, "the restarted sidecar to answer")
		if got := s.httpStatus(ip["removed"]); got != "000" {
			t.Fatalf("GET %s after docker restart = %s, want no connection", ip["removed"], got)
		}
		if pol := s.policyOf(); strings.Contains(pol, ip["removed"]) {
			t.Fatalf("policy after the restarts names %s again: %s", ip["removed"], pol)
		}
	})

	t.Run("a workload holding port 18080 learns nothing and is not believed", func(t *testing.T) {
		token := s.enforcerToken()
		if token == "" {
			t.Fatal("no enforcer token")
		}
		s.stopEnforcer()
		s.sh("rm -f /tmp/captured.jsonl; (setsid nohup python3 /tmp/fake.py >/dev/null 2>&1 &); " +
			"for i in $(seq 50); do python3 -c \"import socket; socket.create_connection(('127.0.0.1', 18080), timeout=1)\" 2>/dev/null && exit 0; sleep 0.1; done; exit 1")
		// The owner reads and changes the policy through the gateway.
		r := s.egress("GET", nil)
		expectError(t, r, 502, "EGRESS::UNAVAILABLE")
		r = s.egress("PATCH", []map[string]string{{"action": "allow", "target": "dup.test"}})
		expectError(t, r, 502, "EGRESS::UNAVAILABLE")
		captured := s.sh("cat /tmp/captured.jsonl")
		if captured == "" {
			t.Fatal("the fake enforcer received nothing: the attack was not exercised")
		}
		if strings.Contains(captured, token) {
			t.Fatalf("the gateway sent the enforcer's token to the fake: %s", captured)
		}
		if strings.Contains(captured, w.g.APIKey) {
			t.Fatalf("the gateway sent the API key to the fake: %s", captured)
		}
		// Once the real enforcer is back, nothing captured opens anything.
		s.sh("pkill -f /tmp/fake.py; for i in $(seq 50); do python3 -c \"import socket; socket.create_connection(('127.0.0.1', 18080), timeout=1)\" 2>/dev/null || exit 0; sleep 0.1; done; exit 1")
		s.resumeEnforcer("allowed.test")
		replayed := s.sh("python3 /tmp/replay.py")
		for _, f := range strings.Fields(replayed) {
			if !strings.HasSuffix(f, "=401") {
				t.Fatalf("replayed requests: %s, want every one refused with 401", replayed)
			}
		}
		if replayed == "" {
			t.Fatal("nothing replayed")
		}
		if pol := s.policyOf(); strings.Contains(pol, `"defaultAction":"allow"`) {
			t.Fatalf("the replay changed the policy: %s", pol)
		}
		if got := s.httpStatus(ip["removed"]); got != "000" {
			t.Fatalf("GET %s after the replays = %s, want no connection", ip["removed"], got)
		}
	})

	t.Run("Docker's embedded resolver is out of reach on its real ports", func(t *testing.T) {
		// 127.0.0.11's real ports are readable in /proc/net/{udp,tcp} (0B00007F:PORT).
		ports := s.sh(`for f in /proc/net/udp /proc/net/tcp; do awk 'NR>1 && $2 ~ /^0B00007F:/ {split($2, a, ":"); print FILENAME, a[2]}' $f; done`)
		lines := strings.Split(ports, "\n")
		if len(lines) < 2 {
			t.Fatalf("embedded resolver ports not found: %q", ports)
		}
		for _, line := range lines {
			f := strings.Fields(line)
			var port int
			if _, err := fmt.Sscanf(f[1], "%X", &port); err != nil {
				t.Fatalf("port %q: %v", f[1], err)
			}
			proto := "udp"
			if strings.HasSuffix(f[0], "tcp") {
				proto = "tcp"
			}
			wantPrefix(t, fmt.Sprintf("%s query to 127.0.0.11:%d", proto, port), s.probe("127.0.0.11", port, "removed.test", "A", proto), "error")
		}
	})

	t.Run("another resolver is never asked, even at an allowed address", func(t *testing.T) {
		// Port 53 reaches the proxy whatever the address (NXDOMAIN: removed.test is not
		// allowed by name); the test resolver would answer 192.0.2.53.
		for _, proto := range []string{"udp", "tcp"} {
			wantPrefix(t, proto+" query to the resolver's port 53", s.probe(resolver, 53, "removed.test", "A", proto), "rcode=3")
		}
		wantPrefix(t, "DNS over TLS port to the resolver", s.probe(resolver, 853, "removed.test", "A", "tcp"), "error")
	})

	t.Run("PTR of another sandbox's address names nothing", func(t *testing.T) {
		neighbour := w.sandbox(map[string]any{"defaultAction": "allow"})
		neighbour.install()
		other := sandboxIP(t, s.id)
		octets := strings.Split(other, ".")
		rev := octets[3] + "." + octets[2] + "." + octets[1] + "." + octets[0] + ".in-addr.arpa"
		got := neighbour.probe("127.0.0.11", 53, rev, "PTR", "udp")
		if !strings.HasPrefix(got, "rcode=3 an=0") {
			t.Fatalf("PTR %s from a default-allow sandbox = %q, want NXDOMAIN", rev, got)
		}
	})
}

// TestEgressPolicyRoundTrip: within one PATCH the first rule for a target wins, and
// what GET /policy returns can be PUT back without changing anything.
func TestEgressPolicyRoundTrip(t *testing.T) {
	w := newEgressWorld(t, map[string][]string{"allowed": {"allowed.test"}, "blocked": {"blocked.test"}},
		"SANDGATE_EGRESS_ALWAYS_DENY={ip:blocked}")
	ip := w.servers
	s := w.sandbox(map[string]any{"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": "other.test"}}})

	t.Run("PATCH with a duplicate target keeps the first rule", func(t *testing.T) {
		r := s.egress("PATCH", []map[string]string{{"action": "allow", "target": "allowed.test"}, {"action": "deny", "target": "allowed.test"}})
		if r.Status != 200 {
			t.Fatalf("PATCH: %d %s", r.Status, r.Body)
		}
		want := `{"defaultAction":"deny","egress":[{"action":"allow","target":"allowed.test"},{"action":"allow","target":"other.test"}]}`
		if pol := s.policyOf(); pol != want {
			t.Fatalf("policy after the PATCH:\n got %s\nwant %s", pol, want)
		}
		if got := s.httpStatus("allowed.test"); got != "200" {
			t.Fatalf("GET allowed.test = %s, want 200", got)
		}
	})

	t.Run("a PUT of what GET returned changes nothing", func(t *testing.T) {
		get := func() (json.RawMessage, []string) {
			r := s.egress("GET", nil)
			if r.Status != 200 {
				t.Fatalf("GET: %d %s", r.Status, r.Body)
			}
			var m struct {
				Policy       json.RawMessage `json:"policy"`
				PlatformDeny []string        `json:"platformDeny"`
			}
			if err := json.Unmarshal(r.Body, &m); err != nil {
				t.Fatal(err)
			}
			return m.Policy, m.PlatformDeny
		}
		before, platform := get()
		for _, target := range []string{"169.254.0.0/16", ip["blocked"]} {
			if strings.Contains(string(before), `"`+target) {
				t.Fatalf("GET mixes the platform deny %s into policy.egress: %s", target, before)
			}
			if !strings.Contains(strings.Join(platform, " "), target) {
				t.Fatalf("platformDeny %v lacks %s", platform, target)
			}
		}
		if r := s.egress("PUT", string(before)); r.Status != 200 {
			t.Fatalf("PUT: %d %s", r.Status, r.Body)
		}
		after, platformAfter := get()
		if string(after) != string(before) || strings.Join(platformAfter, " ") != strings.Join(platform, " ") {
			t.Fatalf("PUT of what GET returned changed the policy:\nbefore %s %v\nafter  %s %v", before, platform, after, platformAfter)
		}
		if got := s.httpStatus(ip["blocked"]); got != "000" {
			t.Fatalf("GET %s (platform deny) = %s after the PUT, want no connection", ip["blocked"], got)
		}
		if got := s.httpStatus("allowed.test"); got != "200" {
			t.Fatalf("GET allowed.test = %s after the PUT, want 200", got)
		}
	})

	t.Run("an enforcer whose workload was removed by hand is swept", func(t *testing.T) {
		d := w.sandbox(nil)
		pid := d.enforcerPID()
		if out, err := exec.Command("docker", "rm", "-f", "-v", "sandgate-"+d.id).CombinedOutput(); err != nil {
			t.Fatalf("docker rm: %v: %s", err, out)
		}
		waitFor(t, 60*time.Second, func() bool {
			_, err := os.Stat("/proc/" + pid)
			return !enforcerExists(d.id) && err != nil
		}, "the reconciler to remove the enforcer of a removed workload")
	})
}
