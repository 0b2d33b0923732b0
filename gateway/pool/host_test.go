package pool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/createreq"
	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/runtimes/inprocess"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
	"github.com/sandgate/sandgate/test/coredeps"
)

// testHost is the core's part of the feature for these tests: members start on the
// in-process runtime (the real agent API) and are ready once their agent answers a
// ping; a binding sets the env through the real agent. refuseBinds makes every binding
// fail, a fault the real core shows only with a broken agent or enforcer.
type testHost struct {
	rt     *inprocess.Runtime
	agents *agentclient.Client

	mu          sync.Mutex
	refuseBinds bool
	binds       map[string]*store.LateBind
	routed      map[string]bool
	died        []string
	badTemplate bool
	// building is the image the core still builds; snapshots maps a snapshot id to its
	// image, as the state feature's Ready snapshots do.
	building  string
	snapshots map[string]string
	// refuseClaims and refuseAdmission make CheckClaim and Admit refuse, as the core's
	// input checks and admission policy do; colds and events record the cold creates
	// and the events asked for.
	refuseClaims, refuseAdmission bool
	colds                         []createreq.Request
	events                        []store.Event
}

func newTestHost(rt *inprocess.Runtime) *testHost {
	return &testHost{rt: rt, agents: agentclient.New(), binds: map[string]*store.LateBind{}, routed: map[string]bool{}}
}

func (h *testHost) MemberStarter(p *store.Pool) (StartMember, error) {
	h.mu.Lock()
	bad := h.badTemplate
	h.mu.Unlock()
	if bad {
		return nil, errors.New("template refused")
	}
	return func(ctx context.Context) (*store.Sandbox, error) {
		now := time.Now().UTC()
		spec := runtimes.Spec{ID: uuid.NewString(), Tenant: p.Tenant, Pool: p.Name, Image: "test", CreatedAt: now, AgentToken: "tok-" + uuid.NewString()}
		inst, err := h.rt.Create(ctx, spec)
		if err != nil {
			return nil, err
		}
		// As the core does, until the agent answers: a request signed within the
		// millisecond of the agent's start is refused as older than the agent.
		for deadline := time.Now().Add(5 * time.Second); ; {
			err := h.agents.Ping(ctx, inst.Address, spec.AgentToken, 2*time.Second)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				_ = h.rt.Delete(ctx, spec.ID)
				return nil, err
			}
			time.Sleep(5 * time.Millisecond)
		}
		return &store.Sandbox{
			ID: spec.ID, Tenant: p.Tenant, Image: spec.Image, State: stateRunning, CreatedAt: now, LastTransitionAt: now,
			Address: inst.Address, AgentToken: spec.AgentToken, AgentAuth: store.AgentAuthSigned,
			Pool: p.Name, PoolVersion: p.Version,
		}, nil
	}, nil
}

func (h *testHost) BindMember(ctx context.Context, sb *store.Sandbox, lb *store.LateBind) error {
	h.mu.Lock()
	refuse := h.refuseBinds
	h.binds[sb.ID] = lb
	h.mu.Unlock()
	if refuse {
		return errors.New("binding refused")
	}
	if len(lb.Env) > 0 {
		return h.agents.SetEnv(ctx, sb.Address, sb.AgentCredential(), lb.Env, 2*time.Second)
	}
	return nil
}

func (h *testHost) RouteClaimed(sb *store.Sandbox) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.routed[sb.ID] = true
}

func (h *testHost) DropRoute(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.routed, id)
}

func (h *testHost) SandboxDied(_ context.Context, sb *store.Sandbox) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.died = append(h.died, sb.ID)
}

func (h *testHost) ImageError(image string, err error) error {
	return errors.New("image " + image + ": " + err.Error())
}

// ResolveTemplate makes a snapshotId the template of its image, as the core does for a
// Ready snapshot of the caller's; an unknown one is refused.
func (h *testHost) ResolveTemplate(_ context.Context, _ principal.Caller, tmpl createreq.Request) (createreq.Request, error) {
	if tmpl.SnapshotID == "" {
		return tmpl, nil
	}
	image, ok := h.snapshots[tmpl.SnapshotID]
	if !ok {
		return tmpl, fault.Errorf(fault.KindNotFound, "SNAPSHOT::NOT_FOUND", "snapshot %s not found", tmpl.SnapshotID)
	}
	tmpl.Image, tmpl.SnapshotID = &createreq.ImageSpec{URI: image}, ""
	return tmpl, nil
}

// CheckTemplate refuses a template without an image and one with volumes, as the core
// does.
func (h *testHost) CheckTemplate(_ context.Context, _ principal.Caller, tmpl createreq.Request) error {
	if tmpl.Image == nil || tmpl.Image.URI == "" {
		return fault.Errorf(fault.KindInvalid, fault.CodeInvalidParameter, "image.uri is required")
	}
	if len(tmpl.Volumes) > 0 {
		return fault.Errorf(fault.KindInvalid, CodeInvalid, "template.volumes: no volumes")
	}
	return nil
}

func (h *testHost) ImageBuilding(image string) error {
	if image == h.building {
		return fault.Errorf(fault.KindUnavailable, "SANDBOX::IMAGE_BUILDING", "image %s is still being built", image)
	}
	return nil
}

func (h *testHost) CheckClaim(_ context.Context, _ principal.Caller, _, _ createreq.Request) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refuseClaims {
		return fault.Errorf(fault.KindInvalid, fault.CodeInvalidParameter, "claim refused")
	}
	return nil
}

func (h *testHost) Admit(_ context.Context, _ principal.Caller, _ createreq.Request, count int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refuseAdmission {
		return fault.Errorf(fault.KindQuota, "QUOTA::CONCURRENT_SANDBOXES", "%d refused", count)
	}
	return nil
}

// CreateCold records the create and answers a Running record; nothing starts.
func (h *testHost) CreateCold(_ context.Context, caller principal.Caller, tmpl createreq.Request, id, batch string) (*store.Sandbox, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.colds = append(h.colds, tmpl)
	return &store.Sandbox{ID: id, Tenant: caller.Tenant, State: stateRunning, Metadata: tmpl.Metadata, Batch: batch}, nil
}

func (h *testHost) EmitPerSandbox(_ context.Context, ev store.Event, sbs []*store.Sandbox) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, sb := range sbs {
		ev.SandboxID = sb.ID
		h.events = append(h.events, ev)
	}
}

func (h *testHost) EmitAll(_ context.Context, evs []store.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, evs...)
}

var _ Host = (*testHost)(nil)

// started is a Manager on a real redis-server and the in-process runtime, with its
// test host; it is stopped when the test ends.
type started struct {
	m    *Manager
	d    coredeps.Deps
	host *testHost
}

func startManager(t *testing.T, cfg Config) started {
	t.Helper()
	d := coredeps.Start(t)
	h := newTestHost(d.Runtime)
	if cfg.Owner == "" {
		cfg.Owner = "test"
	}
	if cfg.Interval == 0 {
		cfg.Interval = 20 * time.Millisecond
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = time.Hour
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 4
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 5 * time.Second
	}
	if cfg.AgentIdleTimeout == 0 {
		cfg.AgentIdleTimeout = 2 * time.Minute
	}
	m := New(cfg, d.Store, d.Runtime, h, d.Log)
	t.Cleanup(m.Stop)
	return started{m: m, d: d, host: h}
}

// putPool stores a pool of the default tenant.
func (s started) putPool(t *testing.T, name string, c store.Capacity) *store.Pool {
	t.Helper()
	p := &store.Pool{Tenant: "default", Name: name, Template: []byte(`{}`), Capacity: c, Version: 1}
	if err := s.d.Store.PutPool(context.Background(), p, true); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitAvailable waits until the pool has n warm members.
func (s started) waitAvailable(t *testing.T, p *store.Pool, n int64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var last store.PoolCounts
	for time.Now().Before(deadline) {
		c, err := s.d.Store.CountPool(context.Background(), p.Tenant, p.Name)
		if err == nil && c.Available == n && s.m.startingCount(store.PoolKey(p.Tenant, p.Name)) == 0 {
			return
		}
		last = c
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pool %s: %d available, want %d", p.Name, last.Available, n)
}
