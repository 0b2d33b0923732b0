package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/test/testenv"
)

// TestFillerOfKilledProcess: a gateway killed while filling the agent volume leaves the
// volume's filler container behind (every gateway fills at its start, for its spare
// namespace holders, so a test or an operator killing one early leaves it often). The
// next process on the host removes it at once instead of waiting for it to go stale
// (two minutes; creates failed meanwhile with "the container name is already in use").
func TestFillerOfKilledProcess(t *testing.T) {
	r0, image := testRuntime(t)
	// An agent binary of its own (one more byte): a volume that nobody has filled yet.
	bin, err := os.ReadFile(r0.opts.AgentBinary)
	if err != nil {
		t.Fatal(err)
	}
	bin = append(bin, '\n')
	agent := filepath.Join(t.TempDir(), "sandbox-agent")
	if err := os.WriteFile(agent, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bin)
	vol := "sandgate-agent-" + hex.EncodeToString(sum[:])[:16]
	t.Cleanup(func() { _ = exec.Command("docker", "volume", "rm", "-f", vol).Run() })
	network := "sg-rt-" + testenv.RandomHex(4)
	r, err := New(context.Background(), Options{Network: network, AgentBinary: agent, Spares: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close()
		_ = exec.Command("docker", "network", "rm", network).Run()
	})
	// The filler a killed gateway left: made just now, by a process of this host that
	// is gone (pid 1 never had this start time).
	filler := vol + "-filler"
	if out, err := exec.Command("docker", "create", "--name", filler, "--network", "none",
		"--label", labelRole+"="+roleAgentVolume, "--label", labelSpareOwner+"="+hostname(t)+"/1/0/x",
		"--mount", "type=volume,source="+vol+",target=/agent", image, "/nonexistent").CombinedOutput(); err != nil {
		t.Fatalf("docker create: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", filler).Run() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := r.agentVolume(ctx, image)
	if err != nil {
		t.Fatalf("agent volume with a killed process's filler left: %v", err)
	}
	if got != vol {
		t.Fatalf("volume %q, want %q", got, vol)
	}
	if _, err := r.cli.ContainerInspect(context.Background(), filler, client.ContainerInspectOptions{}); err == nil {
		t.Error("the filler is still there after the fill")
	}
	out, err := exec.Command("docker", "run", "--rm", "--network", "none", "--mount", "type=volume,source="+vol+",target=/agent,readonly",
		image, "cat", "/agent/"+agentDoneFile).CombinedOutput()
	if err != nil || len(out) < 64 {
		t.Fatalf("the volume was not filled: %v: %s", err, out)
	}
}
