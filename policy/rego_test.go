package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
)

// TestDefaultRegoTests runs every *_test.rego of the default policy, so that
// `go test ./policy/...` covers them.
func TestDefaultRegoTests(t *testing.T) {
	var out bytes.Buffer
	passed, failed, err := RunTests(context.Background(), "", &out)
	if err != nil {
		t.Fatalf("RunTests: %v\n%s", err, out.String())
	}
	if failed != 0 || passed < 80 {
		t.Fatalf("rego tests: %d passed, %d failed\n%s", passed, failed, out.String())
	}
	t.Logf("rego tests: %d passed", passed)
}

// TestDefaultRegoCoverage requires the Rego tests to exercise every line of
// every default rule.
func TestDefaultRegoCoverage(t *testing.T) {
	ctx := context.Background()
	set, err := loadSources("", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := inmem.NewFromObject(map[string]any{})
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Abort(ctx, txn) })
	cov := cover.New()
	runner := tester.NewRunner().SetDefaultRegoVersion(ast.RegoV1).SetStore(store).
		SetModules(set.parsed).SetCoverageQueryTracer(cov).RaiseBuiltinErrors(true)
	results, err := runner.RunTests(ctx, txn)
	if err != nil {
		t.Fatal(err)
	}
	for r := range results {
		if !r.Pass() {
			t.Errorf("rego test %s.%s failed: %v", r.Package, r.Name, r.Error)
		}
	}
	policies := map[string]*ast.Module{}
	for name, m := range set.parsed {
		if !isTestFile(name) {
			policies[name] = m
		}
	}
	report := cov.Report(policies)
	for name := range policies {
		file := report.Files[name]
		if file == nil {
			t.Errorf("%s: not covered at all", name)
			continue
		}
		for _, r := range file.NotCovered {
			t.Errorf("%s: lines %d-%d not covered by any Rego test", name, r.Start.Row, r.End.Row)
		}
	}
	t.Logf("rego coverage: %.1f%%", report.Coverage)
}

func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRunTestsWithOperatorDir(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"deny_latest.rego": `package sandgate.admission

deny contains {"code": "OPS::UNTRUSTED", "message": "untrusted registry"} if startswith(input.request.image, "untrusted.example/")
`,
		"deny_latest_test.rego": `package sandgate.admission_test

import data.sandgate.admission

test_untrusted_denied if {
	{"code": "OPS::UNTRUSTED", "message": "untrusted registry"} in admission.deny with input as {"request": {"image": "untrusted.example/x:1"}}
}

test_deliberately_failing if {
	count(admission.deny) == 99 with input as {"request": {"image": "x:1"}}
}
`,
	})
	var out bytes.Buffer
	passed, failed, err := RunTests(context.Background(), dir, &out)
	if err != nil {
		t.Fatalf("RunTests: %v", err)
	}
	if failed != 1 {
		t.Errorf("failed = %d, want 1 (the deliberately failing test)\n%s", failed, out.String())
	}
	defaults, _, _ := RunTests(context.Background(), "", &bytes.Buffer{})
	if passed != defaults+1 {
		t.Errorf("passed = %d, want the %d default tests plus 1", passed, defaults)
	}
	for _, want := range []string{"test_untrusted_denied: PASS", "test_deliberately_failing: FAIL", "FAIL: 1/"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRunTestsReportsCompileErrors(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"broken.rego": "package sandgate.access\n\nallow if {\n\tinput.x ==\n}\n"})
	_, _, err := RunTests(context.Background(), dir, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "broken.rego:5") {
		t.Fatalf("err = %v, want a parse error at broken.rego:5", err)
	}
}

func TestEvalOnce(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"debug.rego": `package sandgate.access

permitted if {
	print("checking", input.principal.id)
	input.principal.id == "break-glass"
}
`,
		"sandgate/platform/data.json": `{"suspended_tenants": ["t9"]}`,
	})
	input := []byte(`{"principal": {"kind": "api_key", "id": "break-glass", "role": "viewer", "tenant": "t1"}, "tenant": "t1", "action": "tenant.delete"}`)
	raw, explanation, err := EvalOnce(context.Background(), dir, AccessQuery, input)
	if err != nil {
		t.Fatalf("EvalOnce: %v", err)
	}
	var rs []struct {
		Expressions []struct {
			Value Decision `json:"value"`
		} `json:"expressions"`
	}
	if err := json.Unmarshal(raw, &rs); err != nil || len(rs) != 1 || len(rs[0].Expressions) != 1 {
		t.Fatalf("result %s: %v", raw, err)
	}
	if got := rs[0].Expressions[0].Value; !got.Allow || got.Code != CodeOK {
		t.Errorf("decision = %+v, want allowed by the operator's rule", got)
	}
	for _, want := range []string{"# print output", "checking break-glass", "# trace", "Enter data.sandgate.access.decision", "debug.rego:"} {
		if !strings.Contains(explanation, want) {
			t.Errorf("explanation lacks %q", want)
		}
	}

	// The operator's data file is in force: a suspended tenant is vetoed.
	input = []byte(`{"principal": {"kind": "api_key", "role": "tenant-admin", "tenant": "t9"}, "tenant": "t9", "action": "sandbox.create"}`)
	raw, _, err = EvalOnce(context.Background(), dir, AccessQuery+".code", input)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), fmt.Sprintf("%q", CodeTenantSuspended)) {
		t.Errorf("result %s lacks %s", raw, CodeTenantSuspended)
	}
}

func TestEvalOnceErrors(t *testing.T) {
	tests := []struct {
		name, query, input, want string
	}{
		{"bad input", AccessQuery, "{not json", "not JSON"},
		{"bad query", "data.sandgate.access.decision[", "", "parse"},
		{"runtime error", `to_number("seven")`, "", "to_number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := EvalOnce(context.Background(), "", tt.query, []byte(tt.input))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestEvalOnceUndefinedIsEmptyResult(t *testing.T) {
	raw, _, err := EvalOnce(context.Background(), "", "data.sandgate.access.nothing_here", nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != "[]" {
		t.Errorf("result = %s, want []", raw)
	}
}

// TestReadmeExamples keeps the README's examples working: each Rego block
// must compile with the defaults, and the YAML block must load as data.
func TestReadmeExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string][]string{}
	for _, part := range strings.Split(string(readme), "```")[1:] {
		lang, body, ok := strings.Cut(part, "\n")
		if ok && (lang == "rego" || lang == "yaml") {
			blocks[lang] = append(blocks[lang], body)
		}
	}
	if len(blocks["rego"]) < 2 || len(blocks["yaml"]) < 1 {
		t.Fatalf("found %d rego and %d yaml blocks", len(blocks["rego"]), len(blocks["yaml"]))
	}
	dir := t.TempDir()
	files := map[string]string{"sandgate/platform/egress.yaml": blocks["yaml"][0]}
	for i, src := range blocks["rego"] {
		files[fmt.Sprintf("example%d.rego", i)] = src
	}
	writeFiles(t, dir, files)
	e := newTestEngine(t, Options{Dir: dir})
	if d := e.Admit(context.Background(), AdmissionInput{Request: CreateRequest{Image: "python:latest"}}); d.Allow {
		t.Errorf("README admission example did not deny :latest: %+v", d)
	}
	if d := e.Access(context.Background(), AccessInput{Principal: apiKey("member", "t1"), Tenant: "t1", Action: "sandbox.create"}); d.Code != "OPS::CHANGE_FREEZE" {
		t.Errorf("README access example did not veto: %+v", d)
	}
	np, d := e.Egress(context.Background(), EgressInput{})
	if !d.Allow || np.DefaultAction != ActionDeny || len(np.Egress) != 5 {
		t.Errorf("README egress data: %+v %+v", np, d)
	}
}
