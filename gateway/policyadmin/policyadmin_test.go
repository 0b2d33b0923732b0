package policyadmin

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/test/coredeps"
)

// testHost is the core's part of the feature for these tests: the events it is handed
// are kept for the test to read.
type testHost struct {
	mu     sync.Mutex
	events []store.Event
}

func (h *testHost) QueueEvent(ev store.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev)
}

func (h *testHost) queued() []store.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

var _ Host = (*testHost)(nil)

// forbidModule is an admission extension that refuses images naming "forbidden".
const forbidModule = `package sandgate.admission

deny contains {"code": "ADMISSION::IMAGE_FORBIDDEN", "message": msg} if {
	contains(input.request.image, "forbidden")
	msg := sprintf("image %s is forbidden", [input.request.image])
}
`

// brokenModule does not parse.
const brokenModule = "package sandgate.admission\n\ndeny contains x if {\n"

var (
	admin  = principal.Caller{Admin: true, KeyID: "admin-key"}
	member = principal.Caller{Tenant: "t1", KeyID: "k1", KeyRole: principal.RoleMember}
)

// newManager is a started Manager over the store and an engine of its own, as one
// gateway of several has.
func newManager(t *testing.T, st *store.Store) (*Manager, *testHost) {
	t.Helper()
	eng, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &testHost{}
	m := New(st, eng, h, nil)
	m.Start(context.Background())
	t.Cleanup(m.Stop)
	return m, h
}

func codeOf(err error) string {
	if e, ok := fault.AsError(err); ok {
		return e.Code
	}
	return ""
}

func admits(m *Manager, image string) bool {
	return m.engine.Admit(context.Background(), policy.AdmissionInput{Tenant: policy.TenantQuotas{ID: "t1"}, Request: policy.CreateRequest{Image: image}}).Allow
}

func TestStateShowsTheDefaultPolicy(t *testing.T) {
	d := coredeps.Start(t)
	m, _ := newManager(t, d.Store)
	st, err := m.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Overrides == nil || len(st.Overrides) != 0 {
		t.Errorf("overrides = %#v, want an empty array", st.Overrides)
	}
	var names []string
	for _, mod := range st.Modules {
		names = append(names, mod.Name)
		if strings.HasPrefix(mod.Name, "default/") {
			t.Errorf("module %q keeps its default/ prefix", mod.Name)
		}
	}
	if !slices.Contains(names, "admission.rego") || len(st.Tests) == 0 || st.Version == "" {
		t.Errorf("state = modules %v, %d tests, version %q", names, len(st.Tests), st.Version)
	}
}

func TestValidate(t *testing.T) {
	d := coredeps.Start(t)
	m, _ := newManager(t, d.Store)
	ctx := context.Background()
	tooMany := map[string]string{}
	for i := range maxModules + 1 {
		tooMany[strings.Repeat("m", i+1)+".rego"] = "package x"
	}
	for _, tt := range []struct {
		name     string
		changes  map[string]string
		code     string // of the error
		problems bool
	}{
		{"compiles", map[string]string{"forbid.rego": forbidModule}, "", false},
		{"does not parse", map[string]string{"forbid.rego": brokenModule}, "", true},
		{"nothing", nil, fault.CodeInvalidParameter, false},
		{"too many modules", tooMany, fault.CodeInvalidParameter, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			probs, err := m.Validate(ctx, tt.changes)
			if codeOf(err) != tt.code || (tt.code == "" && err != nil) {
				t.Fatalf("err = %v, want code %q", err, tt.code)
			}
			if (len(probs) > 0) != tt.problems {
				t.Fatalf("problems = %+v, want some: %v", probs, tt.problems)
			}
			if tt.problems && (probs[0].Module != "forbid.rego" || probs[0].Row == 0) {
				t.Errorf("problem not located: %+v", probs[0])
			}
		})
	}
	if len(m.engine.Overrides()) != 0 {
		t.Error("validating put a change in force")
	}
}

func TestPutAndResetOnEveryReplica(t *testing.T) {
	d := coredeps.Start(t)
	ctx := context.Background()
	a, host := newManager(t, d.Store)
	b, _ := newManager(t, d.Store)

	st, err := a.Put(ctx, admin, map[string]string{"forbid.rego": forbidModule})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Overrides, []string{"forbid.rego"}) {
		t.Errorf("overrides = %v", st.Overrides)
	}
	if admits(a, "forbidden:1") {
		t.Error("the replica that stored the change does not apply it")
	}
	stored, err := d.Store.PolicyOverrides(ctx)
	if err != nil || stored["forbid.rego"] != forbidModule {
		t.Fatalf("stored overrides = %v, %v", stored, err)
	}
	waitFor(t, "the other replica applies the change", func() bool { return !admits(b, "forbidden:1") })
	evs := host.queued()
	if len(evs) != 1 || evs[0].Type != "policy.updated" || evs[0].Data["key"] != "admin-key" {
		t.Fatalf("events = %+v", evs)
	}

	// A change that does not compile changes nothing, anywhere.
	_, err = a.Put(ctx, admin, map[string]string{"forbid.rego": brokenModule})
	if codeOf(err) != CodePolicyInvalid || !strings.Contains(err.Error(), "forbid.rego:") {
		t.Fatalf("broken put: %v", err)
	}
	if got, _ := d.Store.PolicyOverrides(ctx); got["forbid.rego"] != forbidModule || a.engine.Overrides()["forbid.rego"] != forbidModule {
		t.Error("a change that does not compile was stored or put in force")
	}
	if _, err := a.Put(ctx, admin, nil); codeOf(err) != fault.CodeInvalidParameter {
		t.Errorf("empty put: %v", err)
	}

	if _, err := a.Reset(ctx, admin, "other.rego"); codeOf(err) != fault.CodeNotFound || !strings.Contains(err.Error(), "forbid.rego") {
		t.Errorf("reset of a module never stored: %v", err)
	}
	st, err = b.Reset(ctx, admin, "forbid.rego")
	if err != nil || len(st.Overrides) != 0 {
		t.Fatalf("reset: %+v, %v", st, err)
	}
	waitFor(t, "the first replica drops the override", func() bool { return admits(a, "forbidden:1") })
	if _, err := a.Put(ctx, admin, map[string]string{"forbid.rego": forbidModule, "other.rego": "package sandgate.other\n"}); err != nil {
		t.Fatal(err)
	}
	if st, err := a.Reset(ctx, admin, ""); err != nil || len(st.Overrides) != 0 || !admits(a, "forbidden:1") {
		t.Fatalf("reset of every module: %+v, %v", st, err)
	}
}

func TestStoreLostFallsBackToTheFiles(t *testing.T) {
	d := coredeps.Start(t)
	ctx := context.Background()
	a, _ := newManager(t, d.Store)
	if _, err := a.Put(ctx, admin, map[string]string{"forbid.rego": forbidModule}); err != nil {
		t.Fatal(err)
	}
	if err := d.Store.Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	a.StoreLost()
	waitFor(t, "the override goes with the store", func() bool { return admits(a, "forbidden:1") })
}

func TestStartAppliesStoredOverrides(t *testing.T) {
	d := coredeps.Start(t)
	ctx := context.Background()
	if err := d.Store.SetPolicyOverrides(ctx, map[string]string{"forbid.rego": forbidModule}); err != nil {
		t.Fatal(err)
	}
	m, _ := newManager(t, d.Store)
	if admits(m, "forbidden:1") {
		t.Error("the stored override is not in force after Start")
	}
	// Overrides that no longer compile leave the policy in force.
	if err := d.Store.SetPolicyOverrides(ctx, map[string]string{"forbid.rego": brokenModule}); err != nil {
		t.Fatal(err)
	}
	m.loadOverrides(ctx)
	if m.engine.Overrides()["forbid.rego"] != forbidModule {
		t.Error("stored overrides that do not compile replaced the policy in force")
	}
}

func TestEval(t *testing.T) {
	d := coredeps.Start(t)
	m, _ := newManager(t, d.Store)
	ctx := context.Background()
	input := json.RawMessage(`{"tenant":{"id":"t1"},"request":{"image":"forbidden:1"}}`)
	for _, tt := range []struct {
		name     string
		decision string
		input    json.RawMessage
		changes  map[string]string
		code     string
		check    func(t *testing.T, r *EvalResult)
	}{
		{name: "a decision with unsaved changes", decision: "admission", input: input, changes: map[string]string{"forbid.rego": forbidModule},
			check: func(t *testing.T, r *EvalResult) {
				b, _ := json.Marshal(r.Result)
				if !r.Defined || !strings.Contains(string(b), "ADMISSION::IMAGE_FORBIDDEN") || len(r.Explanation) == 0 {
					t.Errorf("result = %+v", r)
				}
			}},
		{name: "a query", decision: "data.sandgate.admission.deny", input: input,
			check: func(t *testing.T, r *EvalResult) {
				if r.Query != "data.sandgate.admission.deny" || !r.Defined {
					t.Errorf("result = %+v", r)
				}
			}},
		{name: "an undefined query", decision: "data.nothing.here", input: input,
			check: func(t *testing.T, r *EvalResult) {
				if r.Defined {
					t.Errorf("result = %+v", r)
				}
			}},
		{name: "neither a decision nor a query", decision: "deny", code: fault.CodeInvalidParameter},
		{name: "a query that is no reference", decision: "data.x[", code: fault.CodeInvalidParameter},
		{name: "input not JSON", decision: "admission", input: json.RawMessage("{"), code: fault.CodeInvalidParameter},
		{name: "changes that do not compile", decision: "admission", changes: map[string]string{"forbid.rego": brokenModule}, code: CodePolicyInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := m.Eval(ctx, tt.decision, tt.input, tt.changes)
			if codeOf(err) != tt.code || (tt.code == "" && err != nil) {
				t.Fatalf("err = %v, want code %q", err, tt.code)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
	if len(m.engine.Overrides()) != 0 {
		t.Error("evaluating put a change in force")
	}
}

func TestRegoTests(t *testing.T) {
	d := coredeps.Start(t)
	m, _ := newManager(t, d.Store)
	ctx := context.Background()
	rep, err := m.Test(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pass == 0 || rep.Fail != 0 || len(rep.Results) != rep.Pass+rep.Fail+rep.Skip {
		t.Fatalf("report: pass %d fail %d skip %d of %d", rep.Pass, rep.Fail, rep.Skip, len(rep.Results))
	}
	for _, r := range rep.Results {
		if strings.HasPrefix(r.Module, "default/") {
			t.Fatalf("result module %q keeps its default/ prefix", r.Module)
		}
	}
	failing := map[string]string{"mine_test.rego": "package sandgate.mine_test\n\ntest_never if { false }\n"}
	if rep, err = m.Test(ctx, failing); err != nil || rep.Fail != 1 {
		t.Fatalf("a failing test: %+v, %v", rep, err)
	}
	if _, err := m.Test(ctx, map[string]string{"forbid.rego": brokenModule}); codeOf(err) != CodePolicyInvalid {
		t.Errorf("changes that do not compile: %v", err)
	}
}

func TestCan(t *testing.T) {
	d := coredeps.Start(t)
	m, _ := newManager(t, d.Store)
	ctx := context.Background()
	adminCan := m.Can(ctx, admin, ConsoleActions)
	memberCan := m.Can(ctx, member, ConsoleActions)
	if len(adminCan) != len(ConsoleActions) {
		t.Fatalf("answers for %d of %d actions", len(adminCan), len(ConsoleActions))
	}
	for _, a := range []string{"tenant.create", "policy.write", "sandbox.create"} {
		if !adminCan[a] {
			t.Errorf("the platform admin may not %s", a)
		}
	}
	if !memberCan["sandbox.create"] || memberCan["tenant.create"] || memberCan["policy.write"] {
		t.Errorf("a member's actions: %v", memberCan)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
