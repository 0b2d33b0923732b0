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

// TestSDKE2BJS runs the client suites in test/sdk-e2b-js (sdk.test.mjs: the control
// API; envd.test.mjs: inside the sandbox; volumes.test.mjs: named volumes;
// snapshots.test.mjs: snapshots, their namespaced names, and forks;
// signed-urls.test.mjs: the host form and signed file URLs): the published E2B JavaScript
// SDKs (e2b and @e2b/code-interpreter, the versions its package-lock.json pins)
// against the E2B door of a gateway started here, with Node's own test runner,
// configured only by E2B's own variables and with the door's default templates. Two
// tenants' keys: the suite's own, and another's for its cross-tenant probes. The suite's
// node_modules come from `npm ci` (scripts/test.sh runs it; this test runs it too when
// they are missing).
func TestSDKE2BJS(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed; the SDK suite needs Node 20 or newer: %v", err)
	}
	dir := filepath.Join(repoRoot, "test", "sdk-e2b-js")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
		npm := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		npm.Dir = dir
		if out, err := npm.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in test/sdk-e2b-js: %v\n%s", err, out)
		}
	}
	for _, name := range []string{"/e2b-base:", "/e2b-code-interpreter:"} {
		if img := strings.Replace(baseImage, "/base:", name, 1); exec.Command("docker", "image", "inspect", img).Run() != nil {
			t.Fatalf("image %s is missing (run `make images`)", img)
		}
	}

	e := newEnv(t, startRedis(t))
	if out, err := exec.Command("docker", "network", "create", "--label", "sandgate.io/network=sandboxes", e.Network).CombinedOutput(); err != nil {
		t.Fatalf("create network: %v: %s", err, out)
	}
	// The preview domain is a .test name nothing resolves: the suite sends requests for
	// its hosts to the gateway's listener with the name in the Host header.
	const previewDomain = "sandgate-e2b-js.test"
	g := e.startGateway("SANDGATE_PREVIEW_DOMAIN=" + previewDomain)
	removeSDKSnapshots(t, e, g) // what the suite's forks and snapshots leave
	run := randomHex(4)
	removeSDKE2BVolumes(t, e, run)
	own := g.withTenantKey(g.newPluginTenant("e2b-js-"+randomHex(3)), "tenant-admin")
	other := g.withTenantKey(g.newPluginTenant("e2b-js-other-"+randomHex(3)), "tenant-admin")

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// Every *.test.mjs of the directory runs; SANDGATE_SDK_JS_FILES runs only some while
	// working on them, e.g. "snapshots.test.mjs" (space-separated).
	files := strings.Fields(os.Getenv("SANDGATE_SDK_JS_FILES"))
	if len(files) == 0 {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.test.mjs"))
		for _, p := range paths {
			files = append(files, filepath.Base(p))
		}
	}
	cmd := exec.CommandContext(ctx, node, append([]string{"--test", "--test-concurrency=1", "--test-reporter=tap"}, files...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"E2B_API_URL=http://"+g.Addr+"/e2b",
		"E2B_SANDBOX_URL=http://"+g.Addr,
		"E2B_API_KEY="+own.APIKey,
		"SANDGATE_SDK_OTHER_KEY="+other.APIKey,
		"SANDGATE_SDK_RUN="+run,
		"SANDGATE_SDK_E2B_DOMAIN="+previewDomain,
		"NO_COLOR=1",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "\n# fail 0") || strings.Contains(string(out), "\n# tests 0") {
		t.Fatalf("the suite ran no tests or did not report `# fail 0`:\n%s", out)
	}
	t.Logf("%s", out)
}
