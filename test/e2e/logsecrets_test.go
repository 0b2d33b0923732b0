package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestProxyLogsNoSecrets: with debug logging, requests proxied to the agent and the
// enforcer, a WebSocket upgrade to the agent (agent calls and upgrades are logged by
// reverse_proxy with their headers), one to a port where nothing listens, and a sandbox
// killed in the middle of its agent's streamed answer (reverse_proxy's "aborting with
// incomplete response" warning) leave no credential in the gateway's log: not the
// agent's token, the enforcer's, the sandbox access token nor the API key.
func TestProxyLogsNoSecrets(t *testing.T) {
	rs := startRedis(t)
	e := newEnv(t, rs)
	g := e.startGateway("SANDGATE_LOG_LEVEL=DEBUG")
	id := g.createSandbox(map[string]any{"timeout": 600})
	a := g.agent(id)

	// The record the gateway keeps holds the tokens it sends upstream.
	opt, err := redis.ParseURL(rs.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	// (Key layout: gateway/store/layout.go; the admin key's tenant is "default".)
	raw, err := rdb.HGet(context.Background(), e.Prefix+"{t:default}:sandbox:"+id, "json").Result()
	if err != nil {
		t.Fatalf("read the sandbox record: %v", err)
	}
	var rec struct{ AgentToken, EgressToken, AccessToken string }
	if err := json.Unmarshal([]byte(raw), &rec); err != nil || rec.AgentToken == "" {
		t.Fatalf("sandbox record %s: %v", raw, err)
	}

	if got := stdoutOf(a.run("echo hello")); !strings.Contains(got, "hello") {
		t.Fatalf("command output %q", got)
	}
	if r := g.do("GET", "/v1/sandboxes/"+id+"/proxy/18080/policy", nil); r.Status != 200 {
		t.Errorf("GET the egress policy: %d %s", r.Status, r.Body)
	}
	g.do("GET", fmt.Sprintf("/sandboxes/%s/proxy/%d/", id, 9), nil) // nothing listens: a dial error
	// Agent calls and upgrades go through Caddy's reverse_proxy, which logs each round
	// trip (headers included) at debug level; other requests go through api.NewForward,
	// which logs none.
	var pty struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal(a.mustCall(200, "POST", "/pty", map[string]any{"cwd": "/tmp"}).Body, &pty); err != nil || pty.SessionID == "" {
		t.Fatalf("create pty: %v", err)
	}
	wsCtx, wsCancel := context.WithTimeout(context.Background(), time.Minute)
	dialAgentWS(t, wsCtx, a, "/pty/"+pty.SessionID+"/ws").CloseNow()
	wsCancel()

	// The sandbox dies while its agent streams a command's output: reverse_proxy warns.
	resp := a.request("POST", "/command", strings.NewReader(`{"command":"echo started; sleep 60"}`), "application/json")
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("the command's stream ended before its first line: %v", err)
		}
		if strings.Contains(line, "started") {
			break
		}
	}
	out, err := exec.Command("docker", "ps", "-q", "--filter", "label=sandgate.io/id="+id, "--format", `{{.ID}} {{.Label "sandgate.io/role"}}`).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 1 { // the sandbox, not its enforcer
			if b, err := exec.Command("docker", "kill", f[0]).CombinedOutput(); err != nil {
				t.Fatalf("docker kill: %v %s", err, b)
			}
		}
	}
	io.Copy(io.Discard, rd)
	resp.Body.Close()

	var logs string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if logs = g.proc.Logs(); strings.Contains(logs, "aborting with incomplete response") {
			break
		}
	}
	if !strings.Contains(logs, `"upstream roundtrip"`) {
		t.Fatalf("no debug log of a proxied upgrade: the check below would prove nothing")
	}
	if !strings.Contains(logs, "aborting with incomplete response") {
		t.Errorf("no warning about the aborted stream")
	}
	secrets := map[string]string{"the agent token": rec.AgentToken, "the egress token": rec.EgressToken,
		"the access token": rec.AccessToken, "the API key": e.APIKey}
	for _, v := range a.headers {
		secrets["the endpoint header"] = v
	}
	for name, secret := range secrets {
		if secret == "" {
			continue
		}
		if strings.Contains(logs, secret) {
			for _, line := range strings.Split(logs, "\n") {
				if strings.Contains(line, secret) {
					t.Errorf("the gateway log holds %s: %s", name, tail(line, 600))
					break
				}
			}
		}
	}
}
