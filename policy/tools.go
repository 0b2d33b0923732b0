package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/print"
)

// RunTests runs the Rego unit tests (rules named test_*) of the embedded
// default policy and of the operator's directory dir (empty: defaults only),
// with the override rule applied to test files too, and writes a report like
// `opa test -v` to w. err reports a policy that cannot be loaded or
// compiled, not failing tests.
func RunTests(ctx context.Context, dir string, w io.Writer) (passed, failed int, err error) {
	set, err := loadSources(dir, true, nil)
	if err != nil {
		return 0, 0, err
	}
	store := inmem.NewFromObject(set.data)
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("policy tests: %w", err)
	}
	defer store.Abort(ctx, txn)

	runner := tester.NewRunner().
		SetDefaultRegoVersion(ast.RegoV1).
		SetStore(store).
		SetModules(set.parsed).
		CapturePrintOutput(true).
		EnableTracing(true).
		SetParallel(1). // results in file order, as a reader expects
		RaiseBuiltinErrors(true)
	results, err := runner.RunTests(ctx, txn)
	if err != nil {
		return 0, 0, asCompileError(fmt.Errorf("policy tests: %w", err))
	}

	// Count while the reporter prints.
	forward := make(chan *tester.Result)
	reported := make(chan error, 1)
	go func() {
		reported <- tester.PrettyReporter{Output: w, Verbose: true, FailureLine: true}.Report(forward)
	}()
	for r := range results {
		switch {
		case r.Skip:
		case r.Pass():
			passed++
		default:
			failed++
		}
		forward <- r
	}
	close(forward)
	if err := <-reported; err != nil {
		return passed, failed, fmt.Errorf("policy tests: report: %w", err)
	}
	return passed, failed, nil
}

// EvalOnce evaluates query (e.g. "data.sandgate.access.decision") against the
// default policy plus dir, with input given as JSON (empty: no input). It
// returns the result set as JSON, like `opa eval`, and an explanation: the
// output of print() calls followed by the full trace with source locations.
// Platform data comes only from dir's data files.
func EvalOnce(ctx context.Context, dir, query string, input []byte) (json.RawMessage, string, error) {
	set, err := loadSources(dir, false, nil)
	if err != nil {
		return nil, "", err
	}
	return explain(ctx, set, set.data, query, input)
}

// Explain is EvalOnce on the policy version this engine serves (modules and
// data alike, not whatever the directory holds now), for the console's
// playground.
func (e *Engine) Explain(ctx context.Context, query string, input []byte) (json.RawMessage, string, error) {
	v := e.current.Load()
	return explain(ctx, v.set, v.data, query, input)
}

func explain(ctx context.Context, set sourceSet, data map[string]any, query string, input []byte) (json.RawMessage, string, error) {
	compiler, err := compile(set, true)
	if err != nil {
		return nil, "", err
	}
	var printed bytes.Buffer
	tracer := topdown.NewBufferTracer()
	opts := []func(*rego.Rego){
		rego.Compiler(compiler),
		rego.Store(inmem.NewFromObject(data)),
		rego.Query(query),
		rego.QueryTracer(tracer),
		rego.EnablePrintStatements(true),
		rego.PrintHook(bufferPrintHook{&printed}),
		rego.StrictBuiltinErrors(true),
	}
	if len(bytes.TrimSpace(input)) > 0 {
		value, err := ast.ValueFromReader(bytes.NewReader(input))
		if err != nil {
			return nil, "", fmt.Errorf("policy input is not JSON: %w", err)
		}
		opts = append(opts, rego.ParsedInput(value))
	}
	rs, evalErr := rego.New(opts...).Eval(ctx)

	var explanation strings.Builder
	if printed.Len() > 0 {
		explanation.WriteString("# print output\n")
		explanation.Write(printed.Bytes())
		explanation.WriteString("\n")
	}
	explanation.WriteString("# trace\n")
	topdown.PrettyTraceWithLocation(&explanation, *tracer)
	if evalErr != nil {
		return nil, explanation.String(), fmt.Errorf("evaluate %s: %w", query, evalErr)
	}
	if rs == nil {
		rs = rego.ResultSet{}
	}
	raw, err := json.Marshal(rs)
	if err != nil {
		return nil, explanation.String(), fmt.Errorf("encode result: %w", err)
	}
	return raw, explanation.String(), nil
}

// bufferPrintHook collects the output of Rego print() calls.
type bufferPrintHook struct{ w *bytes.Buffer }

func (h bufferPrintHook) Print(_ print.Context, msg string) error {
	h.w.WriteString(msg)
	h.w.WriteString("\n")
	return nil
}
