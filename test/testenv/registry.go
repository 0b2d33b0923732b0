package testenv

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Registry is a real container registry (distribution/v3, built by
// scripts/registry.sh) on loopback, started by the test that uses it.
type Registry struct {
	Addr string // 127.0.0.1:port
	logs *SyncBuffer
}

// Logs is what the registry has logged so far.
func (r *Registry) Logs() string {
	return r.logs.String()
}

// ManifestRequests counts the registry's answered requests for repo's manifest tag (the
// push's included).
func (r *Registry) ManifestRequests(repo, tag string) int {
	n := 0
	for _, line := range strings.Split(r.Logs(), "\n") {
		if strings.Contains(line, "/v2/"+repo+"/manifests/"+tag) && strings.Contains(line, "response completed") {
			n++
		}
	}
	return n
}

// StartRegistry runs the registry of the repository at repoRoot on a free loopback port;
// with a user it demands htpasswd basic auth. It is stopped, and its storage removed, in
// t.Cleanup.
func StartRegistry(t testing.TB, repoRoot, user, password string) *Registry {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot, "scripts", "registry.sh"), "build").Output()
	if err != nil {
		t.Fatalf("scripts/registry.sh build (make registry): %v", err)
	}
	bin := strings.TrimSpace(string(out))
	dir := t.TempDir()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	auth := ""
	if user != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(user+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: sandgate-test\n    path: %s\n", filepath.Join(dir, "htpasswd"))
	}
	config := fmt.Sprintf(`version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
%s`, filepath.Join(dir, "storage"), addr, auth)
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &Registry{Addr: addr, logs: &SyncBuffer{}}
	cmd := exec.Command(bin, "serve", cfg)
	cmd.Stdout, cmd.Stderr = r.logs, r.logs
	// The registry reports no telemetry and reaches nothing but its own directory.
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none", "OTEL_SDK_DISABLED=true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("registry %s logs:\n%s", addr, Tail(r.Logs(), 6000))
		}
	})
	WaitFor(t, 30*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200 || resp.StatusCode == 401
	}, "the registry to answer on "+addr)
	return r
}
