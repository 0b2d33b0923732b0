package egress

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// dockerTestImage is an image with sh, getent, curl and python3 (sandgate's base
// image by default); the test skips when it is not present locally.
func dockerTestImage() string {
	if img := os.Getenv("SANDGATE_EGRESS_TEST_IMAGE"); img != "" {
		return img
	}
	return "sandgate/base:0.1.0"
}

func docker(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestDockerSidecar runs the enforcer the way the Docker runtime does: a sidecar
// container with NET_ADMIN on a user-defined network, whose embedded resolver
// (127.0.0.11, reached through Docker's own nat rules in the namespace) is the
// upstream, and a workload container joined with --network container: and without
// NET_RAW. The servers are containers the test starts on its own network.
func TestDockerSidecar(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping Docker test in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("skipping: no docker command")
	}
	if err := exec.Command("docker", "version").Run(); err != nil {
		t.Skip("skipping: Docker daemon not reachable")
	}
	image := dockerTestImage()
	if err := exec.Command("docker", "image", "inspect", image).Run(); err != nil {
		t.Skipf("skipping: image %s not present (set SANDGATE_EGRESS_TEST_IMAGE)", image)
	}

	// A static copy of this test binary is the enforcer inside the container.
	bin := filepath.Join(t.TempDir(), "egress.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build static enforcer: %v\n%s", err, out)
	}

	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	id := hex.EncodeToString(suffix)
	network := "sg-egress-test-" + id
	allowed, denied, sidecar := "sgeg-allowed-"+id, "sgeg-denied-"+id, "sgeg-sidecar-"+id
	docker(t, "network", "create", network)
	t.Cleanup(func() { _ = exec.Command("docker", "network", "rm", network).Run() })
	for _, name := range []string{allowed, denied} {
		t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
		docker(t, "run", "-d", "--name", name, "--network", network, "--entrypoint", "python3", image, "-m", "http.server", "80")
	}
	deniedIPAddr := docker(t, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", denied)

	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("docker", "logs", sidecar).CombinedOutput()
			t.Logf("sidecar logs:\n%s", out)
		}
		_ = exec.Command("docker", "rm", "-f", sidecar).Run()
	})
	docker(t, "run", "-d", "--name", sidecar, "--network", network, "--cap-add", "NET_ADMIN",
		"-v", bin+":/egress:ro", "-e", childEnv+"=1", "-e", EnvToken+"=tok",
		"-e", EnvPolicy+`={"defaultAction":"deny","egress":[{"action":"allow","target":"`+allowed+`"}]}`,
		"--entrypoint", "/egress", image, "--ready-file", "/tmp/ready")
	deadline := time.Now().Add(15 * time.Second)
	for exec.Command("docker", "exec", sidecar, "test", "-f", "/tmp/ready").Run() != nil {
		if time.Now().After(deadline) {
			t.Fatal("sidecar not ready after 15s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	script := strings.Join([]string{
		"getent hosts " + allowed + " >/dev/null && echo resolve-allowed=ok || echo resolve-allowed=fail",
		"curl -s -m 3 -o /dev/null -w 'connect-allowed=%{http_code}\\n' http://" + allowed + "/ || echo connect-allowed=fail",
		"getent hosts " + denied + " >/dev/null && echo resolve-denied=ok || echo resolve-denied=fail",
		"curl -s -m 2 -o /dev/null http://" + deniedIPAddr + "/ && echo connect-denied=ok || echo connect-denied=fail",
	}, "; ")
	out := docker(t, "run", "--rm", "--network", "container:"+sidecar, "--cap-drop", "NET_RAW",
		"--entrypoint", "sh", image, "-c", script)
	for _, want := range []string{"resolve-allowed=ok", "connect-allowed=200", "resolve-denied=fail", "connect-denied=fail"} {
		if !strings.Contains(out, want) {
			t.Errorf("workload output lacks %q:\n%s", want, out)
		}
	}
}
