package inprocess

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/runtimes"
)

func newRuntime(t *testing.T) *Runtime {
	t.Helper()
	r := New()
	t.Cleanup(func() { r.Close() })
	return r
}

func waitState(t *testing.T, r *Runtime, id string, want runtimes.State) runtimes.Instance {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		inst, err := r.Inspect(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if inst.State == want {
			return inst
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s, want %s", id, inst.State, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLifecycle: the agent answers on the instance's address with its token only; the
// entrypoint is a real process that pauses, resumes, and dies with Delete.
func TestLifecycle(t *testing.T) {
	r := newRuntime(t)
	ctx := context.Background()
	inst, err := r.Create(ctx, runtimes.Spec{ID: "a1", Tenant: "t", AgentToken: "tok", Entrypoint: []string{"sleep", "60"}, CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(inst.Address, "127.") || inst.Labels[runtimes.LabelTenant] != "t" || !inst.Complete {
		t.Fatalf("instance = %+v", inst)
	}
	url := fmt.Sprintf("http://%s:%d/ping", inst.Address, runtimes.AgentPort)
	for _, tc := range []struct {
		token string
		want  int
	}{{"tok", http.StatusOK}, {"wrong", http.StatusUnauthorized}} {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-EXECD-ACCESS-TOKEN", tc.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("ping with token %q: %d, want %d", tc.token, resp.StatusCode, tc.want)
		}
	}
	if err := r.Pause(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, "a1", runtimes.StatePaused)
	if err := r.Resume(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, "a1", runtimes.StateRunning)
	if list, _ := r.List(ctx); len(list) != 1 || list[0].ID != "a1" {
		t.Fatalf("list = %+v", list)
	}
	if err := r.Delete(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Inspect(ctx, "a1"); !errors.Is(err, runtimes.ErrNotFound) {
		t.Fatalf("inspect after delete: %v, want ErrNotFound", err)
	}
	if _, err := http.Get(url); err == nil {
		t.Fatal("the agent still answers after Delete")
	}
}

// TestExitedEntrypoint: an entrypoint that ends is reported exited, with its code and output.
func TestExitedEntrypoint(t *testing.T) {
	r := newRuntime(t)
	_, err := r.Create(context.Background(), runtimes.Spec{ID: "b1", Entrypoint: []string{"sh", "-c", "echo hello from b1; exit 3"}, Env: map[string]string{"X": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	inst := waitState(t, r, "b1", runtimes.StateExited)
	if inst.ExitCode != 3 {
		t.Errorf("exit code %d, want 3", inst.ExitCode)
	}
	if logs, _ := r.Logs(context.Background(), "b1", 10); !strings.Contains(logs, "hello from b1") {
		t.Errorf("logs = %q", logs)
	}
}

// TestRefusesEgress: a spec asking for an enforcer is refused, never run without one.
func TestRefusesEgress(t *testing.T) {
	r := newRuntime(t)
	if _, err := r.Create(context.Background(), runtimes.Spec{ID: "c1", Egress: &runtimes.EgressSpec{}}); err == nil {
		t.Fatal("created a sandbox that asked for egress enforcement")
	}
}
