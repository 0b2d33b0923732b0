package modules

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuiltWithoutKubernetes: the build `make run` makes (tag sandgate_nokubernetes)
// compiles, holds no Kubernetes client (the point of the tag: the client is the largest
// part of a newcomer's first compile, docs/DEVELOPING.md), and a configuration naming the Kubernetes runtime is
// refused with what to do instead of "unknown runtime".
func TestBuiltWithoutKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	deps, err := exec.Command("go", "list", "-C", root, "-deps", "-tags", withoutKubernetesTag, "./caddy").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(deps)) {
		if strings.HasPrefix(pkg, "k8s.io/") {
			t.Errorf("the build without Kubernetes still imports %s", pkg)
		}
	}
	bin := filepath.Join(t.TempDir(), "sandgate")
	build := exec.Command("go", "build", "-C", root, "-tags", withoutKubernetesTag, "-o", bin, "./caddy")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags %s: %v\n%s", withoutKubernetesTag, err, out)
	}
	validate := exec.Command(bin, "validate")
	validate.Dir = t.TempDir()
	validate.Env = append(os.Environ(), "SANDGATE_RUNTIME=kubernetes", "HOME="+t.TempDir(), "XDG_CACHE_HOME="+t.TempDir())
	out, err := validate.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "built without it") || !strings.Contains(string(out), "make build") {
		t.Fatalf("validate with runtime kubernetes: %v\n%s\nwant a refusal saying the binary was built without it", err, out)
	}
}
