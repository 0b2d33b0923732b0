package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// containerPaused reports whether the engine holds sandbox id's container frozen.
func containerPaused(t testing.TB, id string) bool {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Paused}}", "sandgate-"+id).Output()
	if err != nil {
		t.Fatalf("docker inspect: %v", err)
	}
	return strings.TrimSpace(string(out)) == "true"
}

// waitIdlePaused waits until sandbox id is Paused for idleness, in its record and in the engine.
func (g *gateway) waitIdlePaused(t testing.TB, id string) {
	t.Helper()
	waitFor(t, time.Minute, func() bool {
		st := g.do("GET", "/v1/sandboxes/"+id, nil).JSON(t)["status"].(map[string]any)
		return st["state"] == "Paused" && st["reason"] == "idle"
	}, "the sandbox to pause for idleness")
	if !containerPaused(t, id) {
		t.Fatal("the record says Paused but the container is not frozen")
	}
}

// TestIdlePause: a sandbox with extensions idle.pause.seconds pauses after that long
// without traffic (frozen, memory kept), and the next agent call resumes it
// transparently and succeeds; a request in flight keeps it awake; expiry is untouched.
func TestIdlePause(t *testing.T) {
	e := newEnv(t, nil)
	g := e.startGateway()
	id := g.createSandbox(map[string]any{"timeout": 600, "extensions": map[string]string{"idle.pause.seconds": "2"}})
	expires := g.do("GET", "/v1/sandboxes/"+id, nil).JSON(t)["expiresAt"]
	a := g.agent(id)
	if ev := lastEvent(a.run("echo kept-in-memory > /dev/shm/m")); ev.Type != "execution_complete" {
		t.Fatalf("write: %+v", ev)
	}

	g.waitIdlePaused(t, id)
	if out := stdoutOf(a.run("cat /dev/shm/m")); out != "kept-in-memory" {
		t.Fatalf("the first command after the pause answered %q", out)
	}
	sb := g.do("GET", "/v1/sandboxes/"+id, nil).JSON(t)
	if st := sb["status"].(map[string]any)["state"]; st != "Running" || containerPaused(t, id) {
		t.Fatalf("after the resuming request: state %v, frozen %v", st, containerPaused(t, id))
	}
	if sb["expiresAt"] != expires {
		t.Fatalf("expiresAt moved from %v to %v", expires, sb["expiresAt"])
	}

	t.Run("a request in flight keeps it awake", func(t *testing.T) {
		// Longer than the idle period: a pause in the middle would freeze the stream. A
		// watcher notes such a pause and thaws the sandbox, so the test fails, not hangs.
		done, pausedMidway := make(chan struct{}), make(chan bool, 1)
		go func() {
			seen := false
			defer func() { pausedMidway <- seen }()
			for {
				select {
				case <-done:
					return
				case <-time.After(200 * time.Millisecond):
				}
				if containerPaused(t, id) {
					seen = true
					_ = exec.Command("docker", "unpause", "sandgate-"+id).Run()
				}
			}
		}()
		evs := a.run("for i in 1 2 3 4 5 6; do sleep 1; echo tick$i; done")
		close(done)
		if <-pausedMidway {
			t.Fatal("the sandbox was paused while a request was in flight")
		}
		if out := stdoutOf(evs); !strings.HasSuffix(out, "tick6") {
			t.Fatalf("long command output %q", out)
		}
		if lastEvent(evs).Type != "execution_complete" {
			t.Fatalf("long command ended with %+v", lastEvent(evs))
		}
	})

	t.Run("pauses again, and a preview request resumes it too", func(t *testing.T) {
		startPreviewServer(t, g, id)
		g.waitIdlePaused(t, id)
		r := g.do("GET", fmt.Sprintf("/v1/sandboxes/%s/proxy/%d/headers", id, previewPort), nil)
		if r.Status != 200 {
			t.Fatalf("preview after idle pause: %d %s", r.Status, r.Body)
		}
	})

	t.Run("a sandbox paused by hand stays paused", func(t *testing.T) {
		if r := g.do("POST", "/v1/sandboxes/"+id+"/pause", nil); r.Status != 202 {
			t.Fatalf("pause: %d %s", r.Status, r.Body)
		}
		r := g.do("GET", fmt.Sprintf("/v1/sandboxes/%s/proxy/%d/headers", id, previewPort), nil)
		expectError(t, r, 503, "SANDBOX::NOT_RUNNING")
	})

	t.Run("bad values", func(t *testing.T) {
		for _, v := range []string{"0", "-5", "soon", "1.5", "99999999999"} {
			r := g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage},
				"entrypoint": []string{"tail", "-f", "/dev/null"}, "extensions": map[string]string{"idle.pause.seconds": v}})
			expectError(t, r, 400, "SANDBOX::INVALID_PARAMETER")
		}
	})
}
