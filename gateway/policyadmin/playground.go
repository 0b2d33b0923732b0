package policyadmin

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sandgate/sandgate/policy"
)

// decisionQueries are the decision names the playground accepts besides a full query.
var decisionQueries = map[string]string{
	"access":    policy.AccessQuery,
	"admission": policy.AdmissionQuery,
	"egress":    policy.EgressQuery,
}

// EvalResult is the body of POST /v1/policy/eval.
type EvalResult struct {
	Query       string   `json:"query"`
	Result      any      `json:"result"`
	Defined     bool     `json:"defined"`
	Error       string   `json:"error,omitempty"`
	Explanation []string `json:"explanation"`
}

// Eval evaluates a decision ("access", "admission", "egress") or a query
// ("data.sandgate.admission.deny") on input, with unsaved changes laid over the policy
// in force, and explains it with OPA's trace.
func (m *Manager) Eval(ctx context.Context, decision string, input json.RawMessage, changes map[string]string) (*EvalResult, error) {
	query, ok := decisionQueries[decision]
	if !ok {
		if !strings.HasPrefix(decision, "data.") {
			return nil, invalid("decision %q: want access, admission, egress or a query starting with data.", decision)
		}
		if _, err := ast.ParseRef(decision); err != nil {
			return nil, invalid("decision %q is not a valid reference: %v", decision, err)
		}
		query = decision
	}
	if len(changes) > maxModules {
		return nil, invalid("modules: at most %d modules at once", maxModules)
	}
	if len(input) > 0 && !json.Valid(input) {
		return nil, invalid("input is not JSON")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, explanation, err := m.engine.ExplainWith(ctx, changes, query, input)
	if _, compile := Problems(err); compile {
		return nil, policyInvalid(err)
	}
	out := &EvalResult{Query: query, Explanation: strings.Split(strings.TrimRight(explanation, "\n"), "\n")}
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

// TestReport is the body of POST /v1/policy/test.
type TestReport struct {
	Results []policy.TestResult `json:"results"`
	Pass    int                 `json:"pass"`
	Fail    int                 `json:"fail"`
	Skip    int                 `json:"skip"`
}

// Test runs the Rego tests with unsaved changes laid over the policy in force.
func (m *Manager) Test(ctx context.Context, changes map[string]string) (*TestReport, error) {
	if len(changes) > maxModules {
		return nil, invalid("modules: at most %d modules at once", maxModules)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	results, err := m.engine.TestWith(ctx, changes)
	if err != nil {
		if _, compile := Problems(err); compile {
			return nil, policyInvalid(err)
		}
		return nil, err
	}
	rep := &TestReport{Results: results}
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
