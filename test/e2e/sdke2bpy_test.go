package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSDKE2BPy runs the client suite in test/sdk-e2b-py: the published E2B Python SDKs
// (e2b and e2b-code-interpreter, pinned in its requirements.txt) against the E2B door
// of a gateway started here, with pytest, configured only by E2B's own variables (E2B_API_URL,
// E2B_SANDBOX_URL, E2B_API_KEY) and with the door's default templates. Two tenants' keys: the suite's own, and another's for
// its cross-tenant probes. The suite's venv comes from test/sdk-e2b-py/install.sh
// (scripts/test.sh runs it; this test runs it too when the venv is missing).
func TestSDKE2BPy(t *testing.T) {
	dir := filepath.Join(repoRoot, "test", "sdk-e2b-py")
	python := filepath.Join(dir, ".venv", "bin", "python")
	if _, err := os.Stat(filepath.Join(dir, ".venv", "requirements.installed")); err != nil {
		if out, err := exec.Command(filepath.Join(dir, "install.sh")).CombinedOutput(); err != nil {
			t.Fatalf("test/sdk-e2b-py/install.sh: %v\n%s", err, out)
		}
	}

	e := newEnv(t, startRedis(t))
	if out, err := exec.Command("docker", "network", "create", "--label", "sandgate.io/network=sandboxes", e.Network).CombinedOutput(); err != nil {
		t.Fatalf("create network: %v: %s", err, out)
	}
	// The door's default templates "base" and "code-interpreter-v1" are
	// sandgate/e2b-base and sandgate/e2b-code-interpreter of this version.
	for _, name := range []string{"/e2b-base:", "/e2b-code-interpreter:"} {
		if img := strings.Replace(baseImage, "/base:", name, 1); exec.Command("docker", "image", "inspect", img).Run() != nil {
			t.Fatalf("image %s is missing (run `make images`)", img)
		}
	}
	// The preview domain is a .test name nothing resolves: the suite sends requests for
	// its hosts to the gateway's listener with the name in the Host header.
	const previewDomain = "sandgate-e2b.test"
	g := e.startGateway("SANDGATE_PREVIEW_DOMAIN=" + previewDomain)
	removeSDKSnapshots(t, e, g) // what the suite's forks and snapshots leave
	run := randomHex(4)
	removeSDKE2BVolumes(t, e, run)
	own := g.withTenantKey(g.newPluginTenant("e2b-sdk-"+randomHex(3)), "tenant-admin")
	other := g.withTenantKey(g.newPluginTenant("e2b-sdk-other-"+randomHex(3)), "tenant-admin")

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// SANDGATE_SDK_PYTEST_ARGS adds pytest arguments while working on the suite, e.g.
	// "-k pause" (space-separated).
	args := append([]string{"-m", "pytest", "-q", "--color=no"}, strings.Fields(os.Getenv("SANDGATE_SDK_PYTEST_ARGS"))...)
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"E2B_API_URL=http://"+g.Addr+"/e2b",
		"E2B_SANDBOX_URL=http://"+g.Addr,
		"E2B_API_KEY="+own.APIKey,
		"SANDGATE_SDK_OTHER_KEY="+other.APIKey,
		"SANDGATE_SDK_RUN="+run,
		"SANDGATE_SDK_E2B_DOMAIN="+previewDomain,
		"PYTHONDONTWRITEBYTECODE=1",
		"NO_COLOR=1",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest: %v\n%s", err, out)
	}
	// pytest exits 0 only when nothing failed or errored and tests were collected; its
	// summary line must agree.
	if summary := sdkPySummary(out); !strings.Contains(summary, " passed") || strings.Contains(summary, " failed") || strings.Contains(summary, " error") {
		t.Fatalf("pytest's summary %q does not report passed tests only:\n%s", summary, out)
	}
	t.Logf("%s", out)
}

// removeSDKE2BVolumes removes, at the end of the test, the named volumes an E2B SDK suite
// made (named vol-<run> by both tenants), after the env's containers.
func removeSDKE2BVolumes(t *testing.T, e *env, run string) {
	t.Cleanup(func() {
		e.removeDockerObjects()
		out, _ := exec.Command("docker", "volume", "ls", "-q", "--filter", "name=-vol-"+run).Output()
		for _, v := range strings.Fields(string(out)) {
			if strings.HasPrefix(v, "sgv-") && strings.HasSuffix(v, "-vol-"+run) {
				_ = exec.Command("docker", "volume", "rm", "-f", v).Run()
			}
		}
	})
}
