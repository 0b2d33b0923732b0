package policy

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
)

// Overrides are modules kept outside the policy directory: the gateway's policy API
// stores them in Redis so that every replica serves the same policy. They follow the
// override rule like directory files and win over a directory file of the same name.

// overrideModules returns the overrides as modules, sorted by name. The caller holds e.mu.
func (e *Engine) overrideModules() []Module {
	out := make([]Module, 0, len(e.overrides))
	for _, name := range slices.Sorted(maps.Keys(e.overrides)) {
		out = append(out, Module{Name: name, Source: e.overrides[name]})
	}
	return out
}

// Overrides returns a copy of the override modules in force, by name.
func (e *Engine) Overrides() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.overrides)
}

// SetOverrides replaces every override module and recompiles. When the result does not
// compile (a *CompileError) or a name is not valid, nothing changes.
func (e *Engine) SetOverrides(ctx context.Context, modules map[string]string) error {
	for name := range modules {
		if err := checkModuleName(name); err != nil {
			return &CompileError{Errors: []SourceError{{File: name, Message: err.Error()}}}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.overrides
	e.overrides = maps.Clone(modules)
	if err := e.loadLocked(ctx); err != nil {
		e.overrides = old
		return asCompileError(err)
	}
	e.lastErr = nil
	return nil
}

// Data returns the data document the policy in force reads (operator data files and
// platform data).
func (e *Engine) Data() map[string]any {
	return deepCopy(e.current.Load().data).(map[string]any)
}

// candidate is the source set that would be in force with changes (module name →
// source) laid over the directory and the overrides, and the data it would read.
func (e *Engine) candidate(withTests bool, changes map[string]string) (sourceSet, map[string]any, error) {
	e.mu.Lock()
	overrides := maps.Clone(e.overrides)
	e.mu.Unlock()
	return e.candidateWith(withTests, overrides, changes)
}

// candidateWith is candidate with the given overrides instead of those in force.
func (e *Engine) candidateWith(withTests bool, overrides, changes map[string]string) (sourceSet, map[string]any, error) {
	for _, m := range []map[string]string{overrides, changes} {
		for name := range m {
			if err := checkModuleName(name); err != nil {
				return sourceSet{}, nil, &CompileError{Errors: []SourceError{{File: name, Message: err.Error()}}}
			}
		}
	}
	e.mu.Lock()
	platform := e.platform
	e.mu.Unlock()
	extras := make([]Module, 0, len(overrides)+len(changes))
	for _, name := range slices.Sorted(maps.Keys(overrides)) {
		extras = append(extras, Module{Name: name, Source: overrides[name]})
	}
	for _, name := range slices.Sorted(maps.Keys(changes)) {
		extras = append(extras, Module{Name: name, Source: changes[name]})
	}
	set, err := loadSources(e.dir, withTests, extras)
	if err != nil {
		return set, nil, asCompileError(err)
	}
	return set, mergeData(set.data, platform), nil
}

// Check compiles the policy in force with changes laid over it, tests included, without
// changing anything. It returns nil or a *CompileError locating every problem.
func (e *Engine) Check(ctx context.Context, changes map[string]string) error {
	set, data, err := e.candidate(true, changes)
	if err != nil {
		return err
	}
	if _, err := build(ctx, set, data); err != nil {
		return asCompileError(err)
	}
	return nil
}

// CheckOverrides is Check for a whole new set of overrides (replacing those in force,
// e.g. with one removed).
func (e *Engine) CheckOverrides(ctx context.Context, overrides map[string]string) error {
	set, data, err := e.candidateWith(true, overrides, nil)
	if err != nil {
		return err
	}
	if _, err := build(ctx, set, data); err != nil {
		return asCompileError(err)
	}
	return nil
}

// TestModules returns the Rego test modules that go with the policy in force (the
// embedded ones, the directory's and the overrides', after the override rule).
func (e *Engine) TestModules() ([]Module, error) {
	set, _, err := e.candidate(true, nil)
	if err != nil {
		return nil, err
	}
	var out []Module
	for _, m := range set.modules {
		if isTestFile(m.Name) {
			out = append(out, m)
		}
	}
	return out, nil
}

// ExplainWith is Explain on the policy in force with changes (unsaved editor sources)
// laid over it; the policy in force is not touched.
func (e *Engine) ExplainWith(ctx context.Context, changes map[string]string, query string, input []byte) ([]byte, string, error) {
	if len(changes) == 0 {
		return e.Explain(ctx, query, input)
	}
	set, data, err := e.candidate(false, changes)
	if err != nil {
		return nil, "", err
	}
	return explain(ctx, set, data, query, input)
}

// TestResult is the outcome of one Rego test rule.
type TestResult struct {
	Package    string  `json:"package"`
	Name       string  `json:"name"`
	Module     string  `json:"module,omitempty"`
	Row        int     `json:"row,omitempty"`
	Pass       bool    `json:"pass"`
	Skip       bool    `json:"skip,omitempty"`
	Error      string  `json:"error"`
	Output     string  `json:"output,omitempty"`
	DurationMs float64 `json:"durationMs"`
}

// TestWith runs the Rego unit tests (rules named test_*) of the policy in force with
// changes laid over it. err reports a policy that does not load or compile, not failing
// tests.
func (e *Engine) TestWith(ctx context.Context, changes map[string]string) ([]TestResult, error) {
	set, _, err := e.candidate(true, changes)
	if err != nil {
		return nil, err
	}
	// Data files only, as `opa test` and `sandgate policy test` see it: the platform data
	// of this gateway (its own addresses, …) must not decide whether a unit test passes.
	store := inmem.NewFromObject(set.data)
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return nil, fmt.Errorf("policy tests: %w", err)
	}
	defer store.Abort(ctx, txn)
	runner := tester.NewRunner().
		SetDefaultRegoVersion(ast.RegoV1).
		SetStore(store).
		SetModules(set.parsed).
		CapturePrintOutput(true).
		SetTimeout(30 * time.Second).
		SetParallel(1).
		RaiseBuiltinErrors(true)
	results, err := runner.RunTests(ctx, txn)
	if err != nil {
		return nil, asCompileError(fmt.Errorf("policy tests: %w", err))
	}
	out := []TestResult{}
	for r := range results {
		tr := TestResult{
			Package: strings.TrimPrefix(r.Package, "data."), Name: r.Name, Pass: r.Pass(), Skip: r.Skip,
			Output: string(r.Output), DurationMs: float64(r.Duration.Microseconds()) / 1000,
		}
		if r.Location != nil {
			tr.Module, tr.Row = r.Location.File, r.Location.Row
		}
		switch {
		case r.Error != nil:
			tr.Error = r.Error.Error()
		case r.Fail && r.FailedAt != nil:
			tr.Error = fmt.Sprintf("failed at %s", r.FailedAt.String())
		case r.Fail:
			tr.Error = "the test rule is false or undefined"
		}
		out = append(out, tr)
	}
	return out, nil
}
