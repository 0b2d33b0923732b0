package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Names of the servers TestSDKPy starts on the sandbox network for the egress tests.
const (
	sdkPyAllowedHost = "allowed.sdkpy.test"
	sdkPyDeniedHost  = "denied.sdkpy.test"
)

// TestSDKPy runs the client suite in test/sdk-py: the published OpenSandbox Python SDKs
// (opensandbox and opensandbox-code-interpreter, pinned in its requirements.txt) against
// a gateway started here, with pytest. Beside the gateway it starts what the suite
// reaches: two HTTP servers on the sandbox network for the egress tests, an HTTPS echo
// server under a name the gateway's enforcers trust upstream for the vault tests, and
// host directories under the prefix the gateway allows for the volume tests (and the
// engine's API version, which decides whether a named volume mounts at a subPath). The
// suite's venv comes from test/sdk-py/install.sh (scripts/test.sh runs it; this test
// runs it too when the venv is missing).
func TestSDKPy(t *testing.T) {
	python, dir := sdkPySuite(t)

	e := newEnv(t, startRedis(t))
	if out, err := exec.Command("docker", "network", "create", "--label", "sandgate.io/network=sandboxes", e.Network).CombinedOutput(); err != nil {
		t.Fatalf("create network: %v: %s", err, out)
	}
	startTestServer(t, e.Network, []string{sdkPyAllowedHost})
	startTestServer(t, e.Network, []string{sdkPyDeniedHost})
	vw := &vaultWorld{t: t, e: e, ca: newTestCA(t, vaultEchoHost)}
	vw.startEcho(vaultEchoHost)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, vw.ca.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	prefix, rw, ro := hostVolumeDirs(t)
	run := randomHex(4)
	removeSDKPyVolumes(t, e, run)
	g := e.startGateway("SANDGATE_VAULT_UPSTREAM_CA="+caFile, "SANDGATE_VOLUME_HOST_PREFIXES="+prefix)
	removeSDKSnapshots(t, e, g)
	secret := "sk-sdkpy-" + randomHex(16)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// SANDGATE_SDK_PYTEST_ARGS adds pytest arguments while working on the suite, e.g.
	// "-k vault" or "--runxfail -k health_check" (space-separated).
	args := append([]string{"-m", "pytest", "-q", "--color=no"}, strings.Fields(os.Getenv("SANDGATE_SDK_PYTEST_ARGS"))...)
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"SANDGATE_SDK_DOMAIN="+g.Addr,
		"SANDGATE_SDK_API_KEY="+g.APIKey,
		"SANDGATE_SDK_IMAGE="+baseImage,
		"SANDGATE_SDK_CODE_IMAGE="+strings.Replace(baseImage, "/base:", "/code-interpreter:", 1),
		"SANDGATE_SDK_RUN="+run,
		"SANDGATE_SDK_EGRESS_ALLOWED="+sdkPyAllowedHost,
		"SANDGATE_SDK_EGRESS_DENIED="+sdkPyDeniedHost,
		"SANDGATE_SDK_VAULT_HOST="+vaultEchoHost,
		"SANDGATE_SDK_VAULT_SECRET="+secret,
		"SANDGATE_SDK_HOST_PREFIX="+prefix,
		"SANDGATE_SDK_HOST_RW="+rw,
		"SANDGATE_SDK_HOST_RO="+ro,
		// The SDK reports create latencies to the server it talks to; sandgate has no use
		// for them.
		"OPENSANDBOX_DISABLE_METRICS=1",
		"PYTHONDONTWRITEBYTECODE=1",
		"NO_COLOR=1",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest: %v\n%s", err, out)
	}
	// pytest exits 0 only when nothing failed or errored (a strict xfail that passes
	// fails) and tests were collected; its summary line must agree.
	if summary := sdkPySummary(out); !strings.Contains(summary, " passed") || strings.Contains(summary, " failed") || strings.Contains(summary, " error") {
		t.Fatalf("pytest's summary %q does not report passed tests only:\n%s", summary, out)
	}
	if strings.Contains(g.proc.Logs(), secret) {
		t.Fatal("the gateway's log holds the vault credential's value")
	}
	t.Logf("%s", out)
}

// sdkPySummaryLine matches pytest's last line, "48 passed, 5 xfailed in 54.34s" (framed
// in "=" with -v).
var sdkPySummaryLine = regexp.MustCompile(`(?m)^=*\s*(\d+ [a-z]+(?:, \d+ [a-z]+)*) in [\d.]+s`)

// sdkPySummary answers the counts of pytest's summary line in out, " "-prefixed, or ""
// when there is none.
func sdkPySummary(out []byte) string {
	m := sdkPySummaryLine.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		return ""
	}
	return " " + string(m[len(m)-1][1])
}

// sdkPySuite answers the venv's python and the directory of the Python SDK suite
// (test/sdk-py), running its install.sh first when the venv is missing.
func sdkPySuite(t *testing.T) (python, dir string) {
	t.Helper()
	dir = filepath.Join(repoRoot, "test", "sdk-py")
	python = filepath.Join(dir, ".venv", "bin", "python")
	if _, err := os.Stat(filepath.Join(dir, ".venv", "requirements.installed")); err != nil {
		if out, err := exec.Command(filepath.Join(dir, "install.sh")).CombinedOutput(); err != nil {
			t.Fatalf("test/sdk-py/install.sh: %v\n%s", err, out)
		}
	}
	return python, dir
}

// removeSDKPyVolumes removes, at the end of the test, the named volumes the suite's
// claims made (their names end with the run's token), after the env's containers.
func removeSDKPyVolumes(t *testing.T, e *env, run string) {
	t.Cleanup(func() {
		e.removeDockerObjects()
		out, _ := exec.Command("docker", "volume", "ls", "-q", "--filter", "label=sandgate.io/tenant=default").Output()
		for _, v := range strings.Fields(string(out)) {
			if strings.Contains(v, "-sdkpy-"+run) {
				_ = exec.Command("docker", "volume", "rm", "-f", v).Run()
			}
		}
	})
}

// removeSDKSnapshots removes, at the end of the test and while the gateway still runs,
// the images of the snapshots the suite left in the gateway's store (its own Redis
// prefix: no other test's), after the env's containers.
func removeSDKSnapshots(t *testing.T, e *env, g *gateway) {
	t.Cleanup(func() {
		e.removeDockerObjects()
		var list struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
		}
		r := g.do("GET", "/v1/snapshots?pageSize=200", nil)
		if err := json.Unmarshal(r.Body, &list); err != nil {
			t.Errorf("list snapshots: %d %s", r.Status, r.Body)
			return
		}
		for _, s := range list.Items {
			out, _ := exec.Command("docker", "image", "ls", "-q", "--filter", "label=sandgate.io/snapshot="+s.ID).Output()
			for _, img := range strings.Fields(string(out)) {
				_ = exec.Command("docker", "image", "rm", "-f", img).Run()
			}
		}
	})
}
