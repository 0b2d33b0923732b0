package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
)

// The policy API (for policy authors in the console): read the Rego in force, validate,
// change it on every replica, evaluate it with an explanation, run its tests. Changes
// are override modules stored in Redis (store.SetPolicyOverrides); each gateway applies
// them at start and whenever another gateway announces a change.

// maxPolicyModules bounds how many modules one request may carry.
const maxPolicyModules = 64

// PolicyModule is one Rego source. Name is the one to send back to change it: a default
// module's file name (an override under that name with the same package replaces it).
type PolicyModule struct {
	Name      string `json:"name"`
	Package   string `json:"package,omitempty"`
	Origin    string `json:"origin"`
	Overrides string `json:"overrides,omitempty"`
	Source    string `json:"source"`
}

// PolicyState is the body of GET /v1/policy.
type PolicyState struct {
	Version string         `json:"version"`
	Modules []PolicyModule `json:"modules"`
	Tests   []PolicyModule `json:"tests"`
	Data    map[string]any `json:"data"`
	// Overrides names the modules the policy API stored (DELETE /v1/policy/overrides
	// removes them).
	Overrides []string `json:"overrides"`
}

// PolicyError locates one problem for an editor.
type PolicyError struct {
	Module  string `json:"module"`
	Row     int    `json:"row"`
	Col     int    `json:"col"`
	Message string `json:"message"`
}

// OriginOverride marks modules stored through the policy API.
const OriginOverride = "override"

// editorName is the name an editor shows and sends back for a module.
func editorName(name string) string { return strings.TrimPrefix(name, "default/") }

func policyModules(mods []policy.Module, overrides map[string]string) []PolicyModule {
	out := make([]PolicyModule, 0, len(mods))
	for _, m := range mods {
		origin := m.Origin
		if _, ok := overrides[m.Name]; ok && origin == policy.OriginOperator {
			origin = OriginOverride
		}
		out = append(out, PolicyModule{Name: editorName(m.Name), Package: m.Package, Origin: origin, Overrides: editorName(m.Overrides), Source: m.Source})
	}
	return out
}

// PolicyState returns the Rego in force now.
func (s *Service) PolicyState(ctx context.Context) (*PolicyState, error) {
	overrides := s.policy.Overrides()
	tests, err := s.policy.TestModules()
	if err != nil {
		return nil, err
	}
	names := sortedKeys(overrides)
	if names == nil {
		names = []string{} // the document's overrides is an array, never null
	}
	return &PolicyState{
		Version: s.policy.Version(), Modules: policyModules(s.policy.Modules(), overrides),
		Tests: policyModules(tests, overrides), Data: s.policy.Data(), Overrides: names,
	}, nil
}

// PolicyErrors turns a compile failure into located errors; ok is false for any other error.
func PolicyErrors(err error) ([]PolicyError, bool) {
	var ce *policy.CompileError
	if !errors.As(err, &ce) {
		return nil, false
	}
	out := make([]PolicyError, 0, len(ce.Errors))
	for _, e := range ce.Errors {
		out = append(out, PolicyError{Module: editorName(e.File), Row: e.Line, Col: e.Column, Message: e.Message})
	}
	return out, true
}

func checkPolicyChanges(changes map[string]string) error {
	if len(changes) == 0 {
		return invalid("modules: give at least one module, as {\"name.rego\": \"<source>\"}")
	}
	if len(changes) > maxPolicyModules {
		return invalid("modules: at most %d modules at once", maxPolicyModules)
	}
	return nil
}

// ValidatePolicy compiles the policy in force with changes laid over it. It returns the
// problems found (none: it compiles); err is for failures of another kind.
func (s *Service) ValidatePolicy(ctx context.Context, changes map[string]string) ([]PolicyError, error) {
	if err := checkPolicyChanges(changes); err != nil {
		return nil, err
	}
	err := s.policy.Check(ctx, changes)
	if err == nil {
		return nil, nil
	}
	if errs, ok := PolicyErrors(err); ok {
		return errs, nil
	}
	return []PolicyError{{Message: err.Error()}}, nil
}

// policyInvalid is the 400 of a change that does not compile.
func policyInvalid(err error) error {
	msg := err.Error()
	if errs, ok := PolicyErrors(err); ok {
		parts := make([]string, 0, len(errs))
		for _, e := range errs {
			if e.Module != "" {
				parts = append(parts, fmt.Sprintf("%s:%d:%d: %s", e.Module, e.Row, e.Col, e.Message))
			} else {
				parts = append(parts, e.Message)
			}
		}
		msg = "the policy does not compile, nothing was changed: " + strings.Join(parts, "; ")
	}
	return &Error{Kind: KindInvalid, Code: CodePolicyInvalid, Message: msg, Cause: err}
}

// PutPolicy lays changes over the stored overrides and puts the result in force on
// every gateway. Nothing changes when it does not compile. Two authors saving at the
// same moment on two gateways: the last write wins for the whole set.
func (s *Service) PutPolicy(ctx context.Context, caller Caller, changes map[string]string) (*PolicyState, error) {
	if err := checkPolicyChanges(changes); err != nil {
		return nil, err
	}
	// Lay the changes over what Redis holds, not over this replica's copy, which may not
	// have seen another replica's change yet.
	merged, err := s.store.PolicyOverrides(ctx)
	if err != nil {
		return nil, err
	}
	for name, src := range changes {
		merged[name] = src
	}
	return s.replaceOverrides(ctx, caller, merged, "policy.updated", sortedKeys(changes))
}

// ResetPolicy removes the stored override module (every one when module is empty), which
// brings back the policy of the files.
func (s *Service) ResetPolicy(ctx context.Context, caller Caller, module string) (*PolicyState, error) {
	merged, err := s.store.PolicyOverrides(ctx)
	if err != nil {
		return nil, err
	}
	removed := sortedKeys(merged)
	if module != "" {
		if _, ok := merged[module]; !ok {
			return nil, Errorf(KindNotFound, CodeNotFound, "no stored override module %q (stored: %s)", module, strings.Join(removed, ", "))
		}
		delete(merged, module)
		removed = []string{module}
	} else {
		merged = map[string]string{}
	}
	return s.replaceOverrides(ctx, caller, merged, "policy.reset", removed)
}

func (s *Service) replaceOverrides(ctx context.Context, caller Caller, overrides map[string]string, event string, names []string) (*PolicyState, error) {
	if err := s.policy.CheckOverrides(ctx, overrides); err != nil {
		return nil, policyInvalid(err)
	}
	if err := s.store.SetPolicyOverrides(ctx, overrides); err != nil {
		return nil, err
	}
	if err := s.policy.SetOverrides(ctx, overrides); err != nil {
		return nil, policyInvalid(err)
	}
	s.queueEvent(eventFor(caller, event, map[string]any{"modules": names, "key": caller.KeyID, "version": s.policy.Version()}))
	return s.PolicyState(ctx)
}

// syncPolicy applies the stored overrides now and whenever a gateway announces a change
// (and after every reconnection to Redis, in case an announcement was missed).
func (s *Service) syncPolicy(ctx context.Context) {
	s.loadPolicyOverrides(ctx)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx := s.stopCtx
		reload := func() { s.loadPolicyOverrides(ctx) }
		for ctx.Err() == nil {
			// It returns when the subscription breaks (Redis went away) or Stop; the
			// loop resubscribes, and the reload on (re)subscription catches up.
			_ = s.store.SubscribePolicy(ctx, reload, reload)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
}

func (s *Service) loadPolicyOverrides(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stored, err := s.store.PolicyOverrides(ctx)
	if err != nil {
		s.log.Warn("policy overrides unreadable; keeping the policy in force", "err", err)
		return
	}
	if maps.Equal(stored, s.policy.Overrides()) {
		return
	}
	if err := s.policy.SetOverrides(ctx, stored); err != nil {
		s.log.Error("stored policy overrides refused; keeping the policy in force", "err", err)
		return
	}
	s.log.Info("policy overrides applied", "modules", len(stored), "version", s.policy.Version())
}

// Decision names the playground accepts besides a full query.
var policyQueries = map[string]string{
	"access":    policy.AccessQuery,
	"admission": policy.AdmissionQuery,
	"egress":    policy.EgressQuery,
}

// PolicyEvalResult is the body of POST /v1/policy/eval.
type PolicyEvalResult struct {
	Query       string   `json:"query"`
	Result      any      `json:"result"`
	Defined     bool     `json:"defined"`
	Error       string   `json:"error,omitempty"`
	Explanation []string `json:"explanation"`
}

// EvalPolicy evaluates a decision ("access", "admission", "egress") or a query
// ("data.sandgate.admission.deny") on input, with unsaved changes laid over the policy
// in force, and explains it with OPA's trace.
func (s *Service) EvalPolicy(ctx context.Context, decision string, input json.RawMessage, changes map[string]string) (*PolicyEvalResult, error) {
	query, ok := policyQueries[decision]
	if !ok {
		if !strings.HasPrefix(decision, "data.") {
			return nil, invalid("decision %q: want access, admission, egress or a query starting with data.", decision)
		}
		if _, err := ast.ParseRef(decision); err != nil {
			return nil, invalid("decision %q is not a valid reference: %v", decision, err)
		}
		query = decision
	}
	if len(changes) > maxPolicyModules {
		return nil, invalid("modules: at most %d modules at once", maxPolicyModules)
	}
	if len(input) > 0 && !json.Valid(input) {
		return nil, invalid("input is not JSON")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, explanation, err := s.policy.ExplainWith(ctx, changes, query, input)
	if _, compile := PolicyErrors(err); compile {
		return nil, policyInvalid(err)
	}
	out := &PolicyEvalResult{Query: query, Explanation: strings.Split(strings.TrimRight(explanation, "\n"), "\n")}
	if err != nil {
		out.Error = err.Error()
		return out, nil
	}
	var rs []struct {
		Expressions []struct {
			Value any `json:"value"`
		} `json:"expressions"`
	}
	if err := json.Unmarshal(raw, &rs); err == nil && len(rs) > 0 && len(rs[0].Expressions) > 0 {
		out.Result, out.Defined = rs[0].Expressions[0].Value, true
	}
	return out, nil
}

// PolicyTestReport is the body of POST /v1/policy/test.
type PolicyTestReport struct {
	Results []policy.TestResult `json:"results"`
	Pass    int                 `json:"pass"`
	Fail    int                 `json:"fail"`
	Skip    int                 `json:"skip"`
}

// TestPolicy runs the Rego tests with unsaved changes laid over the policy in force.
func (s *Service) TestPolicy(ctx context.Context, changes map[string]string) (*PolicyTestReport, error) {
	if len(changes) > maxPolicyModules {
		return nil, invalid("modules: at most %d modules at once", maxPolicyModules)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	results, err := s.policy.TestWith(ctx, changes)
	if err != nil {
		if _, compile := PolicyErrors(err); compile {
			return nil, policyInvalid(err)
		}
		return nil, err
	}
	rep := &PolicyTestReport{Results: results}
	for i := range results {
		r := &results[i]
		r.Module = editorName(r.Module)
		switch {
		case r.Skip:
			rep.Skip++
		case r.Pass:
			rep.Pass++
		default:
			rep.Fail++
		}
	}
	return rep, nil
}

// ---- what a caller may do (the console shows only that) -----------------------------

// ConsoleActions are the actions the console asks about to show or hide its controls.
var ConsoleActions = []string{
	"sandbox.create", "sandbox.list", "sandbox.get", "sandbox.update", "sandbox.delete", "sandbox.proxy",
	"pool.create", "pool.list", "pool.update", "pool.delete",
	"batch.create", "batch.get", "batch.delete",
	"plugin.list", "plugin.update", "plugin.delete",
	"audit.read", "tenant.list", "tenant.create", "tenant.update", "key.list", "key.create", "key.delete",
	"policy.read", "policy.write",
}

// Can evaluates the access policy for each action on the caller's own tenant, without
// recording the decisions (they are questions, not requests).
func (s *Service) Can(ctx context.Context, caller Caller, actions []string) map[string]bool {
	out := make(map[string]bool, len(actions))
	for _, action := range actions {
		area, _, _ := strings.Cut(action, ".")
		res := policy.Resource{Kind: area, Tenant: caller.Tenant}
		if area == "tenant" || area == "key" {
			res.ID = caller.Tenant
		}
		if action == "tenant.list" || action == "tenant.create" {
			res = policy.Resource{Kind: "tenant"}
		}
		d := s.policy.Access(ctx, policy.AccessInput{
			Principal: policy.Principal{Kind: principal.CredentialOf(ctx), ID: caller.KeyID, Tenant: caller.Tenant, Role: caller.Role()},
			Tenant:    caller.Tenant, Action: action, Resource: res,
		})
		out[action] = d.Allow
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// eventFor makes an audit event of the caller's tenant about no sandbox.
func eventFor(caller Caller, typ string, data map[string]any) store.Event {
	return store.Event{Type: typ, Tenant: caller.Tenant, Time: time.Now().UTC(), Data: data}
}
