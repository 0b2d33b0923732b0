package k8s_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandgate/sandgate/test/testenv"
)

var (
	repoRoot   string
	binDir     string // holds sandgate and sandbox-agent
	kubeconfig string
	kube       *kubernetes.Clientset
	redisURL   string
	redisPid   int
	agents     *agentRunner
)

// image is what the sandbox pods name; kwok pulls nothing, so it need not exist.
const image = "sandgate/base:0.1.0"

// controlPlaneBinaries are what `scripts/k8s.sh build` caches.
var controlPlaneBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubelet", "pause", "crireset"}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	wd, _ := os.Getwd()
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	if err := checkControlPlaneBuilt(); err != nil {
		fmt.Fprintln(os.Stderr, "test/k8s:", err)
		return 1
	}
	var cleanup []func()
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	var err error
	if binDir, err = sandgateBinaries(&cleanup); err != nil {
		fmt.Fprintln(os.Stderr, "test/k8s:", err)
		return 1
	}

	state, err := os.MkdirTemp("", "sandgate-k8s-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/k8s:", err)
		return 1
	}
	os.Remove(state) // k8s.sh up wants to create it
	script := filepath.Join(repoRoot, "scripts", "k8s.sh")
	cleanup = append(cleanup, func() {
		if out, err := exec.Command(script, "down", state).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "test/k8s: k8s.sh down: %v\n%s", err, out)
		}
	})
	t0 := time.Now()
	upArgs := []string{"up", "--node", state}
	if realNode.skip, err = realNodePrereqs(script); err != nil {
		fmt.Fprintln(os.Stderr, "test/k8s:", err)
		return 1
	}
	if realNode.skip != "" {
		fmt.Fprintln(os.Stderr, "test/k8s: no real node:", realNode.skip)
		upArgs = []string{"up", state}
	}
	var upErr bytes.Buffer
	up := exec.Command(script, upArgs...)
	up.Stderr = &upErr
	out, err := up.Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "test/k8s: scripts/k8s.sh up: %v\n%s", err, upErr.String())
		return 1
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	kubeconfig = lines[len(lines)-1]
	fmt.Fprintf(os.Stderr, "test/k8s: control plane up in %s (%s)\n", time.Since(t0).Round(time.Millisecond), kubeconfig)
	if realNode.skip == "" {
		if err := readRealNodeEnv(script, state); err != nil {
			fmt.Fprintln(os.Stderr, "test/k8s:", err)
			return 1
		}
		cleanup = append(cleanup, removeRealNodeImages)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/k8s:", err)
		return 1
	}
	cfg.QPS, cfg.Burst = 500, 1000
	if kube, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "test/k8s:", err)
		return 1
	}
	// The RuntimeClass a gVisor sandbox names (the cluster admin's job on a real cluster).
	_, err = kube.NodeV1().RuntimeClasses().Create(context.Background(), &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc",
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		fmt.Fprintln(os.Stderr, "test/k8s: create RuntimeClass gvisor:", err)
		return 1
	}

	redisDir, err := os.MkdirTemp("", "sandgate-k8s-redis-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/k8s:", err)
		return 1
	}
	cleanup = append(cleanup, func() { os.RemoveAll(redisDir) })
	redis, err := testenv.StartRedis(redisDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/k8s:", err)
		return 1
	}
	cleanup = append(cleanup, redis.Stop)
	redisURL, redisPid = redis.URL, redis.Pid()

	agentDir, err := os.MkdirTemp("", "sandgate-k8s-agents-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/k8s:", err)
		return 1
	}
	cleanup = append(cleanup, func() { os.RemoveAll(agentDir) })
	if agents, err = startAgentRunner(kube, filepath.Join(binDir, "sandbox-agent"), agentDir); err != nil {
		fmt.Fprintln(os.Stderr, "test/k8s:", err)
		return 1
	}
	cleanup = append(cleanup, agents.Close)
	cleanup = append(cleanup, removeGatewayImage)
	return m.Run()
}

// checkControlPlaneBuilt fails, naming the command, when the cached control plane
// binaries are missing: building them takes about 20 minutes and belongs to `make k8s`,
// not to a test run that would look hung.
func checkControlPlaneBuilt() error {
	mod, err := os.ReadFile(filepath.Join(repoRoot, "test", "k8s", "controlplane", "go.mod"))
	if err != nil {
		return fmt.Errorf("read the control plane pins: %w", err)
	}
	version := ""
	for _, l := range strings.Split(string(mod), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "require" && f[1] == "k8s.io/kubernetes" {
			version = f[2]
		}
	}
	if version == "" {
		return fmt.Errorf("no `require k8s.io/kubernetes` line in test/k8s/controlplane/go.mod")
	}
	cache := os.Getenv("SANDGATE_K8S_CACHE")
	if cache == "" {
		cache = filepath.Join("/var/cache/sandgate/k8s", version)
	}
	var missing []string
	for _, b := range controlPlaneBinaries {
		if _, err := os.Stat(filepath.Join(cache, b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("control plane binaries %v are not built in %s; run `scripts/k8s.sh build` (about 20 minutes cold; `make test` does it through its k8s prerequisite)", missing, cache)
	}
	return nil
}

// sandgateBinaries returns the directory of bin/sandgate and bin/sandbox-agent: the one
// `make test` names, else a fresh build.
func sandgateBinaries(cleanup *[]func()) (string, error) {
	if dir := os.Getenv("SANDGATE_E2E_BIN"); dir != "" {
		return dir, nil
	}
	dir, err := os.MkdirTemp("", "sandgate-k8s-bin-")
	if err != nil {
		return "", err
	}
	*cleanup = append(*cleanup, func() { os.RemoveAll(dir) })
	for _, b := range []struct{ out, pkg, cgo string }{{"sandgate", "./caddy", "0"}, {"sandbox-agent", "./sandbox-agent", "0"}} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return dir, nil
}

// Shared with test/e2e (test/testenv).
var (
	randomHex = testenv.RandomHex
	waitFor   = testenv.WaitFor
)

// response is a decoded API answer.
type response = testenv.Response

// newNamespace creates a namespace for one test's gateway and removes it (and its pods)
// when the test ends.
func newNamespace(t testing.TB) string {
	t.Helper()
	name := "sg-" + randomHex(4)
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() { deleteNamespace(t, name) })
	// The ServiceAccount admission plugin refuses pods until the namespace's default
	// ServiceAccount exists (the controller-manager creates it).
	waitFor(t, time.Minute, func() bool {
		_, err := kube.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}, "the namespace's default ServiceAccount")
	return name
}

// deleteNamespace removes a namespace's pods at once, then the namespace, and waits
// until their agents have stopped.
func deleteNamespace(t testing.TB, name string) {
	ctx := context.Background()
	zero := int64(0)
	_ = kube.CoreV1().Pods(name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	_ = kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	deadline := time.Now().Add(2 * time.Minute)
	for agents.runningIn(name) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := agents.runningIn(name); n > 0 {
		t.Errorf("%d agents of namespace %s still run", n, name)
	}
}

// pods lists the sandbox pods of a namespace.
func pods(t testing.TB, namespace string) []corev1.Pod {
	t.Helper()
	list, err := kube.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "sandgate.io/id"})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	return list.Items
}

// gateway is one running sandgate process on the Kubernetes runtime.
type gateway struct {
	t         testing.TB
	Addr      string
	APIKey    string
	Namespace string
	env       []string
	proc      *testenv.Sandgate
	client    *http.Client
}

// startGateway starts sandgate on the Kubernetes runtime in namespace, with its own
// Redis key prefix; extra are more SANDGATE_* settings.
func startGateway(t testing.TB, namespace string, extra ...string) *gateway {
	t.Helper()
	// The client keeps a connection pool as an SDK does: the default transport's two
	// idle connections per host would make each call of a batch's fan-out (64 at once)
	// dial the gateway anew.
	client := &http.Client{Timeout: 10 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute}}
	t.Cleanup(client.CloseIdleConnections)
	g := &gateway{t: t, APIKey: "k-" + randomHex(12), Namespace: namespace, client: client}
	g.env = append([]string{
		"SANDGATE_ADMIN=off",
		"SANDGATE_API_KEY=" + g.APIKey,
		"SANDGATE_REDIS_URL=" + redisURL,
		"SANDGATE_REDIS_PREFIX=k8s" + randomHex(4) + ":",
		"SANDGATE_RUNTIME=kubernetes",
		"SANDGATE_KUBECONFIG=" + kubeconfig,
		"SANDGATE_NAMESPACE=" + namespace,
		// One deployment per namespace: a gateway on a fresh store (its own Redis
		// prefix) owns the namespace's sandboxes as its predecessor did.
		"SANDGATE_CLUSTER_ID=k8s-test-" + namespace,
		"SANDGATE_MIN_TIMEOUT=1s",
		"SANDGATE_SYNC_INTERVAL=500ms",
		"SANDGATE_FAILED_RETENTION=1h",
		"SANDGATE_POOL_CONCURRENCY=64",
	}, extra...)
	t.Cleanup(g.Stop)
	g.start()
	return g
}

// start runs the process (again, after Kill) with the same settings, on a new port.
func (g *gateway) start() {
	g.t.Helper()
	proc, err := testenv.StartSandgate(filepath.Join(binDir, "sandgate"), g.t.TempDir(), g.env)
	if err != nil {
		g.t.Fatal(err)
	}
	g.proc, g.Addr = proc, proc.Addr
}

// Kill ends the gateway abruptly (SIGKILL), as a crash would.
func (g *gateway) Kill() { g.proc.Kill() }

// Stop ends the gateway gracefully (SIGTERM), killing it if it hangs.
func (g *gateway) Stop() {
	if g.proc == nil {
		return
	}
	g.proc.Stop()
	if g.t.Failed() {
		g.t.Logf("sandgate %s logs:\n%s", g.Addr, testenv.Tail(g.proc.Logs(), 8000))
	}
}

// do sends an API request with the gateway's key; body may be nil or any JSON value.
func (g *gateway) do(method, path string, body any, headers ...string) response {
	g.t.Helper()
	return testenv.Do(g.t, g.client, g.Addr, g.APIKey, method, path, body, headers...)
}

// createSandbox creates a sandbox and fails the test unless it is Running.
func (g *gateway) createSandbox(req map[string]any) string {
	g.t.Helper()
	if req["image"] == nil {
		req["image"] = map[string]any{"uri": image}
	}
	if req["entrypoint"] == nil {
		req["entrypoint"] = []string{"sleep", "infinity"}
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

// state reads a sandbox's state through the API.
func (g *gateway) state(id string) string {
	g.t.Helper()
	r := g.do("GET", "/v1/sandboxes/"+id, nil)
	if r.Status != 200 {
		return fmt.Sprintf("HTTP %d", r.Status)
	}
	st, _ := r.JSON(g.t)["status"].(map[string]any)
	s, _ := st["state"].(string)
	return s
}

// endpoint returns the gateway URL and headers of a sandbox's agent, as an SDK gets
// them from /v1/sandboxes/{id}/endpoints/44772. It is safe to call from any goroutine.
func (g *gateway) endpoint(id string) (string, map[string]string, error) {
	req, err := http.NewRequest("GET", "http://"+g.Addr+"/v1/sandboxes/"+id+"/endpoints/44772", nil)
	if err != nil {
		return "", nil, err
	}
	req.Header.Set("OPEN-SANDBOX-API-KEY", g.APIKey)
	resp, err := g.client.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", nil, fmt.Errorf("endpoint of %s: %d %s", id, resp.StatusCode, data)
	}
	var ep struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(data, &ep); err != nil {
		return "", nil, err
	}
	return "http://" + ep.Endpoint, ep.Headers, nil
}

// command runs a shell command in a sandbox through the gateway's proxy to its agent
// (/sandboxes/{id}/proxy/44772/command) and returns its stdout and exit code.
func (g *gateway) command(id, command string) (string, int, error) {
	base, headers, err := g.endpoint(id)
	if err != nil {
		return "", 0, err
	}
	body, _ := json.Marshal(map[string]any{"command": command})
	req, err := http.NewRequest("POST", base+"/command", bytes.NewReader(body))
	if err != nil {
		return "", 0, err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		return "", 0, fmt.Errorf("command: %d %s", resp.StatusCode, data)
	}
	var stdout []string
	exit := -1
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "data:"))
		if line == "" || strings.HasPrefix(line, ":") {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Text  string `json:"text"`
			Error *struct {
				Evalue string `json:"evalue"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return "", 0, fmt.Errorf("bad event %q: %w", line, err)
		}
		switch ev.Type {
		case "stdout":
			stdout = append(stdout, ev.Text)
		case "execution_complete":
			if exit < 0 {
				exit = 0
			}
		case "error":
			if ev.Error != nil {
				exit, _ = strconv.Atoi(ev.Error.Evalue)
			}
		}
	}
	return strings.Join(stdout, "\n"), exit, sc.Err()
}

// ping calls the agent's /ping through the gateway.
func (g *gateway) ping(id string, base string, headers map[string]string) error {
	req, err := http.NewRequest("GET", base+"/ping", nil)
	if err != nil {
		return err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("ping %s: %s", id, resp.Status)
	}
	return nil
}

func (g *gateway) createPool(name string, size int, template map[string]any) {
	g.t.Helper()
	if template == nil {
		template = map[string]any{}
	}
	if template["image"] == nil {
		template["image"] = map[string]any{"uri": image}
	}
	if template["entrypoint"] == nil {
		template["entrypoint"] = []string{"sleep", "infinity"}
	}
	if template["resourceLimits"] == nil {
		// Small, so that a thousand fit on three fake nodes.
		template["resourceLimits"] = map[string]string{"cpu": "50m", "memory": "64Mi"}
	}
	// Every bound at size: the pool fills to size and never refills past it, so a claim
	// leaves nothing for the pool manager to create.
	r := g.do("POST", "/v1/pools", map[string]any{"name": name, "template": template,
		"capacitySpec": map[string]int{"bufferMin": size, "bufferMax": size, "poolMin": size, "poolMax": size}})
	if r.Status != 201 {
		g.t.Fatalf("create pool: %d %s", r.Status, r.Body)
	}
}

// poolAvailable reads how many warm members a pool holds.
func (g *gateway) poolAvailable(name string) int {
	g.t.Helper()
	r := g.do("GET", "/v1/pools/"+name, nil)
	if r.Status != 200 {
		g.t.Fatalf("get pool: %d %s", r.Status, r.Body)
	}
	st := r.JSON(g.t)["status"].(map[string]any)
	return int(st["available"].(float64))
}

func (g *gateway) waitAvailable(name string, want int, within time.Duration) {
	g.t.Helper()
	waitFor(g.t, within, func() bool { return g.poolAvailable(name) == want }, fmt.Sprintf("pool %s to hold %d available", name, want))
}

// batch is the answer to POST /v1/batches.
type batch struct {
	ID      string `json:"id"`
	Members []struct {
		ID     string                 `json:"id"`
		Source string                 `json:"source"`
		Status struct{ State string } `json:"status"`
	} `json:"members"`
}

// ---- the API server's own request counters ---------------------------------------

// heartbeatResources are written on a timer by every cluster's node agents and
// controllers (node leases, node status), whatever sandgate does; they are left out of
// write counts and reported apart.
var heartbeatResources = map[string]bool{"leases": true, "nodes/status": true}

// apiWrites reads apiserver_request_total from the API server's /metrics and returns
// the write requests (POST, PUT, PATCH, DELETE, APPLY) by "VERB resource[/subresource]",
// summed over every other label.
func apiWrites(t testing.TB) map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("read the API server's /metrics: %v", err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labelText, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		labels := parseLabels(labelText)
		switch labels["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION", "CREATE", "UPDATE":
		default:
			continue
		}
		n, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			continue
		}
		res := labels["resource"]
		if labels["subresource"] != "" {
			res += "/" + labels["subresource"]
		}
		out[labels["verb"]+" "+res] += n
	}
	return out
}

// parseLabels reads the label pairs of one Prometheus text-format sample.
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		name, rest, ok := strings.Cut(s, `="`)
		if !ok {
			break
		}
		var val strings.Builder
		i := 0
		for ; i < len(rest); i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				val.WriteByte(rest[i])
				continue
			}
			if rest[i] == '"' {
				break
			}
			val.WriteByte(rest[i])
		}
		out[strings.TrimLeft(name, ",")] = val.String()
		if i+1 >= len(rest) {
			break
		}
		s = rest[i+1:]
	}
	return out
}

// writesBetween returns what grew between two readings, split into sandbox-related
// writes and heartbeats.
func writesBetween(before, after map[string]float64) (writes, heartbeats map[string]float64) {
	writes, heartbeats = map[string]float64{}, map[string]float64{}
	for k, v := range after {
		d := v - before[k]
		if d <= 0 {
			continue
		}
		_, res, _ := strings.Cut(k, " ")
		if heartbeatResources[res] {
			heartbeats[k] = d
		} else {
			writes[k] = d
		}
	}
	return writes, heartbeats
}

func sum(m map[string]float64) float64 {
	total := 0.0
	for _, v := range m {
		total += v
	}
	return total
}
