// Package e2e drives the built sandgate binary against a real Docker engine and a real
// redis-server, over HTTP, the way an OpenSandbox SDK would. Nothing is mocked: every
// sandbox is a container, and every test removes what it started.
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/runtimes/docker"
	"github.com/sandgate/sandgate/test/testenv"
)

var (
	binDir    string // holds sandgate and sandbox-agent
	baseImage string
	repoRoot  string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	wd, _ := os.Getwd()
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	version, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: read VERSION:", err)
		return 1
	}
	baseImage = "sandgate/base:" + strings.TrimSpace(string(version))
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: no Docker engine answers (run `make deps`): %v\n%s", err, out)
		return 1
	}
	if err := exec.Command("docker", "image", "inspect", baseImage).Run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: image %s is missing (run `make images`)\n", baseImage)
		return 1
	}
	binDir = os.Getenv("SANDGATE_E2E_BIN")
	if binDir == "" {
		dir, err := os.MkdirTemp("", "sandgate-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		for _, b := range []struct {
			out, pkg string
			static   bool
		}{
			{"sandgate", "./caddy", true}, {"sandbox-agent", "./sandbox-agent", true},
		} {
			// The version make builds with: the gateway names images by it (the E2B
			// door's default templates).
			ldflags := "-X github.com/sandgate/sandgate/gateway.Version=" + strings.TrimSpace(string(version))
			cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", filepath.Join(dir, b.out), b.pkg)
			cmd.Dir = repoRoot
			cmd.Env = os.Environ()
			if b.static {
				cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "e2e: build %s: %v\n%s", b.pkg, err, out)
				return 1
			}
		}
		binDir = dir
	}
	before := agentVolumes()
	code := m.Run()
	// The gateways of this run filled a read-only agent volume per agent build
	// (runtimes/docker/agentvolume.go); remove the ones the run made. One still mounted
	// (a gateway outside the tests) is refused by the engine and stays.
	for _, v := range agentVolumes() {
		if !slices.Contains(before, v) {
			_ = exec.Command("docker", "volume", "rm", v).Run()
		}
	}
	return code
}

// agentVolumes lists the engine's sandgate agent volumes.
func agentVolumes() []string {
	out, _ := exec.Command("docker", "volume", "ls", "-q", "--filter", "name=sandgate-agent-").Output()
	return strings.Fields(string(out))
}

// Shared with test/k8s (test/testenv).
var (
	randomHex = testenv.RandomHex
	waitFor   = testenv.WaitFor
	tail      = testenv.Tail
)

// redisServer is a private redis-server on a loopback port.
type redisServer = testenv.Redis

// response is a decoded API answer.
type response = testenv.Response

func startRedis(t testing.TB) *redisServer {
	t.Helper()
	r, err := testenv.StartRedis(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// env is one test's world: its own Docker network (so its gateways see only its own
// sandboxes), API key and Redis key prefix.
type env struct {
	t       testing.TB
	Network string
	APIKey  string
	Prefix  string
	Redis   *redisServer // nil: embedded store
	extra   []string
	// bin, when set, is the sandgate binary startGateway runs (another version's).
	bin string
}

func newEnv(t testing.TB, redis *redisServer, extra ...string) *env {
	t.Helper()
	e := &env{t: t, Network: "sg-e2e-" + randomHex(4), APIKey: "k-" + randomHex(12), Prefix: "e2e" + randomHex(4) + ":", Redis: redis, extra: extra}
	t.Cleanup(e.removeDockerObjects)
	return e
}

// removeDockerObjects deletes every container on the test's network (workloads in their
// own namespace, spare and used namespace holders, test servers), every workload labelled
// with it (those in a holder's namespace) and the egress enforcers that share their
// network namespace (processes and sidecars), then the network.
func (e *env) removeDockerObjects() {
	// Enforcer processes first (runtimes/docker/enforcerprocess.go): a gateway that was
	// killed or stopped leaves them running, holding their sandboxes' namespaces.
	docker.RemoveEnforcerProcesses(e.Network)
	var ids []string
	ours := map[string]bool{}
	for _, filter := range []string{"network=" + e.Network, "label=sandgate.io/network=" + e.Network} {
		out, _ := exec.Command("docker", "ps", "-a", "--filter", filter, "--format", `{{.ID}} {{.Label "sandgate.io/id"}}`).Output()
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(line); len(f) > 0 {
				ids = append(ids, f[0])
				if len(f) > 1 {
					ours[f[1]] = true
				}
			}
		}
	}
	out, _ := exec.Command("docker", "ps", "-a", "--filter", "label=sandgate.io/role=egress", "--format", `{{.ID}} {{.Label "sandgate.io/id"}}`).Output()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 2 && ours[f[1]] {
			ids = append(ids, f[0])
		}
	}
	if len(ids) > 0 {
		_ = exec.Command("docker", append([]string{"rm", "-f", "-v"}, ids...)...).Run()
	}
	// The staging mounts of the sandboxes' host volumes (runtimes/docker/hoststaging.go):
	// a sandbox removed here, not by its gateway's Delete, leaves them.
	for id := range ours {
		removeHostVolumeStaging(id)
	}
	// The gateways' anti-spoofing table of the network's bridge (a gateway that was
	// killed did not remove it).
	if out, err := exec.Command("docker", "network", "inspect", "-f", `{{.Id}} {{with index .Options "com.docker.network.bridge.name"}}{{.}}{{end}}`, e.Network).Output(); err == nil {
		if f := strings.Fields(string(out)); len(f) > 0 {
			bridge := "br-" + f[0][:min(12, len(f[0]))]
			if len(f) > 1 {
				bridge = f[1]
			}
			_ = exec.Command("nft", "delete", "table", "bridge", docker.AntiSpoofTable(bridge)).Run()
		}
	}
	// The engine releases a removed container's endpoint a little after the removal
	// answers: until then the network "has active endpoints".
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		out, err := exec.Command("docker", "network", "rm", e.Network).CombinedOutput()
		if err == nil || strings.Contains(string(out), "No such network") || strings.Contains(string(out), "not found") || time.Now().After(deadline) {
			break
		}
	}
}

// containers lists the test's containers: the sandboxes' workloads (on the network or
// labelled with it: in a namespace holder's namespace) and the test's servers, not the
// gateway's namespace holders (spares come and go in the background; a used one goes
// with its sandbox, which TestEgress checks).
func (e *env) containers() []string {
	seen := map[string]bool{}
	var ids []string
	for _, filter := range []string{"network=" + e.Network, "label=sandgate.io/network=" + e.Network} {
		out, err := exec.Command("docker", "ps", "-a", "--filter", filter, "--format", `{{.ID}} {{.Label "sandgate.io/role"}}`).Output()
		if err != nil {
			e.t.Fatalf("docker ps: %v", err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || seen[f[0]] || (len(f) > 1 && f[1] == "netns") {
				continue
			}
			seen[f[0]] = true
			ids = append(ids, f[0])
		}
	}
	return ids
}

// poolLabels lists the env's containers in one call: sandbox id → the pool it was made
// for ("" for none).
func (e *env) poolLabels() map[string]string {
	m := map[string]string{}
	// By label (every workload of this version, in its own namespace or a holder's) and
	// by network (workloads of earlier versions, which have no such label).
	for _, filter := range []string{"label=sandgate.io/network=" + e.Network, "network=" + e.Network} {
		out, err := exec.Command("docker", "ps", "-a", "--filter", filter, "--filter", "label=sandgate.io/id", "--format", `{{.Label "sandgate.io/id"}}|{{.Label "sandgate.io/pool"}}|{{.Label "sandgate.io/role"}}`).Output()
		if err != nil {
			e.t.Errorf("docker ps: %v", err)
			return nil
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(l, "|")
			if len(f) == 3 && f[0] != "" && f[2] == "" { // a sandbox, not its helper
				m[f[0]] = f[1]
			}
		}
	}
	return m
}

// gateway is one running sandgate process.
type gateway struct {
	t      testing.TB
	Addr   string
	APIKey string
	proc   *testenv.Sandgate
	client *http.Client
}

func (e *env) startGateway(extra ...string) *gateway {
	e.t.Helper()
	env := []string{
		"SANDGATE_ADMIN=off",
		"SANDGATE_API_KEY=" + e.APIKey,
		"SANDGATE_REDIS_PREFIX=" + e.Prefix,
		"SANDGATE_DOCKER_NETWORK=" + e.Network,
		"SANDGATE_AGENT_BINARY=" + filepath.Join(binDir, "sandbox-agent"),
		"SANDGATE_MIN_TIMEOUT=1s",
		"SANDGATE_SYNC_INTERVAL=500ms",
		"SANDGATE_FAILED_RETENTION=1h",
		// No test pulls from a registry it did not start: an image missing on the host
		// stays SANDBOX::IMAGE_NOT_FOUND unless a test turns pulling on (SANDGATE_PULL in
		// its extra env wins: the last value of a variable counts).
		"SANDGATE_PULL=never",
	}
	if e.Redis != nil {
		env = append(env, "SANDGATE_REDIS_URL="+e.Redis.URL)
	}
	env = append(env, e.extra...)
	env = append(env, extra...)
	// For a look inside while debugging, e.g. SANDGATE_E2E_GATEWAY_ENV=SANDGATE_ADMIN=127.0.0.1:2019
	// serves Caddy's admin API with /debug/pprof/ (space-separated KEY=VALUE pairs).
	env = append(env, strings.Fields(os.Getenv("SANDGATE_E2E_GATEWAY_ENV"))...)
	bin := filepath.Join(binDir, "sandgate")
	if e.bin != "" {
		bin = e.bin
	}
	proc, err := testenv.StartSandgate(bin, e.t.TempDir(), env)
	if err != nil {
		e.t.Fatal(err)
	}
	g := &gateway{t: e.t, Addr: proc.Addr, APIKey: e.APIKey, proc: proc, client: &http.Client{Timeout: 2 * time.Minute}}
	e.t.Cleanup(g.Stop)
	return g
}

// Stop ends the gateway gracefully (SIGTERM), killing it if it hangs.
func (g *gateway) Stop() {
	g.proc.Stop()
	if g.t.Failed() {
		g.t.Logf("sandgate %s logs:\n%s", g.Addr, tail(g.proc.Logs(), 8000))
	}
}

// do sends an API request with the gateway's key; body may be nil, []byte or any JSON value.
func (g *gateway) do(method, path string, body any, headers ...string) response {
	g.t.Helper()
	return testenv.Do(g.t, g.client, g.Addr, g.APIKey, method, path, body, headers...)
}

// expectError checks status and code of an error answer.
func expectError(t testing.TB, r response, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status = %d, want %d; body %s", r.Status, status, r.Body)
	}
	m := r.JSON(t)
	if m["code"] != code {
		t.Fatalf("code = %v, want %s; body %s", m["code"], code, r.Body)
	}
	if msg, _ := m["message"].(string); msg == "" {
		t.Fatalf("error without message: %s", r.Body)
	}
}

// createSandbox creates a sandbox and fails the test unless it is Running.
func (g *gateway) createSandbox(req map[string]any) string {
	g.t.Helper()
	if req["image"] == nil {
		req["image"] = map[string]any{"uri": baseImage}
	}
	if req["entrypoint"] == nil {
		req["entrypoint"] = []string{"tail", "-f", "/dev/null"}
	}
	r := g.do("POST", "/v1/sandboxes", req)
	if r.Status != http.StatusAccepted {
		g.t.Fatalf("create: status %d: %s", r.Status, r.Body)
	}
	m := r.JSON(g.t)
	if st := m["status"].(map[string]any)["state"]; st != "Running" {
		g.t.Fatalf("create: state %v, want Running", st)
	}
	return m["id"].(string)
}

// agent is a client for one sandbox's agent, reached the SDK way: through the endpoint
// the gateway returns for port 44772, with the headers it returns.
type agent struct {
	t       testing.TB
	base    string
	headers map[string]string
	client  *http.Client
}

func (g *gateway) agent(id string) *agent {
	g.t.Helper()
	r := g.do("GET", "/v1/sandboxes/"+id+"/endpoints/44772", nil)
	if r.Status != 200 {
		g.t.Fatalf("endpoint: %d %s", r.Status, r.Body)
	}
	var ep struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(r.Body, &ep); err != nil {
		g.t.Fatal(err)
	}
	return &agent{t: g.t, base: "http://" + ep.Endpoint, headers: ep.Headers, client: &http.Client{Timeout: 5 * time.Minute}}
}

func (a *agent) request(method, path string, body io.Reader, contentType string) *http.Response {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, body)
	if err != nil {
		a.t.Fatal(err)
	}
	for k, v := range a.headers {
		req.Header.Set(k, v)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// event is one event of an agent stream.
type event struct {
	Type          string `json:"type"`
	Text          string `json:"text"`
	Timestamp     int64  `json:"timestamp"`
	ExecutionTime int64  `json:"execution_time"`
	Error         *struct {
		Ename  string `json:"ename"`
		Evalue string `json:"evalue"`
	} `json:"error"`
	Results map[string]any `json:"results"`
}

// readEvents parses a stream of JSON events (bare or "data:"-prefixed, blank-line separated).
func readEvents(t testing.TB, r io.Reader) []event {
	t.Helper()
	var out []event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		line = strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		if line == "" || strings.HasPrefix(line, ":") {
			continue
		}
		var ev event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("bad event line %q: %v", line, err)
		}
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read events: %v", err)
	}
	return out
}

// run executes a foreground command and returns its events.
func (a *agent) run(command string) []event {
	a.t.Helper()
	body, _ := json.Marshal(map[string]any{"command": command})
	resp := a.request("POST", "/command", bytes.NewReader(body), "application/json")
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		a.t.Fatalf("command %q: %d %s", command, resp.StatusCode, data)
	}
	return readEvents(a.t, resp.Body)
}

func stdoutOf(evs []event) string {
	var lines []string
	for _, ev := range evs {
		if ev.Type == "stdout" {
			lines = append(lines, ev.Text)
		}
	}
	return strings.Join(lines, "\n")
}

func lastEvent(evs []event) event {
	if len(evs) == 0 {
		return event{}
	}
	return evs[len(evs)-1]
}

// sandboxIP reads a sandbox's address from the engine: its workload's own on the network,
// or, for one in a namespace holder's namespace (runtimes/docker/holders.go, where the
// engine reports none for the workload), the address the workload is labelled with.
func sandboxIP(t testing.TB, id string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", `{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}|{{index .Config.Labels "sandgate.io/address"}}`, "sandgate-"+id).Output()
	if err != nil {
		t.Fatalf("docker inspect sandgate-%s: %v", id, err)
	}
	own, label, _ := strings.Cut(strings.TrimSpace(string(out)), "|")
	if f := strings.Fields(own); len(f) > 0 {
		return f[0]
	}
	if label == "" {
		t.Fatalf("no address for sandbox %s", id)
	}
	return label
}

// removeHostVolumeStaging unmounts and removes sandbox id's host volume staging
// directory, if any.
func removeHostVolumeStaging(id string) {
	if id == "" || strings.ContainsAny(id, "/.") {
		return
	}
	dir := filepath.Join("/run/sandgate/host-volumes", id)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		_ = exec.Command("umount", "-l", p).Run()
		_ = os.Remove(p)
	}
	_ = os.Remove(dir)
}
