package egress

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandgate/sandgate/sandbox-agent/egress/egressauth"
)

// startDNSIn starts a DNS server answering every A query with allowedIP in netns on
// network ("udp" or "tcp") at addr.
func startDNSIn(tb testing.TB, netns, network, addr string) {
	tb.Helper()
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(allowedIP)})
		_ = w.WriteMsg(m)
	})
	var srv *dns.Server
	err := inNetns(netns, func() error {
		if network == "udp" {
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				return err
			}
			srv = &dns.Server{PacketConn: pc, Handler: handler}
			return nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		srv = &dns.Server{Listener: ln, Handler: handler}
		return nil
	})
	if err != nil {
		tb.Fatalf("start DNS server %s %s in %s: %v", network, addr, netns, err)
	}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	tb.Cleanup(func() { _ = srv.Shutdown() })
}

// TestEnforcerClosesOtherResolvers checks that the proxy is the workload's only
// resolver even with defaultAction allow: Docker's embedded resolver address
// (127.0.0.11, on the random port it really listens on), the upstream on another port
// and DNS over TLS (853) to an explicitly allowed address all get nothing, and reverse
// lookups of non-public addresses are refused by the proxy.
func TestEnforcerClosesOtherResolvers(t *testing.T) {
	top := newTopology(t)
	// Docker's resolver listens on 127.0.0.11 at a random port inside the namespace.
	startDNSIn(t, top.sandbox, "udp", "127.0.0.11:5300")
	startDNSIn(t, top.sandbox, "tcp", "127.0.0.11:5300")
	startDNSIn(t, top.server, "tcp", otherDNSIP+":853")
	probes := []struct {
		name, network, server string
	}{
		{"docker_resolver_udp", "udp", "127.0.0.11:5300"},
		{"docker_resolver_tcp", "tcp", "127.0.0.11:5300"},
		{"upstream_other_port", "tcp", dnsServerIP + ":5353"},
		{"dot_to_allowed_address", "tcp", otherDNSIP + ":853"},
	}
	for _, p := range probes {
		// Baseline: each resolver answers while no enforcer runs.
		if resp, err := top.lookup(p.network, p.server, "denied.test", dns.TypeA); err != nil || resp.Rcode == dns.RcodeNameError && p.server != dnsServerIP+":5353" {
			t.Fatalf("%s before the enforcer: %v %v, want an answer", p.name, resp, err)
		}
	}
	top.startEnforcer(t, []string{EnvPolicy + `={"defaultAction":"allow","egress":[{"action":"allow","target":"` + otherDNSIP + `"},{"action":"allow","target":"` + dnsServerIP + `"}]}`})
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			resp, err := top.lookup(p.network, p.server, "denied.test", dns.TypeA)
			if err == nil {
				t.Fatalf("%s answered through the enforcer: %v", p.server, resp)
			}
			if !isTimeoutOrRefused(err) {
				t.Fatalf("%s: unexpected error %v", p.server, err)
			}
		})
	}
	t.Run("proxy_still_resolves", func(t *testing.T) {
		if ip, rcode := top.resolve(t, "allowed.test"); ip != allowedIP || rcode != dns.RcodeSuccess {
			t.Fatalf("allowed.test = %q rcode %d", ip, rcode)
		}
	})
	t.Run("ptr_of_private_address_refused", func(t *testing.T) {
		resp, err := top.lookup("udp", dnsServerIP+":53", "10.0.18.198.in-addr.arpa", dns.TypePTR)
		if err != nil || resp.Rcode != dns.RcodeNameError {
			t.Fatalf("PTR 198.18.0.10: %v %v, want NXDOMAIN from the proxy", resp, err)
		}
	})
}

// TestEnforcerAsksTheSandboxDNSServers checks the second proxy: with --dns-servers, a
// query to one of those servers is answered through the same policy by a proxy that
// asks the server itself (the main proxy's upstream here answers nothing, so an answer
// can only come that way), the allowed answer is pinned, a denied name is refused, and
// the server's other ports are closed.
func TestEnforcerAsksTheSandboxDNSServers(t *testing.T) {
	top := newTopology(t)
	top.startEnforcer(t, []string{EnvPolicy + `={"defaultAction":"deny","egress":[{"action":"allow","target":"allowed.test"}]}`},
		"--upstream", "198.18.0.99:53", "--dns-servers", otherDNSIP)
	for _, network := range []string{"udp", "tcp"} {
		t.Run("allowed_"+network, func(t *testing.T) {
			resp, err := top.lookup(network, otherDNSIP+":53", "allowed.test", dns.TypeA)
			if err != nil || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
				t.Fatalf("allowed.test from %s: %v %v", otherDNSIP, resp, err)
			}
			if a, ok := resp.Answer[0].(*dns.A); !ok || a.A.String() != allowedIP {
				t.Fatalf("allowed.test = %v, want %s", resp.Answer[0], allowedIP)
			}
		})
		t.Run("denied_"+network, func(t *testing.T) {
			resp, err := top.lookup(network, otherDNSIP+":53", "denied.test", dns.TypeA)
			if err != nil || resp.Rcode != dns.RcodeNameError {
				t.Fatalf("denied.test from %s: %v %v, want NXDOMAIN", otherDNSIP, resp, err)
			}
		})
	}
	mustConnect(t, top, allowedIP)
	mustBlock(t, top, deniedIP)
	if resp, err := top.lookup("tcp", otherDNSIP+":5353", "denied.test", dns.TypeA); err == nil || !isTimeoutOrRefused(err) {
		t.Fatalf("%s:5353 answered through the enforcer: %v %v", otherDNSIP, resp, err)
	}
}

// TestEnforcerRestartKeepsAPIPolicy checks that a policy changed through the API is the
// one a restarted enforcer installs (not the initial one), and that the rules stay in
// force while no enforcer runs.
func TestEnforcerRestartKeepsAPIPolicy(t *testing.T) {
	top := newTopology(t)
	state := filepath.Join(t.TempDir(), "state", "policy.json")
	env := []string{EnvToken + "=" + testToken, EnvPolicy + `={"defaultAction":"deny","egress":[{"action":"allow","target":"` + allowedIP + `"},{"action":"allow","target":"` + deniedIP + `"}]}`}
	proc := top.startEnforcer(t, env, "--state-file", state)
	mustConnect(t, top, deniedIP)
	if code, body := top.callAPI(t, "DELETE", `["`+deniedIP+`"]`, testToken); code != http.StatusOK {
		t.Fatalf("DELETE %s: %d %v", deniedIP, code, body)
	}
	mustBlock(t, top, deniedIP)
	if fi, err := os.Stat(state); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("state file: %v %v, want it private", fi, err)
	}
	proc.kill(t)
	mustBlock(t, top, deniedIP) // no enforcer: the table stays
	mustConnect(t, top, allowedIP)
	top.startEnforcer(t, env, "--state-file", state)
	mustBlock(t, top, deniedIP)
	mustConnect(t, top, allowedIP)
	_, body := top.callAPI(t, "GET", "", testToken)
	if got := fmt.Sprint(body["policy"]); strings.Contains(got, deniedIP) {
		t.Fatalf("restarted enforcer's policy %s still names %s", got, deniedIP)
	}
}

// TestEnforcerSignedRequestsOnly checks that the API takes only requests signed with the
// token: not the token itself, not a replayed or altered request, not one signed before
// the enforcer started; and that its answers carry a signature the gateway can check.
func TestEnforcerSignedRequestsOnly(t *testing.T) {
	top := newTopology(t)
	signedBeforeStart := time.Now().Add(-time.Second)
	top.startEnforcer(t, []string{EnvToken + "=" + testToken})
	url := "http://" + sandboxIP + ":18080/policy"
	do := func(req *http.Request) (*http.Response, string) {
		t.Helper()
		resp, err := top.apiClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = fmt.Fprint(&b, resp.Header.Get("Content-Type"))
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		return resp, string(buf[:n])
	}
	t.Run("plain_token_refused", func(t *testing.T) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set(AuthHeader, testToken)
		if resp, body := do(req); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("GET with the plain token: %d %s", resp.StatusCode, body)
		}
	})
	t.Run("signed_answer_verifies", func(t *testing.T) {
		req, _ := http.NewRequest("GET", url, nil)
		nonce := egressauth.Sign(req, testToken, nil, time.Now())
		resp, body := do(req)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("signed GET: %d %s", resp.StatusCode, body)
		}
		if !egressauth.VerifyResponse(testToken, nonce, resp.StatusCode, []byte(body), resp.Header.Get(egressauth.HeaderResponseSignature)) {
			t.Fatal("the answer's signature does not verify")
		}
	})
	t.Run("replay_refused", func(t *testing.T) {
		body := `{"defaultAction":"allow"}`
		req, _ := http.NewRequest("PUT", url, strings.NewReader(body))
		egressauth.Sign(req, testToken, []byte(body), time.Now())
		again := req.Clone(req.Context())
		again.Body = http.NoBody
		if resp, b := do(req); resp.StatusCode != http.StatusOK {
			t.Fatalf("first PUT: %d %s", resp.StatusCode, b)
		}
		again, _ = http.NewRequest("PUT", url, strings.NewReader(body))
		again.Header = req.Header.Clone()
		if resp, b := do(again); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("replayed PUT: %d %s", resp.StatusCode, b)
		}
	})
	t.Run("altered_body_refused", func(t *testing.T) {
		req, _ := http.NewRequest("PUT", url, strings.NewReader(`{"defaultAction":"allow"}`))
		egressauth.Sign(req, testToken, []byte(`{"defaultAction":"deny"}`), time.Now())
		if resp, b := do(req); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("altered PUT: %d %s", resp.StatusCode, b)
		}
	})
	t.Run("signed_before_start_refused", func(t *testing.T) {
		req, _ := http.NewRequest("GET", url, nil)
		egressauth.Sign(req, testToken, nil, signedBeforeStart)
		if resp, b := do(req); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("GET signed before the start: %d %s", resp.StatusCode, b)
		}
	})
}

// TestParseDNSServers: --dns-servers takes IPv4 addresses a query can be sent to; a
// loopback server is asked by Docker from the host's namespace, out of the rules' reach.
func TestParseDNSServers(t *testing.T) {
	for _, tt := range []struct {
		list string
		want string // the servers, or "error"
	}{
		{"", ""},
		{"192.0.2.53", "192.0.2.53"},
		{" 192.0.2.53, 198.51.100.53,192.0.2.53,", "192.0.2.53 198.51.100.53"},
		{"::ffff:192.0.2.53", "192.0.2.53"},
		{"2001:db8::53", "error"},
		{"127.0.0.11", "error"},
		{"0.0.0.0", "error"},
		{"dns.example", "error"},
	} {
		got, err := parseDNSServers(tt.list)
		s := fmt.Sprint(got)
		if err != nil {
			s = "error"
		} else {
			s = strings.Trim(s, "[]")
		}
		if s != tt.want {
			t.Errorf("parseDNSServers(%q) = %q (%v), want %q", tt.list, s, err, tt.want)
		}
	}
}
