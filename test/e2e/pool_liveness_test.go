package e2e

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// poolMemberContainers lists the running containers of a pool on the env's network:
// sandbox id → container id.
func (e *env) poolMemberContainers(pool string) map[string]string {
	e.t.Helper()
	out, err := exec.Command("docker", "ps", "--filter", "label=sandgate.io/network="+e.Network, "--filter", "label=sandgate.io/pool="+pool,
		"--format", `{{.Label "sandgate.io/id"}} {{.ID}}`).Output()
	if err != nil {
		e.t.Fatalf("docker ps: %v", err)
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if id, c, ok := strings.Cut(l, " "); ok {
			m[id] = c
		}
	}
	return m
}

// firstCall sends a sandbox's very first agent call (a command) and returns the status
// and body; it fails the test on a transport error (a hang ends in the client timeout).
func (g *gateway) firstCall(id, command string) (int, string) {
	g.t.Helper()
	a := g.agent(id)
	a.client.Timeout = time.Minute
	resp := a.request("POST", "/command", strings.NewReader(`{"command":`+jsonString(command)+`}`), "application/json")
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestPoolMemberDeaths: the gateway learns of a warm member's death from the runtime
// before anyone claims (the pool manager's own sweep is turned off here: a long sync
// interval), so a dead member is never handed out; a member that dies right after its
// claim answers its first call with SANDBOX::UNAVAILABLE (not a hang, not a 502), is
// marked Failed, and the pool fills up again.
func TestPoolMemberDeaths(t *testing.T) {
	e := newEnv(t, startRedis(t), "SANDGATE_SYNC_INTERVAL=1h")
	g := e.startGateway()
	g.createPool("live", 2, 2, 0, 6, nil)
	g.waitAvailable("live", 2, 90*time.Second)

	t.Run("a member killed while warm is not handed out", func(t *testing.T) {
		var victim, container string
		for id, c := range e.poolMemberContainers("live") {
			victim, container = id, c
			break
		}
		if err := exec.Command("docker", "kill", container).Run(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool { return exec.Command("docker", "inspect", container).Run() != nil },
			"the gateway to take the dead warm member out of its pool and remove it")
		for i := 0; i < 2; i++ {
			id := g.createSandbox(map[string]any{"extensions": map[string]string{"poolRef": "live"}})
			if id == victim {
				t.Fatalf("claim %d handed out the killed member %s", i, victim)
			}
			if out := stdoutOf(g.agent(id).run("echo alive")); out != "alive" {
				t.Fatalf("claimed member %s: %q", id, out)
			}
			g.do("DELETE", "/v1/sandboxes/"+id, nil)
		}
	})

	t.Run("a member killed just before its claim is not handed out", func(t *testing.T) {
		// The claim comes before the engine reports the death (it does so only once it
		// tore the container's network down), so only the claim's own look finds it.
		for round := 0; round < 3; round++ {
			g.waitAvailable("live", 2, 90*time.Second)
			victims := e.poolMemberContainers("live")
			// Their processes are killed from here, a syscall each, so that the claims
			// follow within a millisecond (the docker CLI alone takes longer than the
			// engine's report).
			args := []string{"inspect", "-f", "{{.State.Pid}}"}
			for _, c := range victims {
				args = append(args, c)
			}
			out, err := exec.Command("docker", args...).Output()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range strings.Fields(string(out)) {
				pid, err := strconv.Atoi(f)
				if err != nil || pid <= 1 {
					t.Fatalf("container pid %q", f)
				}
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 2; i++ {
				id := g.createSandbox(map[string]any{"extensions": map[string]string{"poolRef": "live"}})
				if _, killed := victims[id]; killed {
					t.Fatalf("round %d claim %d handed out the member %s killed just before", round, i, id)
				}
				if status, body := g.firstCall(id, "echo alive"); status != http.StatusOK || !strings.Contains(body, "alive") {
					t.Fatalf("round %d claimed sandbox %s: %d %s", round, id, status, body)
				}
				g.do("DELETE", "/v1/sandboxes/"+id, nil)
			}
		}
	})

	for _, tc := range []struct {
		name  string
		claim map[string]any
	}{
		{"a member killed right after its claim answers SANDBOX::UNAVAILABLE", map[string]any{}},
		{"so does one killed while its late binding runs", map[string]any{"env": map[string]string{"LATE": "1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g.waitAvailable("live", 2, 90*time.Second)
			tc.claim["extensions"] = map[string]string{"poolRef": "live"}
			id := g.createSandbox(tc.claim)
			container := e.poolMemberContainers("live")[id]
			if container == "" {
				t.Fatalf("no running container for claimed member %s", id)
			}
			if err := exec.Command("docker", "kill", container).Run(); err != nil {
				t.Fatal(err)
			}
			status, body := g.firstCall(id, "echo hello")
			if status != http.StatusServiceUnavailable || !strings.Contains(body, "SANDBOX::UNAVAILABLE") {
				t.Fatalf("first call to a member killed after its claim: %d %s, want 503 SANDBOX::UNAVAILABLE", status, body)
			}
			waitFor(t, 30*time.Second, func() bool {
				r := g.do("GET", "/v1/sandboxes/"+id, nil)
				return r.Status == 200 && r.JSON(t)["status"].(map[string]any)["state"] == "Failed"
			}, "the dead member to read Failed")
			// Every later call says the same, at once.
			if status, body := g.firstCall(id, "echo again"); status != http.StatusServiceUnavailable || !strings.Contains(body, "SANDBOX::UNAVAILABLE") {
				t.Fatalf("second call: %d %s", status, body)
			}
			g.waitAvailable("live", 2, 90*time.Second)
			g.do("DELETE", "/v1/sandboxes/"+id, nil)
		})
	}
}

// TestPoolClaimFirstCommand: a claimed member's very first command already runs with
// the claim's env and behind the claim's egress policy, although the claim answers
// before they are applied.
func TestPoolClaimFirstCommand(t *testing.T) {
	w := newEgressWorld(t, map[string][]string{"allowed": {"allowed.test"}, "denied": {"denied.test"}})
	w.g.createPool("first", 2, 2, 0, 4, map[string]any{"env": map[string]string{"FROM_TEMPLATE": "t"}})
	w.g.waitAvailable("first", 2, 90*time.Second)
	for i := 0; i < 2; i++ {
		r := w.g.do("POST", "/v1/sandboxes", map[string]any{"extensions": map[string]string{"poolRef": "first"},
			"env":           map[string]string{"CLAIMED": "yes"},
			"networkPolicy": map[string]any{"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": "allowed.test"}}}})
		if r.Status != 202 {
			t.Fatalf("claim: %d %s", r.Status, r.Body)
		}
		id := r.JSON(t)["id"].(string)
		// One command, the first: env, an allowed name, a denied address.
		script := `echo "env=$CLAIMED/$FROM_TEMPLATE"; ` +
			`echo "allowed=$(curl -s -o /dev/null -w '%{http_code}' --connect-timeout 2 --max-time 4 http://allowed.test:8000/ || true)"; ` +
			`echo "denied=$(curl -s -o /dev/null -w '%{http_code}' --connect-timeout 2 --max-time 4 http://` + w.servers["denied"] + `:8000/ || true)"`
		status, body := w.g.firstCall(id, "echo "+base64.StdEncoding.EncodeToString([]byte(script))+" | base64 -d | sh")
		if status != 200 {
			t.Fatalf("first command: %d %s", status, body)
		}
		out := stdoutOf(readEvents(t, strings.NewReader(body)))
		for _, want := range []string{"env=yes/t", "allowed=200", "denied=000"} {
			if !strings.Contains(out, want) {
				t.Fatalf("first command of claimed %s printed %q, want %q in it", id, out, want)
			}
		}
		w.g.do("DELETE", "/v1/sandboxes/"+id, nil)
	}
}
