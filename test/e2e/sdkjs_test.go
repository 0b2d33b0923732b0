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

// TestSDKJS runs the client suite in test/sdk-js: the published OpenSandbox JavaScript
// SDK (pinned in its package-lock.json) against a gateway started here, with Node's own
// test runner. The suite's node_modules come from `npm ci` (scripts/test.sh runs it; this
// test runs it too when they are missing).
func TestSDKJS(t *testing.T) {
	node, dir := sdkJSSuite(t)

	e := newEnv(t, startRedis(t))
	g := e.startGateway()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-concurrency=1", "--test-reporter=tap", "sdk.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"SANDGATE_SDK_DOMAIN="+g.Addr,
		"SANDGATE_SDK_API_KEY="+g.APIKey,
		"SANDGATE_SDK_IMAGE="+baseImage,
		// The SDK reports create latencies to the server it talks to; sandgate has no use
		// for them.
		"OPENSANDBOX_DISABLE_METRICS=1",
		"NO_COLOR=1",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test sdk.test.mjs: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "\n# fail 0") || strings.Contains(string(out), "\n# tests 0") {
		t.Fatalf("the suite ran no tests or did not report `# fail 0`:\n%s", out)
	}
	t.Logf("%s", out)
}

// sdkJSSuite answers the node binary and the directory of the JavaScript SDK suite
// (test/sdk-js), running `npm ci` there first when its node_modules are missing.
func sdkJSSuite(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed; the SDK suite needs Node 20 or newer: %v", err)
	}
	dir = filepath.Join(repoRoot, "test", "sdk-js")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@alibaba-group", "opensandbox", "package.json")); err != nil {
		npm := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		npm.Dir = dir
		if out, err := npm.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in test/sdk-js: %v\n%s", err, out)
		}
	}
	return node, dir
}
