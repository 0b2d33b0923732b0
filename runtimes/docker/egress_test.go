package docker

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/egress/egressauth"
	"github.com/sandgate/sandgate/test/testenv"
)

// testRuntime connects to the real dockerd with the built agent (bin/sandbox-agent, or
// $SANDGATE_E2E_BIN) on a network of the test's own, removed in cleanup.
func testRuntime(t *testing.T) (*Runtime, string) {
	t.Helper()
	return testRuntimeWith(t, EnforcerAuto)
}

// testRuntimeWith is testRuntime with its enforcers run as mode says; the test is skipped
// when this host cannot run enforcer processes and mode asks for them.
func testRuntimeWith(t *testing.T, mode string) (*Runtime, string) {
	t.Helper()
	image := baseImage(t)
	network := "sg-rt-" + testenv.RandomHex(4)
	t.Cleanup(func() { _ = exec.Command("docker", "network", "rm", network).Run() })
	return testRuntimeOn(t, Options{Network: network, Enforcer: mode}), image
}

// killEnforcerForGood kills sandbox id's enforcer so that only the reconciler's restore
// brings one back: the sidecar with `docker kill`, the process after its record is
// removed (its runtime then does not start it again).
func killEnforcerForGood(t *testing.T, r *Runtime, id string) {
	t.Helper()
	if r.procs != nil {
		rec, err := readEnforcerRecord(r.procs.sandboxDir(id))
		if err != nil {
			t.Fatalf("no enforcer process of %s: %v", id, err)
		}
		if err := os.Remove(filepath.Join(r.procs.sandboxDir(id), enforcerRecordFile)); err != nil {
			t.Fatal(err)
		}
		killProcess(rec.PID, rec.Start)
		return
	}
	if out, err := exec.Command("docker", "kill", egressContainerName(id)).CombinedOutput(); err != nil {
		t.Fatalf("kill the enforcer: %v: %s", err, out)
	}
}

// baseImage is the built sandgate/base image of this version; the test is skipped
// without docker or the image.
func baseImage(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker command")
	}
	version, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	image := "sandgate/base:" + strings.TrimSpace(string(version))
	if err := exec.Command("docker", "image", "inspect", image).Run(); err != nil {
		t.Skipf("image %s not built", image)
	}
	return image
}

// testRuntimeOn is a runtime with opts and the built agent, closed in cleanup (which
// removes its spare namespace holders).
func testRuntimeOn(t *testing.T, opts Options) *Runtime {
	t.Helper()
	binDir := os.Getenv("SANDGATE_E2E_BIN")
	if binDir == "" {
		binDir = "../../bin"
	}
	agent, _ := filepath.Abs(filepath.Join(binDir, "sandbox-agent"))
	if _, err := os.Stat(agent); err != nil {
		t.Skipf("no agent binary at %s (make build)", agent)
	}
	opts.AgentBinary = agent
	r, err := New(context.Background(), opts)
	if err != nil {
		t.Skipf("docker runtime: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// enforcedSpec is the spec of a test sandbox with egress policy policy (a new id and
// tokens); the sandbox is deleted when the test ends.
func enforcedSpec(t *testing.T, r *Runtime, image, policy string) runtimes.Spec {
	t.Helper()
	id := "rt" + testenv.RandomHex(3) + "-0000-4000-8000-" + testenv.RandomHex(6)
	t.Cleanup(func() { _ = r.Delete(context.Background(), id) })
	return runtimes.Spec{
		ID: id, Tenant: "t", Image: image, Entrypoint: []string{"tail", "-f", "/dev/null"}, CreatedAt: time.Now(),
		AgentToken: testenv.RandomHex(16), EgressToken: testenv.RandomHex(16),
		Egress: &runtimes.EgressSpec{Policy: []byte(policy)},
	}
}

// waitSpare waits until the runtime has a spare namespace holder ready.
func waitSpare(t *testing.T, r *Runtime) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for len(r.spares) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no spare network namespace within 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// signedPolicy reads the enforcer's policy the way the gateway does, and checks that
// the answer is signed.
func signedPolicy(t *testing.T, addr, token string) string {
	t.Helper()
	policy, err := readSignedPolicy(addr, token)
	if err != nil {
		t.Fatal(err)
	}
	return policy
}

// readSignedPolicy is signedPolicy's request; an error for no answer or one unsigned.
func readSignedPolicy(addr, token string) (string, error) {
	req, _ := http.NewRequest("GET", "http://"+net.JoinHostPort(addr, strconv.Itoa(runtimes.EgressPort))+"/policy", nil)
	nonce := egressauth.Sign(req, token, nil, time.Now())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET /policy: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !egressauth.VerifyResponse(token, nonce, resp.StatusCode, body, resp.Header.Get(egressauth.HeaderResponseSignature)) {
		return "", fmt.Errorf("GET /policy: %d %s (signature ok: false)", resp.StatusCode, body)
	}
	return string(body), nil
}

// TestEgressSidecarLifecycle: the sidecar joins only the workload's network namespace,
// RestoreEgress gives a workload whose sidecar is gone a new one with the policy it is
// handed, and Delete leaves no sidecar behind.
func TestEgressSidecarLifecycle(t *testing.T) {
	r, image := testRuntimeWith(t, EnforcerContainer)
	ctx := context.Background()
	spec := enforcedSpec(t, r, image, `{"defaultAction":"deny","egress":[{"action":"allow","target":"created.test"}]}`)
	id := spec.ID
	inst, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	sc, err := r.cli.ContainerInspect(ctx, egressContainerName(id), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pm := sc.Container.HostConfig.PidMode; pm != "" {
		t.Fatalf("sidecar PidMode %q: it must not share the workload's PID namespace", pm)
	}
	if rp := sc.Container.HostConfig.RestartPolicy.Name; rp != container.RestartPolicyUnlessStopped {
		t.Fatalf("sidecar restart policy %q", rp)
	}
	if ep := sc.Container.Config.Entrypoint; len(ep) == 0 || ep[0] != agentPath {
		t.Fatalf("sidecar entrypoint %q: the enforcer is the agent binary itself", ep)
	}
	if !inst.Settled || !inst.Complete {
		t.Fatalf("tail -f /dev/null: Settled %t, Complete %t; want both (the agent saw it settle)", inst.Settled, inst.Complete)
	}
	if got := signedPolicy(t, inst.Address, spec.EgressToken); !strings.Contains(got, "created.test") {
		t.Fatalf("initial policy: %s", got)
	}

	// The sidecar is gone (removed by hand); restore it with the sandbox's current policy.
	r.removeEgress(ctx, id)
	restoreThenRefuseFake(t, r, &spec, inst.Address, "created.test")

	if err := r.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+runtimes.LabelID+"="+id).Output()
	if ids := strings.Fields(string(out)); len(ids) != 0 {
		t.Fatalf("containers left after Delete: %v", ids)
	}
}

// restoreThenRefuseFake restores the enforcer of spec's sandbox (gone) with a new
// current policy and checks that it is in force instead of the one naming stale; then,
// the enforcer gone again and a workload holding port 18080, that RestoreEgress waits
// for a signed answer and fails.
func restoreThenRefuseFake(t *testing.T, r *Runtime, spec *runtimes.Spec, addr, stale string) {
	t.Helper()
	ctx := context.Background()
	current := *spec.Egress
	current.Policy = []byte(`{"defaultAction":"deny","egress":[{"action":"allow","target":"current.test"}]}`)
	spec.Egress = &current
	if err := r.RestoreEgress(ctx, *spec); err != nil {
		t.Fatalf("RestoreEgress: %v", err)
	}
	if got := signedPolicy(t, addr, spec.EgressToken); !strings.Contains(got, "current.test") || strings.Contains(got, stale) {
		t.Fatalf("restored policy: %s", got)
	}
	r.removeEgress(ctx, spec.ID)
	startFakeEnforcer(t, spec.ID, addr)
	if err := r.RestoreEgress(ctx, *spec); err == nil {
		t.Fatal("RestoreEgress took a fake on port 18080 for the enforcer")
	}
}

// startFakeEnforcer starts, in sandbox id's workload, an HTTP server on port 18080 that
// answers as an unsigned enforcer would, and waits until it answers at addr.
func startFakeEnforcer(t *testing.T, id, addr string) {
	t.Helper()
	fake := `import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header('Content-Length', '15'); self.end_headers(); self.wfile.write(b'{"status":"ok"}')
http.server.HTTPServer(('0.0.0.0', 18080), H).serve_forever()
`
	if out, err := exec.Command("docker", "exec", "-d", containerName(id), "python3", "-c", fake).CombinedOutput(); err != nil {
		t.Fatalf("start the fake: %v: %s", err, out)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + net.JoinHostPort(addr, "18080") + "/healthz")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fake does not answer: %v", err)
		}
	}
}

// TestEgressEntrypointExitsAtOnce: an entrypoint that exits while the agent watches it
// settle leaves an instance neither settled nor complete (no start marker), and the
// workload ends with the entrypoint's exit code, for the caller's wait to report.
func TestEgressEntrypointExitsAtOnce(t *testing.T) {
	r, image := testRuntime(t)
	ctx := context.Background()
	id := "rt" + testenv.RandomHex(3) + "-0000-4000-8000-" + testenv.RandomHex(6)
	spec := runtimes.Spec{
		ID: id, Tenant: "t", Image: image, Entrypoint: []string{"sh", "-c", "echo bye; exit 7"}, CreatedAt: time.Now(),
		AgentToken: testenv.RandomHex(16), EgressToken: testenv.RandomHex(16),
		Egress: &runtimes.EgressSpec{Policy: []byte(`{"defaultAction":"deny"}`)},
	}
	t.Cleanup(func() { _ = r.Delete(context.Background(), id) })
	inst, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if inst.Settled || inst.Complete {
		t.Fatalf("an entrypoint that exits at once: Settled %t, Complete %t; want neither", inst.Settled, inst.Complete)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		cur, err := r.Inspect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if cur.State == runtimes.StateExited {
			if cur.ExitCode != 7 || cur.Complete {
				t.Fatalf("exited with code %d (complete %t), want 7 and not complete", cur.ExitCode, cur.Complete)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workload still %s 30 s after its entrypoint exited", cur.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
