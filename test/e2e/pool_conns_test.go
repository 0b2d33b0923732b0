package e2e

import (
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// connsTo lists the local ports of this host's established TCP connections to addr
// ("ip:port", IPv4), read from /proc/net/tcp: the gateway runs in the host's network
// namespace, so these are its connections to a sandbox's agent.
func connsTo(t testing.TB, addr string) []int {
	t.Helper()
	host, portStr, _ := net.SplitHostPort(addr)
	ip := net.ParseIP(host).To4()
	port, _ := strconv.Atoi(portStr)
	// /proc/net/tcp writes an IPv4 address as its 32-bit value in host (little-endian) order.
	want := fmt.Sprintf("%s:%04X", strings.ToUpper(hex.EncodeToString([]byte{ip[3], ip[2], ip[1], ip[0]})), port)
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	var ports []int
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[2] != want || f[3] != "01" { // 01: ESTABLISHED
			continue
		}
		_, lp, _ := strings.Cut(f[1], ":")
		n, _ := strconv.ParseUint(lp, 16, 16)
		ports = append(ports, int(n))
	}
	sort.Ints(ports)
	return ports
}

// TestPoolWarmConnOutlivesIdleTimeout: a warm member's keep-alive connection from the
// gateway's proxy stays open however long the member waits in its pool, past the proxy's
// idle timeout (2 minutes by default, 2 s here: SANDGATE_AGENT_IDLE_TIMEOUT), so that its
// claimer's first command does not connect: no new connection to the agent appears.
// Before the pool manager refreshed those connections, the proxy closed it after the
// idle timeout and the first command after a long wait dialled.
func TestPoolWarmConnOutlivesIdleTimeout(t *testing.T) {
	const idle = 2 * time.Second
	e := newEnv(t, startRedis(t), fmt.Sprintf("SANDGATE_AGENT_IDLE_TIMEOUT=%s", idle))
	g := e.startGateway()
	g.createPool("idle", 1, 1, 0, 1, nil)
	g.waitAvailable("idle", 1, 2*time.Minute)
	var member string
	for id := range e.poolMemberContainers("idle") {
		member = id
	}
	if member == "" {
		t.Fatal("no warm member")
	}
	agentAddr := net.JoinHostPort(sandboxAddr(t, member), "44772")
	opened := connsTo(t, agentAddr)
	if len(opened) == 0 {
		t.Fatalf("no connection from the gateway to the warm member's agent %s", agentAddr)
	}
	time.Sleep(3 * idle)
	if got := connsTo(t, agentAddr); fmt.Sprint(got) != fmt.Sprint(opened) {
		t.Fatalf("after %s warm (idle timeout %s) the connections to the agent are %v, want %v, those opened when it became warm", 3*idle, idle, got, opened)
	}
	r := g.do("POST", "/v1/sandboxes", map[string]any{"extensions": map[string]string{"poolRef": "idle"}})
	if r.Status != 202 {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	if id := r.JSON(t)["id"].(string); id != member {
		t.Fatalf("claimed %s, want the warm member %s", id, member)
	}
	if out := stdoutOf(g.agent(member).run("echo first")); out != "first" {
		t.Fatalf("first command: %q", out)
	}
	for _, p := range connsTo(t, agentAddr) {
		if !containsInt(opened, p) {
			t.Fatalf("the first command after the claim opened a new connection to the agent (local port %d; open before: %v)", p, opened)
		}
	}
	g.do("DELETE", "/v1/pools/idle", nil)
	g.do("DELETE", "/v1/sandboxes/"+member, nil)
	waitFor(t, time.Minute, func() bool { return len(e.containers()) == 0 }, "every container to go")
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
