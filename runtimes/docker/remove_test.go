package docker

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/test/testenv"
)

// TestRemoveGoneWaitsForARemovalInProgress: a container another path is already removing
// (the engine answers "removal … already in progress") is gone when removeGone returns,
// so that its name is free for the next create and a sweep can count it removed.
func TestRemoveGoneWaitsForARemovalInProgress(t *testing.T) {
	r, image := testRuntime(t)
	ctx := context.Background()
	inProgress := 0
	for i := 0; i < 8; i++ {
		name := "sandgate-remove-" + testenv.RandomHex(4)
		if out, err := exec.Command("docker", "run", "-d", "--name", name, "--network", "none", image, "sleep", "600").CombinedOutput(); err != nil {
			t.Fatalf("docker run: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Another path's removal, under way when removeGone asks.
			if _, err := r.cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true}); err != nil && strings.Contains(err.Error(), "already in progress") {
				inProgress++
			}
		}()
		time.Sleep(time.Duration(i) * 3 * time.Millisecond)
		err := r.removeGone(ctx, name, false)
		if err != nil {
			t.Fatalf("removeGone: %v", err)
		}
		if _, err := r.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
			t.Fatalf("round %d: %s still exists after removeGone returned (inspect: %v)", i, name, err)
		}
		wg.Wait()
	}
	t.Logf("the other removal found ours in progress %d times of 8", inProgress)
}
