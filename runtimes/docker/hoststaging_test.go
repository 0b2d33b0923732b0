package docker

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/test/testenv"
)

// swapScript swaps /mnt/b/d (a directory of tenant B's) and /mnt/b/s (a symlink to
// tenant A's directory, by its host path) with renameat2(RENAME_EXCHANGE) every half
// millisecond: what a workload with its own tenant's directory mounted can do.
const swapScript = `import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs('/mnt/b/d', exist_ok=True)
open('/mnt/b/d/marker', 'w').write('tenant-b')
if not os.path.lexists('/mnt/b/s'):
    os.symlink(sys.argv[1], '/mnt/b/s')
print('swapping', flush=True)
while True:
    libc.renameat2(-100, b'/mnt/b/d', -100, b'/mnt/b/s', 2)
    time.sleep(0.0005)
`

// TestHostVolumeMountsWhatWasJudged races a host volume's mount: while a container of
// tenant B swaps B's directory with a symlink to tenant A's, sandboxes of B are made
// with B's directory, its path judged (as the gateway judges it: resolved, under B's
// prefix) before each create, until 200 creates were tried. Each must mount B's directory or nothing
// (ErrVolumeHostChanged), never A's; and its staging mount goes with it.
func TestHostVolumeMountsWhatWasJudged(t *testing.T) {
	r, image := testRuntime(t)
	ctx := context.Background()
	root := t.TempDir()
	aDir, bDir := filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{aDir, bDir} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(aDir, "marker"), []byte("tenant-a"), 0o644); err != nil {
		t.Fatal(err)
	}
	swapper := "sg-rt-swapper-" + testenv.RandomHex(4)
	out, err := exec.Command("docker", "run", "-d", "--name", swapper, "--network", "none", "-v", bDir+":/mnt/b",
		"-e", "SCRIPT="+swapScript, image, "sh", "-c", `exec python3 -c "$SCRIPT" `+aDir).CombinedOutput()
	if err != nil {
		t.Fatalf("start the swapper: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", swapper).Run() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		logs, _ := exec.Command("docker", "logs", swapper).CombinedOutput()
		if strings.Contains(string(logs), "swapping") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the swapper did not start: %s", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}

	judged := filepath.Join(bDir, "d")
	mounted, changed := 0, 0
	refused := 0 // checks in a row that the path did not pass
	for i := 0; mounted+changed < 200; i++ {
		// The gateway's check: the path resolves under B's directory (a swap may make it
		// resolve to A's, which the gateway refuses; the race is what comes after).
		if resolved, err := filepath.EvalSymlinks(judged); err != nil || !strings.HasPrefix(resolved, bDir+"/") {
			if refused++; refused == 100000 {
				t.Fatalf("the path failed the check 100000 times in a row after %d creates: the race was not run", mounted+changed)
			}
			continue
		}
		refused = 0
		id := "rt" + testenv.RandomHex(3) + "-0000-4000-8000-" + testenv.RandomHex(6)
		spec := runtimes.Spec{ID: id, Tenant: "b", Image: image, Entrypoint: []string{"sleep", "infinity"}, CreatedAt: time.Now(),
			AgentToken: testenv.RandomHex(16),
			Volumes:    []runtimes.Volume{{Name: "v", MountPath: "/mnt/v", HostPath: judged}}}
		_, err := r.Create(ctx, spec)
		if errors.Is(err, runtimes.ErrVolumeHostChanged) {
			changed++
			continue
		}
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		res, err := r.cli.ContainerInspect(ctx, containerName(id), client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		marker, err := os.ReadFile("/proc/" + strconv.Itoa(res.Container.State.Pid) + "/root/mnt/v/marker")
		if err := r.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, serr := os.Stat(filepath.Join(hostStagingRoot, id)); serr == nil {
			t.Fatalf("create %d: the staging mount of a deleted sandbox is still there", i)
		}
		if string(marker) == "tenant-a" {
			t.Fatalf("create %d mounted tenant A's directory for tenant B", i)
		}
		if err != nil || string(marker) != "tenant-b" {
			t.Fatalf("create %d: the volume holds %q, %v", i, marker, err)
		}
		mounted++
	}
	t.Logf("%d mounted B's directory, %d refused as changed", mounted, changed)
	if mounted == 0 {
		t.Fatal("no create mounted anything: the test shows nothing")
	}
}
