package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// forbidModule is an admission extension that refuses images naming "forbidden".
const forbidModule = `package sandgate.admission

deny contains {"code": "ADMISSION::IMAGE_FORBIDDEN", "message": msg} if {
	contains(input.request.image, "forbidden")
	msg := sprintf("image %s is forbidden", [input.request.image])
}
`

func admitImage(e *Engine, image string) Decision {
	return e.Admit(context.Background(), AdmissionInput{Tenant: TenantQuotas{ID: "t1"}, Request: CreateRequest{Image: image}})
}

func TestSetOverrides(t *testing.T) {
	e := newTestEngine(t, Options{})
	ctx := context.Background()
	before := e.Version()
	if d := admitImage(e, "x/forbidden:1"); !d.Allow {
		t.Fatalf("before: %+v", d)
	}
	if err := e.SetOverrides(ctx, map[string]string{"forbid.rego": forbidModule}); err != nil {
		t.Fatal(err)
	}
	if e.Version() == before {
		t.Fatal("version unchanged after SetOverrides")
	}
	if d := admitImage(e, "x/forbidden:1"); d.Allow || d.Code != "ADMISSION::IMAGE_FORBIDDEN" || d.Message != "image x/forbidden:1 is forbidden" {
		t.Fatalf("after: %+v", d)
	}
	if d := admitImage(e, "x/fine:1"); !d.Allow {
		t.Fatalf("another image: %+v", d)
	}

	// A broken set changes nothing and says where it breaks.
	v := e.Version()
	err := e.SetOverrides(ctx, map[string]string{"forbid.rego": "package sandgate.admission\n\ndeny contains x if {\n"})
	var ce *CompileError
	if !errors.As(err, &ce) || ce.Errors[0].File != "forbid.rego" || ce.Errors[0].Line == 0 {
		t.Fatalf("broken override: %v", err)
	}
	if e.Version() != v || admitImage(e, "x/forbidden:1").Allow {
		t.Fatal("a refused override changed the policy in force")
	}
	if err := e.SetOverrides(ctx, map[string]string{"default/admission.rego": forbidModule}); err == nil {
		t.Fatal("an override in the reserved default/ directory was accepted")
	}

	// Removing every override brings the files' policy back.
	if err := e.SetOverrides(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if d := admitImage(e, "x/forbidden:1"); !d.Allow {
		t.Fatalf("after reset: %+v", d)
	}
}

// An override with a default module's file name and package replaces it; an override
// wins over a directory file of the same name and survives directory reloads.
func TestOverridesFollowOverrideRule(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "forbid.rego"), []byte(strings.ReplaceAll(forbidModule, "is forbidden", "is forbidden by a file")), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newTestEngine(t, Options{Dir: dir})
	ctx := context.Background()
	if d := admitImage(e, "forbidden"); d.Message != "image forbidden is forbidden by a file" {
		t.Fatalf("file policy: %+v", d)
	}
	if err := e.SetOverrides(ctx, map[string]string{"forbid.rego": forbidModule}); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if d := admitImage(e, "forbidden"); d.Message != "image forbidden is forbidden" {
		t.Fatalf("override over the file: %+v", d)
	}
	// Replace the default admission module altogether: nothing is denied any more.
	admitAll := "package sandgate.admission\n\ndeny := set()\n"
	if err := e.SetOverrides(ctx, map[string]string{"admission.rego": admitAll, "forbid.rego": "package sandgate.other\n"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range e.Modules() {
		if m.Name == "default/admission.rego" {
			t.Fatal("default/admission.rego still in force beside its override")
		}
		if m.Name == "admission.rego" && m.Overrides != "default/admission.rego" {
			t.Fatalf("admission.rego overrides %q", m.Overrides)
		}
	}
	if d := e.Admit(ctx, AdmissionInput{Tenant: TenantQuotas{ID: "t", Quotas: Quotas{MaxConcurrent: 1}}, Usage: Usage{Sandboxes: 5}, Request: CreateRequest{Image: "i"}}); !d.Allow {
		t.Fatalf("with admission replaced: %+v", d)
	}
}

func TestCheckExplainTestWith(t *testing.T) {
	// Platform data like a gateway's: the unit tests must not depend on it.
	e := newTestEngine(t, Options{Data: map[string]any{"gateway_addresses": []string{"172.17.0.1", "10.9.8.7"}}})
	ctx := context.Background()
	if err := e.Check(ctx, map[string]string{"forbid.rego": forbidModule}); err != nil {
		t.Fatalf("check good: %v", err)
	}
	err := e.Check(ctx, map[string]string{"forbid.rego": "package sandgate.admission\n\ndeny contains 1 if {\n\tinput.x ==\n}\n"})
	var ce *CompileError
	if !errors.As(err, &ce) || ce.Errors[0].File != "forbid.rego" || ce.Errors[0].Line < 3 {
		t.Fatalf("check broken: %v", err)
	}
	if len(e.Overrides()) != 0 {
		t.Fatal("Check stored something")
	}

	input := []byte(`{"tenant":{"id":"t1","quotas":{}},"usage":{},"request":{"image":"forbidden"}}`)
	raw, explanation, err := e.ExplainWith(ctx, map[string]string{"forbid.rego": forbidModule}, AdmissionQuery, input)
	if err != nil || !strings.Contains(string(raw), "IMAGE_FORBIDDEN") || !strings.Contains(explanation, "forbid.rego") {
		t.Fatalf("explain with the module: %v %s\n%s", err, raw, explanation)
	}
	raw, _, err = e.ExplainWith(ctx, nil, AdmissionQuery, input)
	if err != nil || strings.Contains(string(raw), "IMAGE_FORBIDDEN") {
		t.Fatalf("explain without: %v %s", err, raw)
	}

	results, err := e.TestWith(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	pass := 0
	for _, r := range results {
		if !r.Pass {
			t.Errorf("shipped test %s.%s (%s:%d) fails: %s %s", r.Package, r.Name, r.Module, r.Row, r.Error, r.Output)
		} else {
			pass++
		}
	}
	if pass < 10 {
		t.Fatalf("only %d tests ran", pass)
	}
	failing := "package sandgate.x_test\n\ntest_fails if { 1 == 2 }\n\ntest_errors if { 1 / 0 }\n"
	results, err = e.TestWith(ctx, map[string]string{"x_test.rego": failing})
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]string{}
	for _, r := range results {
		if !r.Pass {
			failed[r.Name] = r.Error
		}
	}
	if len(failed) != 2 || failed["test_errors"] == "" || failed["test_fails"] == "" {
		t.Fatalf("failures = %v", failed)
	}
}
