package usage

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
	"github.com/sandgate/sandgate/test/coredeps"
)

// testHost is the core's part of the feature for these tests: sandboxes are looked up
// in the store by tenant; whether egress is enforced and the plugins' statistics are the
// test's to say.
type testHost struct {
	st *store.Store

	mu       sync.Mutex
	enforces bool
	plugins  []metrics.Plugin
}

func (h *testHost) Lookup(ctx context.Context, caller principal.Caller, id string) (*store.Sandbox, error) {
	sb, err := h.st.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !caller.Admin && sb.Tenant != caller.Tenant) {
		return nil, fault.NotFound(id)
	}
	return sb, err
}

func (h *testHost) EnforcesEgress() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.enforces
}

func (h *testHost) PluginStats() []metrics.Plugin {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.plugins
}

// set changes the host's answers under its lock.
func (h *testHost) set(fn func(h *testHost)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fn(h)
}

var _ Host = (*testHost)(nil)

// engineReadingRuntime is the in-process runtime with the Docker runtime's ability to
// read a sandbox's use from the engine, which needs one: each reading is the next of
// the test's list (the last one repeats), an error when the test says so. Readings a
// real engine gives only over minutes (a counter that goes back, a disk size) are the
// test's to say.
type engineReadingRuntime struct {
	runtimes.Runtime
	mu       sync.Mutex
	readings []runtimes.Usage
	next     int
	err      error
	withDisk []bool
}

func (r *engineReadingRuntime) Usage(_ context.Context, id string, withDisk bool) (runtimes.Usage, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.withDisk = append(r.withDisk, withDisk)
	if r.err != nil {
		return runtimes.Usage{}, r.err
	}
	u := r.readings[min(r.next, len(r.readings)-1)]
	r.next++
	return u, nil
}

var _ runtimes.UsageReader = (*engineReadingRuntime)(nil)

// started is a Manager on real dependencies (Redis, the in-process runtime) with its
// test host and series.
type started struct {
	m       *Manager
	d       coredeps.Deps
	host    *testHost
	metrics *metrics.Set
}

// startManager builds a Manager sampling every interval on rt (the in-process runtime
// when nil); its loop is not started.
func startManager(t *testing.T, interval time.Duration, rt func(coredeps.Deps) runtimes.Runtime) started {
	t.Helper()
	d := coredeps.Start(t)
	h := &testHost{st: d.Store}
	var runtime runtimes.Runtime = d.Runtime
	if rt != nil {
		runtime = rt(d)
	}
	set := metrics.New()
	m := New(Config{Interval: interval}, d.Store, runtime, agentclient.New(), set, h)
	t.Cleanup(m.Stop)
	return started{m: m, d: d, host: h, metrics: set}
}

// runningSandbox starts a sandbox on the in-process runtime and stores its record in
// state, created at createdAt.
func (s started) runningSandbox(t *testing.T, tenant, state string, createdAt time.Time) *store.Sandbox {
	t.Helper()
	ctx := context.Background()
	spec := runtimes.Spec{ID: uuid.NewString(), Tenant: tenant, Image: "test", CreatedAt: createdAt, AgentToken: "agent-" + uuid.NewString()}
	inst, err := s.d.Runtime.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.d.Runtime.Delete(context.Background(), spec.ID) })
	sb := &store.Sandbox{
		ID: spec.ID, Tenant: tenant, Image: "base:1", State: state, CreatedAt: createdAt, LastTransitionAt: createdAt,
		Address: inst.Address, AgentToken: spec.AgentToken, AccessToken: "access",
	}
	if err := s.d.Store.CreateSandbox(ctx, sb, 0); err != nil {
		t.Fatal(err)
	}
	return sb
}

// standInEnforcer answers GET /healthz on the egress port of addr with the denial
// count the test sets (-1: no count), in the place of an egress enforcer, which the
// in-process runtime does not run.
type standInEnforcer struct {
	mu     sync.Mutex
	denied int64
}

func (e *standInEnforcer) setDenied(n int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.denied = n
}

func startStandInEnforcer(t *testing.T, addr string) *standInEnforcer {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(agentproto.EgressPort)))
	if err != nil {
		t.Fatal(err)
	}
	e := &standInEnforcer{}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != agentproto.PathHealthz {
			http.NotFound(w, r)
			return
		}
		e.mu.Lock()
		n := e.denied
		e.mu.Unlock()
		if n < 0 {
			_, _ = w.Write([]byte(`{"ok":true}`))
			return
		}
		_, _ = w.Write([]byte(`{"deniedQueries":` + strconv.FormatInt(n, 10) + `}`))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return e
}

// wantCode fails unless err is a fault.Error of kind and code.
func wantCode(t *testing.T, err error, kind fault.Kind, code string) {
	t.Helper()
	e, ok := fault.AsError(err)
	if !ok || e.Kind != kind || e.Code != code {
		t.Fatalf("err = %v, want %s %s", err, kind, code)
	}
}
