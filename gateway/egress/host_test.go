package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/runtimes/inprocess"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
	"github.com/sandgate/sandgate/sandbox-agent/egress/egressauth"
	"github.com/sandgate/sandgate/test/coredeps"
	"github.com/sandgate/sandgate/test/promtest"
)

// testHost is the core's part of the feature for these tests: what the feature hands
// the core (events, audit records, dropped routes, background errors) is kept for the
// test to read, and the sandboxes in expiring are the reaper's.
type testHost struct {
	mu       sync.Mutex
	emitted  []store.Event
	audits   []auditEntry
	dropped  []string
	errors   []string
	expiring map[string]bool
}

// auditEntry is one record the feature handed to the audit stream.
type auditEntry struct {
	tenant, source string
	record         map[string]any
}

func (h *testHost) Emit(_ context.Context, sb *store.Sandbox, typ string, data map[string]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.emitted = append(h.emitted, store.Event{Type: typ, Tenant: sb.Tenant, SandboxID: sb.ID, Data: data})
}

func (h *testHost) Audit(tenant, source string, _ time.Time, record []byte) {
	var rec map[string]any
	_ = json.Unmarshal(record, &rec)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.audits = append(h.audits, auditEntry{tenant: tenant, source: source, record: rec})
}

func (h *testHost) Expiring(rec *store.Sandbox, _ time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.expiring[rec.ID]
}

func (h *testHost) DropRoute(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropped = append(h.dropped, id)
}

func (h *testHost) BackgroundError(job, what string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errors = append(h.errors, job+": "+what+": "+err.Error())
}

// events are the events of type typ emitted so far.
func (h *testHost) events(typ string) []store.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []store.Event
	for _, ev := range h.emitted {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

var _ Host = (*testHost)(nil)

// enforcingRuntime is the in-process runtime with the abilities of a runtime that runs
// an enforcer beside each sandbox: the sandboxes' agents are real, their enforcers are
// fakeEnforcers the test starts. Which enforcers are missing and whether a restore
// fails are the test's to say: faults a real engine gives only by chance.
type enforcingRuntime struct {
	*inprocess.Runtime
	mu         sync.Mutex
	missing    []string
	restoreErr error
	restored   []runtimes.EgressSpec
	// runningNow are sandboxes whose enforcer Inspect finds running, though missing may
	// name them: a list older than the records, as a reconcile pass hands over.
	runningNow map[string]bool
}

func (r *enforcingRuntime) Inspect(ctx context.Context, id string) (runtimes.Instance, error) {
	inst, err := r.Runtime.Inspect(ctx, id)
	r.mu.Lock()
	defer r.mu.Unlock()
	inst.EnforcerRunning = r.runningNow[id]
	return inst, err
}

func (r *enforcingRuntime) EnforcesEgress() bool      { return true }
func (r *enforcingRuntime) RunsCredentialProxy() bool { return true }

func (r *enforcingRuntime) MissingEnforcers(context.Context, []runtimes.Instance) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.missing...), nil
}

func (r *enforcingRuntime) RestoreEnforcer(_ context.Context, id, _ string, spec runtimes.EgressSpec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.restoreErr != nil {
		return r.restoreErr
	}
	r.restored = append(r.restored, spec)
	r.missing = nil
	return nil
}

// fakeEnforcer speaks a sandbox's egress API on its address's port 18080 as the real
// enforcer does (requests verified and answers signed with egressauth, the policy it
// was last given in its report, the vault's statuses), over state it keeps in memory.
// The real enforcer needs nftables in a network namespace of its own, which only a
// container gives; the e2e tests drive it. This one also gives, on demand, the faults
// the gateway must survive: unsigned answers and refusals.
type fakeEnforcer struct {
	token string
	srv   *http.Server

	mu       sync.Mutex
	report   []byte // the last policy report (GET /policy)
	unsigned bool
	refuse   int // a status every request is answered with, 0 for none
	audit    []byte
	vault    []string // the vault requests it got, "METHOD path body"
}

// startEnforcer serves a fakeEnforcer for the sandbox at addr, stopped when the test ends.
func startEnforcer(t *testing.T, addr, token string) *fakeEnforcer {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(agentproto.EgressPort)))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeEnforcer{token: token, report: []byte(`{"status":"ok","mode":"deny_all","enforcementMode":"dns+nft","policy":{"defaultAction":"deny","egress":[]}}`)}
	verifier := egressauth.NewVerifier(token, time.Now().Add(-time.Minute))
	f.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		nonce, err := verifier.Verify(r, body, time.Now())
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		status, answer := f.serve(r.Method, r.URL.Path, body)
		f.mu.Lock()
		unsigned := f.unsigned
		f.mu.Unlock()
		if !unsigned {
			w.Header().Set(egressauth.HeaderResponseSignature, egressauth.SignResponse(token, nonce, status, answer))
		}
		w.WriteHeader(status)
		_, _ = w.Write(answer)
	})}
	go func() { _ = f.srv.Serve(ln) }()
	t.Cleanup(func() { _ = f.srv.Close() })
	return f
}

func (f *fakeEnforcer) serve(method, path string, body []byte) (int, []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != 0 {
		return f.refuse, []byte(`{"code":"EGRESS::APPLY_FAILED","message":"refused"}`)
	}
	switch {
	case path == agentproto.PathPolicy && method == http.MethodGet:
		return http.StatusOK, f.report
	case path == agentproto.PathPolicy && method == http.MethodPut:
		var np policy.NetworkPolicy
		if err := json.Unmarshal(body, &np); err != nil {
			return http.StatusBadRequest, []byte(`{"code":"EGRESS::INVALID_POLICY","message":"bad"}`)
		}
		f.report, _ = json.Marshal(map[string]any{"status": "ok", "mode": "enforcing", "enforcementMode": "dns+nft", "policy": np, "platformDeny": []string{"blocked.test"}})
		return http.StatusOK, f.report
	case path == agentproto.PathVaultAudit:
		return http.StatusOK, f.audit
	case IsVaultPath(path):
		f.vault = append(f.vault, method+" "+path+" "+string(body))
		switch method {
		case http.MethodGet:
			return http.StatusOK, []byte(`{"revision":1}`)
		case http.MethodPost:
			return http.StatusCreated, []byte(`{"revision":1}`)
		case http.MethodPatch:
			return http.StatusOK, []byte(`{"revision":2}`)
		case http.MethodDelete:
			return http.StatusNoContent, nil
		}
		return http.StatusMethodNotAllowed, []byte(`{"code":"EGRESS::METHOD_NOT_ALLOWED","message":"no"}`)
	}
	return http.StatusNotFound, []byte(`{"code":"EGRESS::NOT_FOUND","message":"no route"}`)
}

// policyInReport is the policy f reports.
func (f *fakeEnforcer) policyInReport(t *testing.T) policy.NetworkPolicy {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := policyOfReport(f.report)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *fakeEnforcer) set(fn func(f *fakeEnforcer)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// started is a Manager on real dependencies (Redis, the embedded Rego, the in-process
// runtime) with its test host.
type started struct {
	m       *Manager
	d       coredeps.Deps
	host    *testHost
	runtime *enforcingRuntime
	metrics *metrics.Set
}

// blockedTarget is what the platform denies every sandbox in these tests (always_deny).
const blockedTarget = "blocked.test"

// startManager starts a Manager; enforcing gives it a runtime that runs enforcers.
func startManager(t *testing.T, enforcing bool) started {
	t.Helper()
	d := coredeps.Start(t)
	if err := d.Policy.SetPlatformData(context.Background(), map[string]any{"always_deny": []string{blockedTarget}}); err != nil {
		t.Fatal(err)
	}
	h := &testHost{expiring: map[string]bool{}}
	rt := &enforcingRuntime{Runtime: d.Runtime}
	var runtime runtimes.Runtime = d.Runtime
	if enforcing {
		runtime = rt
	}
	set := metrics.New()
	m := New(d.Store, runtime, d.Policy, agentclient.New(), set, h, d.Log)
	t.Cleanup(m.Stop)
	return started{m: m, d: d, host: h, runtime: rt, metrics: set}
}

// restoresCounted is sandgate_enforcer_restores_total of outcome, as a scrape reads it.
func (s started) restoresCounted(t *testing.T, outcome string) float64 {
	t.Helper()
	return promtest.Counter(t, s.metrics.Collectors(), "sandgate_enforcer_restores_total", "outcome", outcome)
}

// runningSandbox starts a sandbox on the in-process runtime with a fakeEnforcer beside
// its agent, and stores its Running record.
func (s started) runningSandbox(t *testing.T, tenant string) (*store.Sandbox, *fakeEnforcer) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	spec := runtimes.Spec{ID: uuid.NewString(), Tenant: tenant, Image: "test", CreatedAt: now, AgentToken: "agent-" + uuid.NewString(), EgressToken: "egress-" + uuid.NewString()}
	inst, err := s.d.Runtime.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.d.Runtime.Delete(context.Background(), spec.ID) })
	sb := &store.Sandbox{
		ID: spec.ID, Tenant: tenant, Image: "test", State: stateRunning, CreatedAt: now, LastTransitionAt: now,
		Address: inst.Address, AgentToken: spec.AgentToken, EgressToken: spec.EgressToken, AccessToken: "access",
	}
	if err := s.d.Store.CreateSandbox(ctx, sb, 0); err != nil {
		t.Fatal(err)
	}
	return sb, startEnforcer(t, inst.Address, spec.EgressToken)
}

// wantCode fails unless err is a fault.Error of kind and code.
func wantCode(t *testing.T, err error, kind fault.Kind, code string) {
	t.Helper()
	e, ok := fault.AsError(err)
	if !ok || e.Kind != kind || e.Code != code {
		t.Fatalf("err = %v, want %s %s", err, kind, code)
	}
}

// waitFor polls cond until it holds, or fails the test after five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// decodeAnswer decodes an answer's body into v.
func decodeAnswer(t *testing.T, a *Answer, v any) {
	t.Helper()
	if err := json.NewDecoder(bytes.NewReader(a.Body)).Decode(v); err != nil {
		t.Fatalf("answer %d %q: %v", a.Status, a.Body, err)
	}
}

// errSentinel is a restore failure of the test runtime.
var errSentinel = errors.New("the engine refused the enforcer")
