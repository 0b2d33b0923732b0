// Package coredeps starts, for a test, what the core (gateway.Service) runs on without
// Docker: a private redis-server (test/testenv), the store on it, the in-process runtime
// and the policy engine with the embedded Rego. The core's own tests and gateway/api's
// build their Service from these; only tests import it.
package coredeps

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes/inprocess"
	"github.com/sandgate/sandgate/test/testenv"
)

// Deps are a Service's dependencies, each stopped when the test ends.
type Deps struct {
	Redis   *testenv.Redis
	Store   *store.Store
	Runtime *inprocess.Runtime
	Policy  *policy.Engine
	// Log prints warnings and errors to stderr, where the test output shows them.
	Log *slog.Logger
}

// Start starts the dependencies; the store's keys are prefixed "t:".
func Start(t testing.TB) Deps {
	t.Helper()
	r, err := testenv.StartRedis(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := store.Open(ctx, store.Options{URL: r.URL, Prefix: "t:", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	rt := inprocess.New()
	t.Cleanup(func() { _ = rt.Close() })
	pol, err := policy.New(ctx, policy.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return Deps{Redis: r, Store: st, Runtime: rt, Policy: pol, Log: log}
}
