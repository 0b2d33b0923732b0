package egress

import (
	"encoding/json"
	"fmt"

	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/sandgate/sandgate/sandbox-agent/egress/egressauth"
)

const testToken = "test-token"

const basePolicy = `{"defaultAction":"deny","egress":[
 {"action":"allow","target":"allowed.test"},
 {"action":"allow","target":"*.example.test"},
 {"action":"allow","target":"198.18.0.64/26"},
 {"action":"allow","target":"platform.test"},
 {"action":"allow","target":"198.18.0.20"},
 {"action":"allow","target":"short.test"},
 {"action":"allow","target":"v6.test"}
]}`

// blockTimeout is how long a probe waits for a connection the rules must drop.
const blockTimeout = 700 * time.Millisecond

func (top *topology) callAPI(tb testing.TB, method, body string, token string) (int, map[string]any) {
	tb.Helper()
	req, err := http.NewRequest(method, "http://"+sandboxIP+":18080/policy", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		egressauth.Sign(req, token, []byte(body), time.Now())
	}
	resp, err := top.apiClient().Do(req)
	if err != nil {
		tb.Fatalf("%s /policy: %v", method, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		tb.Fatalf("%s /policy: body %q is not JSON: %v", method, data, err)
	}
	return resp.StatusCode, out
}

func mustConnect(t *testing.T, top *topology, ip string) {
	t.Helper()
	body, err := top.httpGet(net.JoinHostPort(ip, "80"), 2*time.Second)
	if err != nil {
		t.Fatalf("connect %s: %v, want allowed", ip, err)
	}
	if !strings.HasPrefix(body, ip+":") && !strings.HasPrefix(body, "["+ip+"]:") {
		t.Fatalf("connect %s: body %q, want the server's address", ip, body)
	}
}

func mustBlock(t *testing.T, top *topology, ip string) {
	t.Helper()
	body, err := top.httpGet(net.JoinHostPort(ip, "80"), blockTimeout)
	if err == nil {
		t.Fatalf("connect %s succeeded (%q), want blocked", ip, body)
	}
	if !isTimeoutOrRefused(err) {
		t.Fatalf("connect %s: unexpected error %v", ip, err)
	}
}

func TestEnforcerInNetns(t *testing.T) {
	top := newTopology(t)

	t.Run("baseline_without_enforcer_everything_reachable", func(t *testing.T) {
		// Proves the probes below fail because of the rules, not the topology.
		mustConnect(t, top, deniedIP)
		mustConnect(t, top, serverIP6)
		if ip, _ := top.resolve(t, "denied.test"); ip != deniedIP {
			t.Fatalf("denied.test = %q before the enforcer, want %s", ip, deniedIP)
		}
	})

	proc := top.startEnforcer(t, []string{EnvPolicy + "=" + basePolicy, EnvToken + "=" + testToken},
		"--platform-deny", platformCIDR, "--min-ttl", "1s")

	t.Run("allowed_name_resolves_and_connects", func(t *testing.T) {
		ip, rcode := top.resolve(t, "allowed.test")
		if rcode != dns.RcodeSuccess || ip != allowedIP {
			t.Fatalf("allowed.test = %q rcode %d, want %s", ip, rcode, allowedIP)
		}
		mustConnect(t, top, allowedIP)
	})
	t.Run("denied_name_is_nxdomain", func(t *testing.T) {
		ip, rcode := top.resolve(t, "denied.test")
		if rcode != dns.RcodeNameError || ip != "" {
			t.Fatalf("denied.test = %q rcode %s, want NXDOMAIN", ip, dns.RcodeToString[rcode])
		}
	})
	t.Run("direct_ip_to_denied_server_fails", func(t *testing.T) {
		mustBlock(t, top, deniedIP)
	})
	t.Run("other_resolver_is_answered_by_proxy", func(t *testing.T) {
		// The server at otherDNSIP would answer denied.test with an address; NXDOMAIN
		// proves the proxy answered instead.
		resp, err := top.lookup("udp", otherDNSIP+":53", "denied.test", dns.TypeA)
		if err != nil || resp.Rcode != dns.RcodeNameError {
			t.Fatalf("denied.test via %s: %v %v, want NXDOMAIN from the proxy", otherDNSIP, resp, err)
		}
		resp, err = top.lookup("udp", otherDNSIP+":53", "allowed.test", dns.TypeA)
		if err != nil || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
			t.Fatalf("allowed.test via %s: %v %v, want an answer", otherDNSIP, resp, err)
		}
	})
	t.Run("dns_over_tcp", func(t *testing.T) {
		tests := []struct {
			name   string
			server string
			qname  string
			rcode  int // -1: must not get an answer at all
		}{
			{"port_53_elsewhere_redirected_denied", otherDNSIP + ":53", "denied.test", dns.RcodeNameError},
			{"port_53_elsewhere_redirected_allowed", otherDNSIP + ":53", "allowed.test", dns.RcodeSuccess},
			{"other_port_blocked", dnsServerIP + ":5353", "allowed.test", -1},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				resp, err := top.lookup("tcp", tt.server, tt.qname, dns.TypeA)
				if tt.rcode == -1 {
					if err == nil {
						t.Fatalf("DNS over TCP to %s answered: %v", tt.server, resp)
					}
					return
				}
				if err != nil || resp.Rcode != tt.rcode {
					t.Fatalf("%s via tcp %s: %v %v, want rcode %s", tt.qname, tt.server, resp, err, dns.RcodeToString[tt.rcode])
				}
			})
		}
	})
	t.Run("wildcard_admits_subdomain_not_apex", func(t *testing.T) {
		if ip, rcode := top.resolve(t, "A.Example.Test."); ip != subdomainIP || rcode != dns.RcodeSuccess {
			t.Fatalf("a.example.test = %q rcode %d", ip, rcode)
		}
		mustConnect(t, top, subdomainIP)
		if _, rcode := top.resolve(t, "example.test"); rcode != dns.RcodeNameError {
			t.Fatalf("example.test rcode %s, want NXDOMAIN", dns.RcodeToString[rcode])
		}
		mustBlock(t, top, apexIP)
	})
	t.Run("cidr_rule", func(t *testing.T) {
		mustConnect(t, top, cidrInIP)
		mustBlock(t, top, cidrOutIP)
	})
	t.Run("platform_deny_beats_sandbox_allow", func(t *testing.T) {
		// The policy allows both platform.test and its address explicitly.
		if ip, _ := top.resolve(t, "platform.test"); ip != platformIP {
			t.Fatalf("platform.test = %q, want %s (the name is allowed)", ip, platformIP)
		}
		mustBlock(t, top, platformIP)
	})
	t.Run("ipv6_blocked", func(t *testing.T) {
		mustBlock(t, top, serverIP6)
	})

	t.Run("aaaa_answer_pins_ipv6", func(t *testing.T) {
		resp, err := top.lookup("udp", dnsServerIP+":53", "v6.test", dns.TypeAAAA)
		if err != nil || len(resp.Answer) != 1 {
			t.Fatalf("v6.test AAAA: %v %v", resp, err)
		}
		mustConnect(t, top, serverIP6)
	})
	t.Run("pin_expires_with_ttl", func(t *testing.T) {
		if ip, _ := top.resolve(t, "short.test"); ip != shortIP {
			t.Fatalf("short.test = %q", ip)
		}
		mustConnect(t, top, shortIP)
		time.Sleep(1500 * time.Millisecond) // TTL 1s, --min-ttl 1s
		mustBlock(t, top, shortIP)
	})

	t.Run("api", func(t *testing.T) {
		t.Run("unauthorized_without_token", func(t *testing.T) {
			code, body := top.callAPI(t, "GET", "", "")
			if code != http.StatusUnauthorized || body["code"] != CodeUnauthorized {
				t.Fatalf("GET without token: %d %v", code, body)
			}
			code, _ = top.callAPI(t, "GET", "", "wrong")
			if code != http.StatusUnauthorized {
				t.Fatalf("GET with wrong token: %d", code)
			}
		})
		t.Run("get_shape", func(t *testing.T) {
			code, body := top.callAPI(t, "GET", "", testToken)
			if code != http.StatusOK {
				t.Fatalf("GET: %d %v", code, body)
			}
			want := map[string]any{"status": "ok", "mode": "enforcing", "enforcementMode": "dns+nft", "platformDeny": []any{platformCIDR}}
			got := map[string]any{"status": body["status"], "mode": body["mode"], "enforcementMode": body["enforcementMode"], "platformDeny": body["platformDeny"]}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("GET /policy (-want +got):\n%s", diff)
			}
			pol := body["policy"].(map[string]any)
			if pol["defaultAction"] != "deny" || len(pol["egress"].([]any)) != 7 {
				t.Fatalf("policy = %v", pol)
			}
		})
		t.Run("invalid_update_rejected_policy_unchanged", func(t *testing.T) {
			for _, body := range []string{
				`{"defaultAction":"deny","egress":[{"action":"allow","target":"300.1.1.1"}]}`,
				`[{"action":"allow","target":"http://denied.test"}]`,
			} {
				method := "PUT"
				if strings.HasPrefix(body, "[") {
					method = "PATCH"
				}
				code, resp := top.callAPI(t, method, body, testToken)
				if code != http.StatusBadRequest || resp["code"] != CodeInvalidPolicy || resp["message"] == "" {
					t.Fatalf("%s %s: %d %v, want 400 %s", method, body, code, resp, CodeInvalidPolicy)
				}
			}
			_, got := top.callAPI(t, "GET", "", testToken)
			if n := len(got["policy"].(map[string]any)["egress"].([]any)); n != 7 {
				t.Fatalf("policy has %d rules after rejected updates, want 7", n)
			}
			if ip, _ := top.resolve(t, "allowed.test"); ip != allowedIP {
				t.Fatalf("allowed.test stopped resolving after a rejected update")
			}
		})
	})

	t.Run("patch_allows_denied_server_without_restart", func(t *testing.T) {
		code, body := top.callAPI(t, "PATCH", `[{"action":"allow","target":"denied.test"}]`, testToken)
		if code != http.StatusOK {
			t.Fatalf("PATCH: %d %v", code, body)
		}
		egress := body["policy"].(map[string]any)["egress"].([]any)
		if first := egress[0].(map[string]any); first["target"] != "denied.test" || len(egress) != 8 {
			t.Fatalf("PATCH did not put the rule first: %v", egress)
		}
		start := time.Now()
		ip, rcode := top.resolve(t, "denied.test")
		if rcode != dns.RcodeSuccess || ip != deniedIP {
			t.Fatalf("denied.test after PATCH = %q rcode %d", ip, rcode)
		}
		mustConnect(t, top, deniedIP)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("PATCH took %v to apply, want < 1s", d)
		}
		// Pins of names still allowed survive the table rebuild.
		mustConnect(t, top, allowedIP)
	})
	t.Run("delete_removes_rule_and_its_pins", func(t *testing.T) {
		code, body := top.callAPI(t, "DELETE", `["denied.test"]`, testToken)
		if code != http.StatusOK {
			t.Fatalf("DELETE: %d %v", code, body)
		}
		if _, rcode := top.resolve(t, "denied.test"); rcode != dns.RcodeNameError {
			t.Fatalf("denied.test after DELETE: rcode %s, want NXDOMAIN", dns.RcodeToString[rcode])
		}
		mustBlock(t, top, deniedIP)
		mustConnect(t, top, allowedIP)
	})
	t.Run("replace_with_allow_default", func(t *testing.T) {
		code, body := top.callAPI(t, "PUT", `{"defaultAction":"allow","egress":[{"action":"deny","target":"denied.test"},{"action":"deny","target":"198.18.0.128/25"}]}`, testToken)
		if code != http.StatusOK || body["mode"] != "enforcing" {
			t.Fatalf("PUT: %d %v", code, body)
		}
		if _, rcode := top.resolve(t, "denied.test"); rcode != dns.RcodeNameError {
			t.Fatalf("denied.test: rcode %s, want NXDOMAIN", dns.RcodeToString[rcode])
		}
		if ip, _ := top.resolve(t, "example.test"); ip != apexIP {
			t.Fatalf("example.test = %q in allow mode", ip)
		}
		mustConnect(t, top, apexIP)
		mustBlock(t, top, cidrOutIP)  // IP deny rule
		mustBlock(t, top, platformIP) // platform deny holds in allow mode too
		mustConnect(t, top, serverIP6)
	})
	t.Run("ip_rules_first_match_wins_in_kernel", func(t *testing.T) {
		code, body := top.callAPI(t, "PUT", `{"defaultAction":"deny","egress":[
			{"action":"allow","target":"198.18.0.11"},
			{"action":"deny","target":"198.18.0.0/24"},
			{"action":"allow","target":"198.18.0.0/16"},
			{"action":"allow","target":"2001:db8:5347::/64"}]}`, testToken)
		if code != http.StatusOK {
			t.Fatalf("PUT: %d %v", code, body)
		}
		mustConnect(t, top, deniedIP) // the hole punched before the deny
		mustBlock(t, top, apexIP)     // the deny before the wider allow
		mustConnect(t, top, serverIP6)
	})
	t.Run("killing_the_enforcer_does_not_open_the_network", func(t *testing.T) {
		code, _ := top.callAPI(t, "PUT", basePolicy, testToken)
		if code != http.StatusOK {
			t.Fatalf("PUT: %d", code)
		}
		if ip, _ := top.resolve(t, "allowed.test"); ip != allowedIP { // pinned before the crash
			t.Fatalf("allowed.test = %q", ip)
		}
		proc.kill(t)
		if !outputChainDrops(t, top.sandbox) {
			t.Fatal("table or its drop policy gone after the enforcer died")
		}
		for _, server := range []string{dnsServerIP + ":53", otherDNSIP + ":53"} {
			if resp, err := top.lookup("udp", server, "denied.test", dns.TypeA); err == nil {
				t.Fatalf("DNS via %s answered with the proxy dead: %v", server, resp)
			}
		}
		mustBlock(t, top, deniedIP)
		mustBlock(t, top, apexIP)
		mustBlock(t, top, serverIP6)
	})
	t.Run("restarted_enforcer_takes_over_table_and_pins", func(t *testing.T) {
		top.startEnforcer(t, []string{EnvPolicy + "=" + basePolicy, EnvToken + "=" + testToken})
		mustConnect(t, top, allowedIP) // pinned by the previous enforcer, not resolved again
		mustBlock(t, top, deniedIP)
		if _, rcode := top.resolve(t, "denied.test"); rcode != dns.RcodeNameError {
			t.Fatalf("denied.test after restart: rcode %s", dns.RcodeToString[rcode])
		}
		// A policy change drops inherited pins whose names are no longer allowed.
		code, _ := top.callAPI(t, "DELETE", `["allowed.test"]`, testToken)
		if code != http.StatusOK {
			t.Fatalf("DELETE: %d", code)
		}
		mustBlock(t, top, allowedIP)
	})
}

// TestEnforcerPolicyHook checks that API changes go through the hook: the hook here is
// a real HTTP server in the sandbox namespace standing in for the gateway's Rego; it
// strips denied.test, forbids forbidden.test and fails on broken.test.
func TestEnforcerPolicyHook(t *testing.T) {
	top := newTopology(t)
	var hookLn net.Listener
	if err := inNetns(top.sandbox, func() error {
		var err error
		hookLn, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var lastAuth atomic.Value
	lastAuth.Store("")
	hook := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lastAuth.Store(r.Header.Get("Authorization"))
		var req HookRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out := Policy{DefaultAction: req.Proposed.DefaultAction}
		for _, rule := range req.Proposed.Egress {
			switch rule.Target {
			case "forbidden.test":
				writeError(w, http.StatusForbidden, "POLICY::DENIED", "forbidden.test is not allowed for this tenant")
				return
			case "broken.test":
				http.Error(w, "boom", http.StatusInternalServerError)
				return
			case "garbage.test":
				writeJSON(w, http.StatusOK, HookResponse{Policy: Policy{Egress: []Rule{{Action: "allow", Target: "300.1.1.1"}}}})
				return
			case "denied.test":
				continue
			}
			out.Egress = append(out.Egress, rule)
		}
		writeJSON(w, http.StatusOK, HookResponse{Policy: out})
	})}
	go func() { _ = hook.Serve(hookLn) }()
	t.Cleanup(func() { _ = hook.Close() })

	top.startEnforcer(t, []string{EnvPolicy + "=" + basePolicy, EnvHookToken + "=hook-secret"},
		"--policy-hook", "http://"+hookLn.Addr().String()+"/egress-hook")

	tests := []struct {
		name      string
		method    string
		body      string
		wantCode  int
		wantRules int
	}{
		{"hook_strips_rule", "PATCH", `[{"action":"allow","target":"denied.test"},{"action":"allow","target":"new.test"}]`, http.StatusOK, 8},
		{"hook_forbids", "PATCH", `[{"action":"allow","target":"forbidden.test"}]`, http.StatusForbidden, 8},
		{"hook_invalid_answer_fails_closed", "PATCH", `[{"action":"allow","target":"garbage.test"}]`, http.StatusServiceUnavailable, 8},
		{"hook_failure_fails_closed", "PUT", `{"defaultAction":"allow","egress":[{"action":"allow","target":"broken.test"}]}`, http.StatusServiceUnavailable, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := top.callAPI(t, tt.method, tt.body, "")
			if code != tt.wantCode {
				t.Fatalf("%s: %d %v, want %d", tt.method, code, body, tt.wantCode)
			}
			_, got := top.callAPI(t, "GET", "", "")
			pol := got["policy"].(map[string]any)
			if n := len(pol["egress"].([]any)); n != tt.wantRules || pol["defaultAction"] != "deny" {
				t.Fatalf("policy after %s: %v, want %d rules and deny", tt.name, pol, tt.wantRules)
			}
		})
	}
	if got := lastAuth.Load().(string); got != "Bearer hook-secret" {
		t.Errorf("hook saw Authorization %q", got)
	}
	if _, rcode := top.resolve(t, "denied.test"); rcode != dns.RcodeNameError {
		t.Fatalf("denied.test resolved although the hook stripped its rule")
	}
	if ip, _ := top.resolve(t, "allowed.test"); ip != allowedIP {
		t.Fatalf("allowed.test = %q", ip)
	}
}

// TestEnforcerBadInitialPolicyFailsClosed checks that an unreadable policy leaves
// the sandbox with deny-all rules and a non-zero exit.
func TestEnforcerBadInitialPolicyFailsClosed(t *testing.T) {
	top := newTopology(t)
	cmd := exec.Command("ip", "netns", "exec", top.sandbox, mustExe(t), "--upstream", dnsServerIP+":53")
	cmd.Env = append(cmdEnv(), childEnv+"=1", EnvPolicy+`={"egress":[{"action":"allow","target":"10.0.0.0/33"}]}`)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "prefix length 33 exceeds 32") {
		t.Fatalf("enforcer with a bad policy: err %v, output:\n%s", err, out)
	}
	mustBlock(t, top, allowedIP)
	if _, err := top.lookup("udp", dnsServerIP+":53", "allowed.test", dns.TypeA); err == nil {
		t.Fatal("DNS answered after a failed start")
	}
}

// TestEnforcerCleanupFlag checks the one way the table goes away: --cleanup on a
// clean shutdown. It also checks /healthz.
func TestEnforcerCleanupFlag(t *testing.T) {
	top := newTopology(t)
	proc := top.startEnforcer(t, nil, "--cleanup")
	resp, err := top.apiClient().Get("http://" + sandboxIP + ":18080/healthz")
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status":"ok"`) {
		t.Fatalf("GET /healthz: %d %s", resp.StatusCode, body)
	}
	mustBlock(t, top, allowedIP) // no policy given: deny all
	if err := proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-proc.done
	if outputChainDrops(t, top.sandbox) {
		t.Fatal("table still there after --cleanup")
	}
	mustConnect(t, top, allowedIP)
}

// TestEnforcerConcurrentLookupsAndUpdates resolves an allowed name from several
// goroutines while the policy is rebuilt over and over: every lookup must succeed and
// every address must stay reachable, since each rebuild carries the pins over.
func TestEnforcerConcurrentLookupsAndUpdates(t *testing.T) {
	top := newTopology(t)
	top.startEnforcer(t, []string{EnvPolicy + "=" + basePolicy}, "--log-level", "info")
	const workers, lookups, updates = 4, 40, 20
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			for i := 0; i < lookups; i++ {
				resp, err := top.lookup("udp", dnsServerIP+":53", "allowed.test", dns.TypeA)
				if err != nil || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
					errs <- fmt.Errorf("lookup %d: %v %v", i, resp, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for i := 0; i < updates; i++ {
		method, body := "PATCH", `[{"action":"allow","target":"extra.test"}]`
		if i%2 == 1 {
			method, body = "DELETE", `["extra.test"]`
		}
		if code, resp := top.callAPI(t, method, body, ""); code != http.StatusOK {
			t.Fatalf("%s: %d %v", method, code, resp)
		}
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mustConnect(t, top, allowedIP)
}
