package docker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/test/testenv"
)

// printingSandbox creates a sandbox on r whose entrypoint prints about 12 MB, then a
// marker line, then sleeps; it returns its id once the marker is in its log.
func printingSandbox(t *testing.T, r *Runtime, image string) string {
	t.Helper()
	ctx := context.Background()
	id := "rt" + testenv.RandomHex(3) + "-0000-4000-8000-" + testenv.RandomHex(6)
	t.Cleanup(func() { _ = r.Delete(context.Background(), id) })
	script := "yes 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde | head -c 12000000; echo output-ends-here; exec sleep 600"
	if _, err := r.Create(ctx, runtimes.Spec{
		ID: id, Tenant: "t", Image: image, Entrypoint: []string{"sh", "-c", script}, CreatedAt: time.Now(),
		AgentToken: testenv.RandomHex(16),
	}); err != nil {
		t.Fatalf("create: %v", err)
	}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if out, err := r.Logs(ctx, id, 3); err == nil && strings.Contains(out, "output-ends-here") {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox's output did not end within 90 s")
		}
	}
}

// logBytes is the size of the engine's log files of sandbox id's container (the current
// one and those rotated out of it).
func logBytes(t *testing.T, r *Runtime, id string) (int64, map[string]string) {
	t.Helper()
	c, err := r.cli.ContainerInspect(context.Background(), containerName(id), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := c.Container.LogPath
	if path == "" {
		t.Skip("the engine keeps no log file for the container (its log driver)")
	}
	files, err := filepath.Glob(path + "*")
	if err != nil || len(files) == 0 {
		t.Skipf("the engine's log files of the container are not readable here (%s): %v", path, err)
	}
	var total int64
	for _, f := range files {
		if info, err := os.Stat(f); err == nil {
			total += info.Size()
		}
	}
	return total, c.Container.HostConfig.LogConfig.Config
}

// TestContainerOutputBounded: a sandbox that prints without end cannot fill the
// engine's disk through its output: with ContainerLogMax 1m its container keeps two
// files of 1 MiB at most, and the diagnostics still read its last lines; with "off" the
// same output takes more than ten times that (the probe writes what the bound cuts).
func TestContainerOutputBounded(t *testing.T) {
	if out, err := exec.Command("docker", "info", "--format", "{{.LoggingDriver}}").Output(); err != nil || strings.TrimSpace(string(out)) != "json-file" {
		t.Skipf("the engine's log driver is %q, not json-file", strings.TrimSpace(string(out)))
	}
	bounded, image := testRuntimeWith(t, EnforcerAuto)
	network := bounded.opts.Network
	unbounded := testRuntimeOn(t, Options{Network: network, ContainerLogMax: "off", Spares: -1})
	kept := testRuntimeOn(t, Options{Network: network, ContainerLogMax: "1m", Spares: -1})

	id := printingSandbox(t, kept, image)
	size, config := logBytes(t, kept, id)
	if config["max-size"] != "1m" || config["max-file"] != containerLogFiles {
		t.Errorf("the container's log options %v, want max-size 1m and max-file %s", config, containerLogFiles)
	}
	if limit := int64(2*1<<20) + 64<<10; size > limit {
		t.Errorf("the bounded container's log files hold %d bytes, want at most two of 1 MiB", size)
	}
	if out, err := kept.Logs(context.Background(), id, 1); err != nil || !strings.Contains(out, "output-ends-here") {
		t.Errorf("the bounded sandbox's last line: %q, %v", out, err)
	}

	id = printingSandbox(t, unbounded, image)
	if size, _ := logBytes(t, unbounded, id); size < 12_000_000 {
		t.Fatalf("without a bound the same output took %d bytes: the probe does not show the bound", size)
	}

	// A runtime left at the default bounds its containers too.
	c, err := bounded.cli.ContainerInspect(context.Background(), containerName(printingSandbox(t, bounded, image)), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Container.HostConfig.LogConfig.Config["max-size"]; got != DefaultContainerLogMax {
		t.Errorf("a default runtime's container has log max-size %q, want %s", got, DefaultContainerLogMax)
	}
}
