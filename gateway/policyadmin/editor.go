package policyadmin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
)

// CodePolicyInvalid reports Rego that does not parse or compile.
const CodePolicyInvalid = "POLICY_INVALID"

// maxModules bounds how many modules one request may carry.
const maxModules = 64

// OriginOverride marks modules stored through the policy API.
const OriginOverride = "override"

// Module is one Rego source. Name is the one to send back to change it: a default
// module's file name (an override under that name with the same package replaces it).
type Module struct {
	Name      string `json:"name"`
	Package   string `json:"package,omitempty"`
	Origin    string `json:"origin"`
	Overrides string `json:"overrides,omitempty"`
	Source    string `json:"source"`
}

// State is the body of GET /v1/policy.
type State struct {
	Version string         `json:"version"`
	Modules []Module       `json:"modules"`
	Tests   []Module       `json:"tests"`
	Data    map[string]any `json:"data"`
	// Overrides names the modules the policy API stored (DELETE /v1/policy/overrides
	// removes them).
	Overrides []string `json:"overrides"`
}

// Problem locates one problem of a policy for an editor.
type Problem struct {
	Module  string `json:"module"`
	Row     int    `json:"row"`
	Col     int    `json:"col"`
	Message string `json:"message"`
}

// editorName is the name an editor shows and sends back for a module.
func editorName(name string) string { return strings.TrimPrefix(name, "default/") }

func editorModules(mods []policy.Module, overrides map[string]string) []Module {
	out := make([]Module, 0, len(mods))
	for _, m := range mods {
		origin := m.Origin
		if _, ok := overrides[m.Name]; ok && origin == policy.OriginOperator {
			origin = OriginOverride
		}
		out = append(out, Module{Name: editorName(m.Name), Package: m.Package, Origin: origin, Overrides: editorName(m.Overrides), Source: m.Source})
	}
	return out
}

// State returns the Rego in force now.
func (m *Manager) State(ctx context.Context) (*State, error) {
	overrides := m.engine.Overrides()
	tests, err := m.engine.TestModules()
	if err != nil {
		return nil, err
	}
	names := sortedKeys(overrides)
	if names == nil {
		names = []string{} // the document's overrides is an array, never null
	}
	return &State{
		Version: m.engine.Version(), Modules: editorModules(m.engine.Modules(), overrides),
		Tests: editorModules(tests, overrides), Data: m.engine.Data(), Overrides: names,
	}, nil
}

// Problems turns a compile failure into located problems; ok is false for any other
// error.
func Problems(err error) ([]Problem, bool) {
	var ce *policy.CompileError
	if !errors.As(err, &ce) {
		return nil, false
	}
	out := make([]Problem, 0, len(ce.Errors))
	for _, e := range ce.Errors {
		out = append(out, Problem{Module: editorName(e.File), Row: e.Line, Col: e.Column, Message: e.Message})
	}
	return out, true
}

func invalid(format string, args ...any) *fault.Error {
	return fault.Errorf(fault.KindInvalid, fault.CodeInvalidParameter, format, args...)
}

func checkChanges(changes map[string]string) error {
	if len(changes) == 0 {
		return invalid("modules: give at least one module, as {\"name.rego\": \"<source>\"}")
	}
	if len(changes) > maxModules {
		return invalid("modules: at most %d modules at once", maxModules)
	}
	return nil
}

// Validate compiles the policy in force with changes laid over it. It returns the
// problems found (none: it compiles); err is for failures of another kind.
func (m *Manager) Validate(ctx context.Context, changes map[string]string) ([]Problem, error) {
	if err := checkChanges(changes); err != nil {
		return nil, err
	}
	err := m.engine.Check(ctx, changes)
	if err == nil {
		return nil, nil
	}
	if errs, ok := Problems(err); ok {
		return errs, nil
	}
	return []Problem{{Message: err.Error()}}, nil
}

// policyInvalid is the 400 of a change that does not compile.
func policyInvalid(err error) error {
	msg := err.Error()
	if errs, ok := Problems(err); ok {
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
	return &fault.Error{Kind: fault.KindInvalid, Code: CodePolicyInvalid, Message: msg, Cause: err}
}

// Put lays changes over the stored overrides and puts the result in force on every
// gateway. Nothing changes when it does not compile. Two authors saving at the same
// moment on two gateways: the last write wins for the whole set.
func (m *Manager) Put(ctx context.Context, caller principal.Caller, changes map[string]string) (*State, error) {
	if err := checkChanges(changes); err != nil {
		return nil, err
	}
	// Lay the changes over what Redis holds, not over this replica's copy, which may not
	// have seen another replica's change yet.
	merged, err := m.store.PolicyOverrides(ctx)
	if err != nil {
		return nil, err
	}
	for name, src := range changes {
		merged[name] = src
	}
	return m.replaceOverrides(ctx, caller, merged, "policy.updated", sortedKeys(changes))
}

// Reset removes the stored override module (every one when module is empty), which
// brings back the policy of the files.
func (m *Manager) Reset(ctx context.Context, caller principal.Caller, module string) (*State, error) {
	merged, err := m.store.PolicyOverrides(ctx)
	if err != nil {
		return nil, err
	}
	removed := sortedKeys(merged)
	if module != "" {
		if _, ok := merged[module]; !ok {
			return nil, fault.Errorf(fault.KindNotFound, fault.CodeNotFound, "no stored override module %q (stored: %s)", module, strings.Join(removed, ", "))
		}
		delete(merged, module)
		removed = []string{module}
	} else {
		merged = map[string]string{}
	}
	return m.replaceOverrides(ctx, caller, merged, "policy.reset", removed)
}

func (m *Manager) replaceOverrides(ctx context.Context, caller principal.Caller, overrides map[string]string, event string, names []string) (*State, error) {
	if err := m.engine.CheckOverrides(ctx, overrides); err != nil {
		return nil, policyInvalid(err)
	}
	if err := m.store.SetPolicyOverrides(ctx, overrides); err != nil {
		return nil, err
	}
	if err := m.engine.SetOverrides(ctx, overrides); err != nil {
		return nil, policyInvalid(err)
	}
	m.host.QueueEvent(store.Event{Type: event, Tenant: caller.Tenant, Time: time.Now().UTC(),
		Data: map[string]any{"modules": names, "key": caller.KeyID, "version": m.engine.Version()}})
	return m.State(ctx)
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
