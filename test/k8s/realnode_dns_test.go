package k8s_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/runtimes"
	sgk8s "github.com/sandgate/sandgate/runtimes/kubernetes"
	"github.com/sandgate/sandgate/test/testenv"
)

// zoneServer is a DNS server a test runs on this host's address on the real node's
// bridge: it answers A queries for the names of its zone and NXDOMAIN for any other,
// and keeps every query it was sent, with where it came from and on which port.
type zoneServer struct {
	addr string // the host's bridge address the server listens on

	mu       sync.Mutex
	records  map[string]string // fully qualified name → IPv4 address
	received []zoneQuery
}

// zoneQuery is one query a zoneServer received.
type zoneQuery struct {
	name, proto string
	port        int // the server's port it was sent to
	from        netip.Addr
}

// startZoneServer serves the zone on addr: UDP and TCP port 53, where a pod's resolver
// sends, and UDP port 5353, a port only a workload that goes around its resolver would
// send to. Everything stops at the test's end.
func startZoneServer(t *testing.T, addr string) *zoneServer {
	t.Helper()
	z := &zoneServer{addr: addr, records: map[string]string{}}
	for _, l := range []struct {
		proto string
		port  int
	}{{"udp", 53}, {"tcp", 53}, {"udp", 5353}} {
		srv := &dns.Server{Net: l.proto, Handler: z.handler(l.proto, l.port)}
		hostPort := net.JoinHostPort(addr, strconv.Itoa(l.port))
		if l.proto == "udp" {
			pc, err := net.ListenPacket("udp4", hostPort)
			if err != nil {
				t.Fatalf("DNS server: listen on %s/udp: %v", hostPort, err)
			}
			srv.PacketConn = pc
		} else {
			ln, err := net.Listen("tcp4", hostPort)
			if err != nil {
				t.Fatalf("DNS server: listen on %s/tcp: %v", hostPort, err)
			}
			srv.Listener = ln
		}
		go srv.ActivateAndServe()
		t.Cleanup(func() { srv.Shutdown() })
	}
	return z
}

// set makes name (without the final dot) answer ip.
func (z *zoneServer) set(name, ip string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.records[dns.Fqdn(name)] = ip
}

// queries returns what the server received so far.
func (z *zoneServer) queries() []zoneQuery {
	z.mu.Lock()
	defer z.mu.Unlock()
	return slices.Clone(z.received)
}

func (z *zoneServer) handler(proto string, port int) dns.HandlerFunc {
	return func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		from, _ := netip.ParseAddrPort(w.RemoteAddr().String())
		z.mu.Lock()
		for _, q := range req.Question {
			z.received = append(z.received, zoneQuery{name: strings.TrimSuffix(strings.ToLower(q.Name), "."), proto: proto, port: port, from: from.Addr().Unmap()})
			ip, ok := z.records[strings.ToLower(q.Name)]
			switch {
			case !ok:
				m.Rcode = dns.RcodeNameError
			case q.Qtype == dns.TypeA:
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
					A:   net.ParseIP(ip).To4(),
				})
			}
		}
		z.mu.Unlock()
		_ = w.WriteMsg(m)
	}
}

// TestRealNodeAllowedNameResolves is an operator's and a tenant's story on the real
// node. The operator names the sandboxes' DNS server (SANDGATE_SANDBOX_DNS; here one the
// test runs on the host's bridge address, serving allowed.sandgate.test and
// denied.sandgate.test, both at another sandbox's pod address). A tenant's sandbox may
// reach allowed.sandgate.test only: the name resolves through its enforcer and the
// workload reaches the other sandbox by that name; denied.sandgate.test does not
// resolve; and a workload that asks the DNS server itself, on its port 53 or another
// port, gets nothing the enforcer would not give it: the server is only ever asked the
// allowed name, from the sandbox's pod, on its DNS port.
func TestRealNodeAllowedNameResolves(t *testing.T) {
	agentImage := requireRealNode(t)
	ns := realNodeNamespace(t)
	zone := startZoneServer(t, realNode.hostIP)
	g := startGateway(t, ns, "SANDGATE_K8S_AGENT_IMAGE="+agentImage, "SANDGATE_SANDBOX_DNS="+realNode.hostIP)

	// The web server the allowed name leads to is another sandbox's agent, which
	// answers any HTTP request (401 without a signature): an answer is a connection made.
	// The host itself is no target: it is denied to every sandbox, whatever its policy.
	target := g.createSandbox(smallSandbox(nil))
	targetPod, err := kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(target), metav1.GetOptions{})
	if err != nil || targetPod.Status.PodIP == "" {
		t.Fatalf("the target's pod IP: %v", err)
	}
	web := targetPod.Status.PodIP
	// Both names lead to the same address, so only the enforcer's DNS proxy, which
	// judges names, tells them apart.
	zone.set("allowed.sandgate.test", web)
	zone.set("denied.sandgate.test", web)
	// Asked from the host, the server answers the denied name on each of its ports: a
	// sandbox that gets no answer is stopped by its enforcer, not by the server.
	for _, l := range []struct {
		proto string
		port  int
	}{{"udp", 53}, {"tcp", 53}, {"udp", 5353}} {
		c := &dns.Client{Net: l.proto, Timeout: 3 * time.Second}
		m := new(dns.Msg).SetQuestion("denied.sandgate.test.", dns.TypeA)
		in, _, err := c.Exchange(m, net.JoinHostPort(realNode.hostIP, strconv.Itoa(l.port)))
		if err != nil || len(in.Answer) != 1 {
			t.Fatalf("the test's DNS server on %s port %d: %v %v", l.proto, l.port, in, err)
		}
	}
	fromHost := len(zone.queries())

	id := g.createSandbox(smallSandbox(map[string]any{"networkPolicy": map[string]any{"defaultAction": "deny",
		"egress": []map[string]string{{"action": "allow", "target": "allowed.sandgate.test"}}}}))
	pod, err := kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run := func(command string) string {
		t.Helper()
		out, _, err := g.command(id, command)
		if err != nil {
			t.Fatalf("%s: %v", command, err)
		}
		return strings.TrimSpace(out)
	}

	// Nothing is looked up before the sandbox is known to resolve through the test's
	// server alone: the node's own resolv.conf names the host's resolver, which no test
	// may ask.
	if pod.Spec.DNSPolicy != corev1.DNSNone || pod.Spec.DNSConfig == nil || !slices.Equal(pod.Spec.DNSConfig.Nameservers, []string{realNode.hostIP}) {
		t.Fatalf("pod dnsPolicy %q, dnsConfig %+v: want None with the nameserver %s alone", pod.Spec.DNSPolicy, pod.Spec.DNSConfig, realNode.hostIP)
	}
	if got := run("grep '^nameserver' /etc/resolv.conf"); got != "nameserver "+realNode.hostIP {
		t.Fatalf("the workload's resolv.conf names %q, want the test's server %s alone", got, realNode.hostIP)
	}

	run("cat > /tmp/dnsq.py <<'EOF'\n" + testenv.DNSProbeScript + "EOF")
	query := func(port int, name, proto string) string {
		return run(fmt.Sprintf("python3 /tmp/dnsq.py %s %d %s A %s", realNode.hostIP, port, name, proto))
	}

	t.Run("the allowed name resolves and is reached by name", func(t *testing.T) {
		if got := run("getent hosts allowed.sandgate.test | awk '{print $1}'"); got != web {
			t.Fatalf("getent hosts allowed.sandgate.test = %q, want %s", got, web)
		}
		u := fmt.Sprintf("http://allowed.sandgate.test:%d/ping", runtimes.AgentPort)
		if got := run("curl -s -o /dev/null -w '%{http_code}' --connect-timeout 3 --max-time 5 " + u + " || true"); got == "000" || got == "" {
			t.Fatalf("GET %s: HTTP status %q, want an answer", u, got)
		}
	})

	t.Run("the denied name does not resolve", func(t *testing.T) {
		if got := run("getent hosts denied.sandgate.test; echo exit=$?"); got != "exit=2" {
			t.Fatalf("getent hosts denied.sandgate.test = %q, want not found", got)
		}
		u := fmt.Sprintf("http://denied.sandgate.test:%d/ping", runtimes.AgentPort)
		if got := run("curl -s -o /dev/null -w '%{http_code}' --connect-timeout 3 --max-time 5 " + u + "; echo \" exit=$?\""); got != "000 exit=6" {
			t.Fatalf("GET %s: %q, want curl's exit 6 (could not resolve)", u, got)
		}
	})

	t.Run("asking the DNS server directly goes through the enforcer", func(t *testing.T) {
		for _, proto := range []string{"udp", "tcp"} {
			if got := query(53, "denied.sandgate.test", proto); !strings.HasPrefix(got, "rcode=3 an=0") {
				t.Errorf("%s query of the denied name to %s:53 = %q, want NXDOMAIN", proto, realNode.hostIP, got)
			}
			if got := query(53, "allowed.sandgate.test", proto); got != "rcode=0 an=1 "+web {
				t.Errorf("%s query of the allowed name to %s:53 = %q, want %s", proto, realNode.hostIP, got, web)
			}
		}
		if got := query(5353, "denied.sandgate.test", "udp"); !strings.HasPrefix(got, "error") {
			t.Errorf("query of the denied name to %s:5353 = %q, want no answer", realNode.hostIP, got)
		}
		if got := query(5353, "allowed.sandgate.test", "udp"); !strings.HasPrefix(got, "error") {
			t.Errorf("query of the allowed name to %s:5353 = %q, want no answer", realNode.hostIP, got)
		}
	})

	// What reached the server is what the enforcer forwards: the allowed name, from
	// the sandbox's pod, on the DNS port; never the denied name, never port 5353.
	received := zone.queries()[fromHost:]
	if len(received) == 0 {
		t.Fatal("the test's DNS server received no query")
	}
	podIP := netip.MustParseAddr(pod.Status.PodIP)
	for _, q := range received {
		if q.name != "allowed.sandgate.test" || q.port != 53 || q.from != podIP {
			t.Errorf("the DNS server was asked %s over %s on port %d from %s; want only allowed.sandgate.test on port 53 from the sandbox's pod %s", q.name, q.proto, q.port, q.from, podIP)
		}
	}
	t.Logf("the DNS server received %d queries, every one for the allowed name", len(received))
}
