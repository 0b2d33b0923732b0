package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// TestFillerOfKilledProcess: a gateway killed while filling the agent volume leaves the
// volume's filler container behind (every gateway fills at its start, for its spare
// namespace holders, so a test or an operator killing one early leaves it often). The
// next process on the host removes it at once instead of waiting for it to go stale
// (two minutes; creates failed meanwhile with "the container name is already in use").
func TestFillerOfKilledProcess(t *testing.T) {
	r, image, vol := runtimeWithUnfilledAgentVolume(t)
	// The filler a killed gateway left: made just now, by a process of this host that
	// is gone (pid 1 never had this start time).
	filler := vol + "-filler"
	if out, err := exec.Command("docker", "create", "--name", filler, "--network", "none",
		"--label", labelRole+"="+roleAgentVolume, "--label", labelSpareOwner+"="+hostname(t)+"/1/0/x",
		"--mount", "type=volume,source="+vol+",target=/agent", image, "/nonexistent").CombinedOutput(); err != nil {
		t.Fatalf("docker create: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", filler).Run() })
	fillsDespiteLeftover(t, r, image, vol, filler)
}

// TestFillerOfOwnFailedCreate: a filler this runtime itself left, its create made by the
// engine but answered with an error (the client's deadline passed first, the engine's
// connection broke), is removed at the next fill: the runtime fills one volume at a
// time, so a filler with its own owner is never one a fill of its still uses.
func TestFillerOfOwnFailedCreate(t *testing.T) {
	r, image, vol := runtimeWithUnfilledAgentVolume(t)
	filler := vol + "-filler"
	if out, err := exec.Command("docker", "create", "--name", filler, "--network", "none",
		"--label", labelRole+"="+roleAgentVolume, "--label", labelSpareOwner+"="+r.owner,
		"--mount", "type=volume,source="+vol+",target=/agent", image, "/nonexistent").CombinedOutput(); err != nil {
		t.Fatalf("docker create: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", filler).Run() })
	fillsDespiteLeftover(t, r, image, vol, filler)
}

// runtimeWithUnfilledAgentVolume returns a runtime whose agent binary is one of its own
// (the test binary's agent and one more byte), so that its volume, vol, is one nobody
// has filled yet, and an image to make containers of.
func runtimeWithUnfilledAgentVolume(t *testing.T) (*Runtime, string, string) {
	r0, image := testRuntime(t)
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
	return r, image, vol
}

// fillsDespiteLeftover fills vol with filler left over (well within the 30 s a fill
// waits for another process's filler), and checks that the leftover is gone and the
// volume filled.
func fillsDespiteLeftover(t *testing.T, r *Runtime, image, vol, filler string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := r.agentVolume(ctx, image)
	if err != nil {
		t.Fatalf("agent volume with a leftover filler: %v", err)
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

// TestSweepAgentVolumes: a sandbox whose container is removed behind the runtime's back
// without its volumes (`docker rm -f`) leaves its agent directory volume, labelled as
// sandgate's; the helper sweep removes it, and removes an agent binary volume of another
// build that nothing mounts once it is past its grace. It keeps a live sandbox's agent
// directory, the binary volume the runtime uses, the volumes of another deployment (a
// network that exists) and unlabelled ones; it removes those of a deployment whose
// network is gone.
func TestSweepAgentVolumes(t *testing.T) {
	image := baseImage(t)
	network := "sg-rt-" + testenv.RandomHex(4)
	// Every volume the test leaves on its network goes at its end, whatever fails.
	t.Cleanup(func() { removeVolumesLabelled(t, labelNetwork+"="+network) })
	agent := agentBinaryOfItsOwn(t)
	r, err := New(context.Background(), Options{Network: network, AgentBinary: agent, Spares: -1})
	if err != nil {
		t.Skipf("docker runtime: %v", err)
	}
	t.Cleanup(func() {
		r.Close()
		_ = exec.Command("docker", "network", "rm", network).Run()
	})
	ctx := context.Background()
	cluster := "c" + testenv.RandomHex(4)
	newSandbox := func() string {
		id := "rt" + testenv.RandomHex(3) + "-0000-4000-8000-" + testenv.RandomHex(6)
		t.Cleanup(func() { _ = r.Delete(context.Background(), id) })
		if _, err := r.Create(ctx, runtimes.Spec{
			ID: id, Tenant: "t", Image: image, Entrypoint: []string{"tail", "-f", "/dev/null"}, CreatedAt: time.Now(),
			AgentToken: testenv.RandomHex(16), Labels: map[string]string{runtimes.LabelCluster: cluster},
		}); err != nil {
			t.Fatalf("create: %v", err)
		}
		return id
	}
	kept, gone := newSandbox(), newSandbox()
	if out, err := exec.Command("docker", "rm", "-f", containerName(gone)).CombinedOutput(); err != nil {
		t.Fatalf("docker rm: %v: %s", err, out)
	}
	left := volumesLabelled(t, runtimes.LabelID+"="+gone)
	if len(left) != 1 {
		t.Fatalf("agent directory volumes labelled with the removed sandbox: %v, want one", left)
	}
	if got := volumesLabelled(t, runtimes.LabelCluster+"="+cluster); len(got) != 2 {
		t.Fatalf("agent directory volumes labelled with the cluster: %v, want both sandboxes'", got)
	}
	current := r.agentVol
	// An agent binary volume of another build of this deployment; another deployment's
	// agent directory and binary volumes (its network exists); a gone deployment's (its
	// network does not); an unlabelled binary volume.
	stale := makeVolume(t, agentVolumePrefix+testenv.RandomHex(8), labelRole+"="+roleAgentBinary, labelNetwork+"="+network)
	otherNetwork := "sg-rt-other-" + testenv.RandomHex(4)
	if out, err := exec.Command("docker", "network", "create", otherNetwork).CombinedOutput(); err != nil {
		t.Fatalf("docker network create: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "network", "rm", otherNetwork).Run() })
	otherDir := makeVolume(t, "", labelRole+"="+roleAgentDir, labelNetwork+"="+otherNetwork, runtimes.LabelID+"="+gone)
	otherBinary := makeVolume(t, agentVolumePrefix+testenv.RandomHex(8), labelRole+"="+roleAgentBinary, labelNetwork+"="+otherNetwork)
	goneNetwork := "sg-rt-gone-" + testenv.RandomHex(4)
	goneDir := makeVolume(t, "", labelRole+"="+roleAgentDir, labelNetwork+"="+goneNetwork, runtimes.LabelID+"="+gone)
	goneBinary := makeVolume(t, agentVolumePrefix+testenv.RandomHex(8), labelRole+"="+roleAgentBinary, labelNetwork+"="+goneNetwork)
	unlabelled := makeVolume(t, agentVolumePrefix+testenv.RandomHex(8))

	// Within its grace the stale binary volume stays: another process may have just
	// filled it.
	if _, err := r.SweepHelpers(ctx); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	for _, vol := range []string{left[0], goneDir} {
		if volumeExists(t, vol) {
			t.Errorf("agent directory volume %s not swept", vol)
		}
	}
	if !volumeExists(t, stale) {
		t.Errorf("agent binary volume %s swept within its grace", stale)
	}
	grace := agentVolumeGrace
	agentVolumeGrace = 0
	t.Cleanup(func() { agentVolumeGrace = grace })
	if _, err := r.SweepHelpers(ctx); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	for _, vol := range []string{stale, goneBinary} {
		if volumeExists(t, vol) {
			t.Errorf("stale agent binary volume %s not swept", vol)
		}
	}
	if got := volumesLabelled(t, runtimes.LabelID+"="+kept); len(got) != 1 {
		t.Errorf("live sandbox's agent directory volumes after the sweep: %v, want one", got)
	}
	for _, vol := range []string{current, otherDir, otherBinary, unlabelled} {
		if !volumeExists(t, vol) {
			t.Errorf("volume %s swept", vol)
		}
	}
	// With no container mounting it, the binary volume the runtime uses stays too.
	if err := r.Delete(ctx, kept); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := r.SweepHelpers(ctx); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if !volumeExists(t, current) {
		t.Errorf("the runtime's own agent binary volume %s swept", current)
	}
}

// agentBinaryOfItsOwn is the built agent with a random tail: a build whose agent binary
// volume no other test uses, removed at the test's end.
func agentBinaryOfItsOwn(t *testing.T) string {
	t.Helper()
	binDir := os.Getenv("SANDGATE_E2E_BIN")
	if binDir == "" {
		binDir = "../../bin"
	}
	bin, err := os.ReadFile(filepath.Join(binDir, "sandbox-agent"))
	if err != nil {
		t.Skipf("no agent binary (make build): %v", err)
	}
	bin = append(bin, testenv.RandomHex(4)+"\n"...)
	agent := filepath.Join(t.TempDir(), "sandbox-agent")
	if err := os.WriteFile(agent, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bin)
	vol := agentVolumePrefix + hex.EncodeToString(sum[:])[:16]
	t.Cleanup(func() { _ = exec.Command("docker", "volume", "rm", "-f", vol).Run() })
	return agent
}

// makeVolume creates a volume (named name, or anonymous when name is "") with labels,
// removed at the test's end, and returns its name.
func makeVolume(t *testing.T, name string, labels ...string) string {
	t.Helper()
	args := []string{"volume", "create"}
	for _, l := range labels {
		args = append(args, "--label", l)
	}
	if name != "" {
		args = append(args, name)
	}
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker volume create: %v: %s", err, out)
	}
	name = strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("docker", "volume", "rm", "-f", name).Run() })
	return name
}

// volumesLabelled names the volumes with label (key=value).
func volumesLabelled(t *testing.T, label string) []string {
	t.Helper()
	out, err := exec.Command("docker", "volume", "ls", "-q", "--filter", "label="+label).Output()
	if err != nil {
		t.Fatalf("docker volume ls: %v", err)
	}
	return strings.Fields(string(out))
}

// removeVolumesLabelled removes the volumes with label (key=value).
func removeVolumesLabelled(t *testing.T, label string) {
	for _, vol := range volumesLabelled(t, label) {
		_ = exec.Command("docker", "volume", "rm", "-f", vol).Run()
	}
}

func volumeExists(t *testing.T, name string) bool {
	t.Helper()
	return exec.Command("docker", "volume", "inspect", name).Run() == nil
}
