package e2e

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestEgressHostAddresses: every address of the gateway's host (docker0's, the other
// bridges', the host's own interfaces') is out of a sandbox's reach even with
// defaultAction allow and even when the sandbox allows the address itself; a server on
// the sandbox network stays reachable, so the check is not a broken client.
func TestEgressHostAddresses(t *testing.T) {
	// A server the test starts on each of the host's own IPv4 addresses.
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.To4() == nil || ipn.IP.IsLoopback() {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(ipn.IP.String(), "0"))
		if err != nil {
			t.Fatalf("listen on the host's %s: %v", ipn.IP, err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("host")) })}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		targets = append(targets, ln.Addr().String())
	}
	if !strings.Contains(strings.Join(targets, " "), "172.17.0.1:") {
		t.Logf("no docker0 at 172.17.0.1 on this host; checking %v", targets)
	}
	if len(targets) == 0 {
		t.Fatal("the host has no IPv4 address besides loopback")
	}

	w := newEgressWorld(t, map[string][]string{"peer": {"peer"}})
	peer := net.JoinHostPort(w.servers["peer"], "8000")
	var allowHost []map[string]any
	for _, target := range targets {
		host, _, _ := net.SplitHostPort(target)
		allowHost = append(allowHost, map[string]any{"action": "allow", "target": host})
	}
	policies := map[string]map[string]any{
		"defaultAction allow":           {"defaultAction": "allow"},
		"the addresses allowed as well": {"defaultAction": "allow", "egress": allowHost},
	}
	for name, np := range policies {
		t.Run(name, func(t *testing.T) {
			s := w.sandbox(np)
			var script strings.Builder
			for _, target := range append([]string{peer}, targets...) {
				fmt.Fprintf(&script, "echo %s $(curl -s -o /dev/null -w '%%{http_code}' --connect-timeout 2 --max-time 4 http://%s/ || true); ", target, target)
			}
			got := map[string]string{}
			for _, line := range strings.Split(s.sh(script.String()), "\n") {
				if f := strings.Fields(line); len(f) == 2 {
					got[f[0]] = f[1]
				}
			}
			if got[peer] != "200" {
				t.Fatalf("the server on the sandbox network answered %q, want 200 (all: %v)", got[peer], got)
			}
			for _, target := range targets {
				if got[target] != "000" {
					t.Errorf("the sandbox reached the host's %s: HTTP %q", target, got[target])
				}
			}
		})
	}
}
