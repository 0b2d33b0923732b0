package gateway

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes/inprocess"
)

// embeddedGateway starts a Service on an embedded store with default options (the
// user's directory, as `sandgate run` does) over rt; stop ends both.
func embeddedGateway(t *testing.T, rt *inprocess.Runtime, pol *policy.Engine) (svc *Service, stop func()) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := store.Open(context.Background(), store.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	svc = New(Config{SyncInterval: 50 * time.Millisecond, ReadyTimeout: time.Second}, st, rt, pol, log)
	svc.SetAdminKey("admin-key")
	svc.Start(context.Background())
	var stopped bool
	stop = func() {
		if !stopped {
			stopped = true
			svc.Stop()
			_ = st.Close()
		}
	}
	t.Cleanup(stop)
	return svc, stop
}

// TestEmbeddedGatewaysOfOneUser: two gateways a user runs at once, each with its
// embedded store, on one runtime: neither adopts nor removes the other's sandboxes
// through many reconcile passes; one restarted on its store gets its cluster id back
// and adopts its sandboxes again.
func TestEmbeddedGatewaysOfOneUser(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	ctx := context.Background()
	rt := inprocess.New()
	t.Cleanup(func() { _ = rt.Close() })
	pol, err := policy.New(ctx, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, stopA := embeddedGateway(t, rt, pol)
	b, _ := embeddedGateway(t, rt, pol)
	x, err := a.Create(ctx, admin, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	y, err := b.Create(ctx, admin, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	listed := func(svc *Service) map[string]string {
		l, err := svc.List(ctx, admin, ListQuery{Page: 1, PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, sb := range l.Items {
			out[sb.ID] = sb.Status.State
		}
		return out
	}
	// Past both sandboxes' adoption grace (ReadyTimeout) and many passes of each gateway.
	time.Sleep(2 * time.Second)
	if la := listed(a); len(la) != 1 || la[x.ID] != StateRunning {
		t.Errorf("gateway A lists %v, want only its own %s Running", la, x.ID)
	}
	if lb := listed(b); len(lb) != 1 || lb[y.ID] != StateRunning {
		t.Errorf("gateway B lists %v, want only its own %s Running", lb, y.ID)
	}
	for _, id := range []string{x.ID, y.ID} {
		if _, err := rt.Inspect(ctx, id); err != nil {
			t.Errorf("sandbox %s was removed: %v", id, err)
		}
	}

	clusterA, err := a.recovery.ClusterID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stopA()
	again, _ := embeddedGateway(t, rt, pol)
	if id, err := again.recovery.ClusterID(ctx); err != nil || id != clusterA {
		t.Fatalf("restarted gateway has cluster id %q (%v), want its store's %q", id, err, clusterA)
	}
	if l := listed(again); l[x.ID] != StateRunning || len(l) != 1 {
		t.Errorf("restarted gateway lists %v, want its sandbox %s adopted Running and nothing else", l, x.ID)
	}
}
