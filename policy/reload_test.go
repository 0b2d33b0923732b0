package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// memberCreate is a request the default policy allows.
var memberCreate = AccessInput{Principal: apiKey("member", "t1"), Tenant: "t1", Action: "sandbox.create", Resource: Resource{Kind: "sandbox"}}

// freezeModule is an operator extension that vetoes every sandbox.create.
const freezeModule = `package sandgate.access

deny contains {"code": "OPS::FREEZE", "message": "sandbox creation is frozen"} if input.action == "sandbox.create"
`

func startWatch(t *testing.T, e *Engine) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Watch(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		if cond() {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v", what, within)
	return 0
}

// manualClock makes e's watcher look only when told: look returns once a look is done
// (the second tick is taken only when the watcher is back from the first).
func manualClock(e *Engine) (look func()) {
	ticks := make(chan time.Time)
	e.ticks = ticks
	return func() {
		ticks <- time.Now()
		ticks <- time.Now()
	}
}

func TestWatchHotReload(t *testing.T) {
	dir := t.TempDir()
	e := newTestEngine(t, Options{Dir: dir})
	look := manualClock(e)
	startWatch(t, e)
	ctx := context.Background()

	if d := e.Access(ctx, memberCreate); !d.Allow {
		t.Fatalf("before reload: %+v", d)
	}
	v1 := e.Version()
	look() // the watcher's first look, before any change

	writeFiles(t, dir, map[string]string{"freeze.rego": freezeModule})
	look()
	if d := e.Access(ctx, memberCreate); d.Code != "OPS::FREEZE" {
		t.Fatalf("new module not in force after a look: %+v", d)
	}
	v2 := e.Version()
	if v2 == v1 {
		t.Fatalf("version unchanged after reload: %s", v2)
	}
	if d := e.Access(ctx, memberCreate); d.Message != "sandbox creation is frozen" || d.PolicyVersion != v2 {
		t.Errorf("decision after reload: %+v", d)
	}

	// A broken module is refused: the frozen version keeps serving.
	writeFiles(t, dir, map[string]string{"broken.rego": "package sandgate.access\n\npermitted if {\n"})
	look()
	if e.LastError() == nil {
		t.Fatal("no refusal recorded after a look")
	}
	if !strings.Contains(e.LastError().Error(), "broken.rego") {
		t.Errorf("LastError = %v, want it to name broken.rego", e.LastError())
	}
	if got := e.Version(); got != v2 {
		t.Errorf("version changed to %s after a refused load", got)
	}
	if d := e.Access(ctx, memberCreate); d.Code != "OPS::FREEZE" {
		t.Errorf("old decision lost after refused load: %+v", d)
	}

	// Removing both brings back the default policy.
	for _, f := range []string{"broken.rego", "freeze.rego"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	look()
	if !e.Access(ctx, memberCreate).Allow {
		t.Fatal("default policy not back after a look")
	}
	if e.LastError() != nil {
		t.Errorf("LastError = %v after a good load", e.LastError())
	}
}

func TestReloadRefusesMissingEntryPoint(t *testing.T) {
	dir := t.TempDir()
	e := newTestEngine(t, Options{Dir: dir})
	v1 := e.Version()
	// Same package and file name as the default: replaces it, but lacks decision.
	writeFiles(t, dir, map[string]string{"access.rego": "package sandgate.access\n\nallow := true\n"})
	err := e.Reload(context.Background())
	if err == nil || !strings.Contains(err.Error(), AccessQuery) {
		t.Fatalf("Reload = %v, want a missing %s", err, AccessQuery)
	}
	if e.Version() != v1 || !e.Access(context.Background(), memberCreate).Allow {
		t.Error("refused policy replaced the serving one")
	}
}

func TestReloadUnchangedKeepsVersion(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"freeze.rego": freezeModule})
	e := newTestEngine(t, Options{Dir: dir})
	v := e.Version()
	if err := e.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.Version() != v {
		t.Errorf("version %s became %s without a change", v, e.Version())
	}
}

func TestNewRefusesBrokenDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"broken.rego": "package sandgate.access\n\npermitted if {\n"})
	if _, err := New(context.Background(), Options{Dir: dir, Logger: quietLogger()}); err == nil {
		t.Fatal("New accepted a directory with a broken module")
	}
	if _, err := New(context.Background(), Options{Dir: filepath.Join(dir, "missing"), Logger: quietLogger()}); err == nil {
		t.Fatal("New accepted a missing directory")
	}
}

func TestOverrideRule(t *testing.T) {
	ctx := context.Background()
	allowAll := `package sandgate.access

decision := {"allow": true, "code": "OK", "message": "open house"}
`
	tests := []struct {
		name         string
		files        map[string]string
		wantAllow    bool
		wantOverride string // operator module expected to replace default/access.rego
	}{
		{
			name:         "same package and file name replaces the default",
			files:        map[string]string{"access.rego": allowAll},
			wantAllow:    true,
			wantOverride: "access.rego",
		},
		{
			name:         "same name in a subdirectory also replaces it",
			files:        map[string]string{"tenants/acme/access.rego": allowAll},
			wantAllow:    true,
			wantOverride: "tenants/acme/access.rego",
		},
		{
			name:  "same file name, other package: added beside",
			files: map[string]string{"access.rego": "package mycorp.access\n\nx := 1\n"},
		},
		{
			name:  "same package, other file name: extends the default",
			files: map[string]string{"extra.rego": "package sandgate.access\n\npermitted if input.principal.id == \"break-glass\"\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			e := newTestEngine(t, Options{Dir: dir})
			viewerDelete := AccessInput{Principal: apiKey("viewer", "t1"), Tenant: "t1", Action: "sandbox.delete", Resource: sandboxOf("t1")}
			if d := e.Access(ctx, viewerDelete); d.Allow != tt.wantAllow {
				t.Errorf("viewer delete: %+v, want allow=%v", d, tt.wantAllow)
			}
			var names []string
			hasDefaultAccess := false
			for _, m := range e.Modules() {
				names = append(names, m.Name)
				if m.Name == "default/access.rego" {
					hasDefaultAccess = true
				}
				if m.Origin == OriginOperator && m.Name == tt.wantOverride && m.Overrides != "default/access.rego" {
					t.Errorf("module %s: Overrides = %q", m.Name, m.Overrides)
				}
			}
			if hasDefaultAccess == (tt.wantOverride != "") {
				t.Errorf("modules in force %v: default/access.rego present = %v", names, hasDefaultAccess)
			}
		})
	}
}

func TestOperatorDataFiles(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"sandgate/platform/egress.yaml": "always_allow:\n  - pypi.org\nalways_deny:\n  - evil.example\n",
	})
	// Options.Data wins over the file at the same key.
	e := newTestEngine(t, Options{Dir: dir, Data: map[string]any{"always_deny": []string{"127.0.0.2"}}})
	got, d := e.Egress(context.Background(), EgressInput{})
	if !d.Allow {
		t.Fatalf("decision: %+v", d)
	}
	want := []EgressRule{{ActionDeny, "169.254.0.0/16"}, {ActionDeny, "fe80::/10"}, {ActionDeny, "127.0.0.2"}, {ActionAllow, "pypi.org"}}
	if len(got.Egress) != len(want) {
		t.Fatalf("egress = %v, want %v", got.Egress, want)
	}
	for i := range want {
		if got.Egress[i] != want[i] {
			t.Errorf("egress[%d] = %v, want %v", i, got.Egress[i], want[i])
		}
	}
}

func TestSetModuleValidateRemove(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := newTestEngine(t, Options{Dir: dir})

	t.Run("validate reports line numbers", func(t *testing.T) {
		err := e.Validate(ctx, "freeze.rego", "package sandgate.access\n\ndeny contains x if {\n\ty := 1\n}\n")
		var ce *CompileError
		if !errors.As(err, &ce) {
			t.Fatalf("Validate = %v, want a *CompileError", err)
		}
		if len(ce.Errors) == 0 || ce.Errors[0].File != "freeze.rego" || ce.Errors[0].Line != 3 {
			t.Errorf("errors = %+v, want one at freeze.rego:3", ce.Errors)
		}
	})
	t.Run("validate reports parse errors", func(t *testing.T) {
		err := e.Validate(ctx, "freeze.rego", "package sandgate.access\n\ndeny contains x if {\n")
		var ce *CompileError
		if !errors.As(err, &ce) || len(ce.Errors) == 0 || ce.Errors[0].Line == 0 {
			t.Fatalf("Validate = %v, want a located *CompileError", err)
		}
	})
	t.Run("validate rejects bad names", func(t *testing.T) {
		for _, name := range []string{"../x.rego", "/abs.rego", "x.txt", "default/access.rego", ".hidden.rego"} {
			if err := e.Validate(ctx, name, freezeModule); err == nil {
				t.Errorf("Validate accepted name %q", name)
			}
		}
	})
	t.Run("set module", func(t *testing.T) {
		if err := e.SetModule(ctx, "ops/freeze.rego", freezeModule); err != nil {
			t.Fatal(err)
		}
		if d := e.Access(ctx, memberCreate); d.Code != "OPS::FREEZE" {
			t.Errorf("after SetModule: %+v", d)
		}
		if _, err := os.Stat(filepath.Join(dir, "ops", "freeze.rego")); err != nil {
			t.Errorf("module not on disk: %v", err)
		}
	})
	t.Run("set broken module changes nothing", func(t *testing.T) {
		v := e.Version()
		if err := e.SetModule(ctx, "ops/freeze.rego", "package sandgate.access\n\ndeny contains"); err == nil {
			t.Fatal("SetModule accepted a broken module")
		}
		if e.Version() != v {
			t.Error("version changed")
		}
		src, _ := os.ReadFile(filepath.Join(dir, "ops", "freeze.rego"))
		if string(src) != freezeModule {
			t.Error("broken module reached the disk")
		}
	})
	t.Run("remove module", func(t *testing.T) {
		if err := e.RemoveModule(ctx, "ops/freeze.rego"); err != nil {
			t.Fatal(err)
		}
		if d := e.Access(ctx, memberCreate); !d.Allow {
			t.Errorf("after RemoveModule: %+v", d)
		}
	})
}

func TestSetModuleWithoutDirectory(t *testing.T) {
	e := newTestEngine(t, Options{})
	if err := e.SetModule(context.Background(), "x.rego", freezeModule); err == nil {
		t.Fatal("SetModule without a directory succeeded")
	}
}

func TestSetPlatformData(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{})
	in := AccessInput{Principal: apiKey("member", "t1"), Tenant: "t1", Action: "sandbox.create"}
	if err := e.SetPlatformData(ctx, map[string]any{"suspended_tenants": []string{"t1"}}); err != nil {
		t.Fatal(err)
	}
	if d := e.Access(ctx, in); d.Code != CodeTenantSuspended {
		t.Errorf("after suspension: %+v", d)
	}
	if err := e.SetPlatformData(ctx, map[string]any{"gateway_addresses": []string{"300.1.1.1"}}); err == nil {
		t.Error("SetPlatformData accepted an invalid gateway address")
	}
	if d := e.Access(ctx, in); d.Code != CodeTenantSuspended {
		t.Errorf("rejected data replaced the old: %+v", d)
	}
}

func TestExplainUsesEngineData(t *testing.T) {
	e := newTestEngine(t, Options{Data: map[string]any{"default_action": "allow"}})
	raw, explanation, err := e.Explain(context.Background(), EgressQuery+".policy.defaultAction", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"allow"`) || explanation == "" {
		t.Errorf("result %s, explanation %d bytes", raw, len(explanation))
	}
}

// TestConcurrentDecisionsDuringReload: decisions keep coming, each from one
// whole version, while versions are swapped underneath.
func TestConcurrentDecisionsDuringReload(t *testing.T) {
	dir := t.TempDir()
	e := newTestEngine(t, Options{Dir: dir})
	ctx := context.Background()
	stop := make(chan struct{})
	var once sync.Once
	stopWorkers := func() { once.Do(func() { close(stop) }) }
	t.Cleanup(stopWorkers) // also when a t.Fatal below cuts the test short
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				d := e.Access(ctx, memberCreate)
				if d.Cause != nil || (!d.Allow && d.Code != "OPS::FREEZE") {
					errs <- fmt.Errorf("decision during reload: %+v", d)
					return
				}
			}
		}()
	}
	for i := range 10 {
		if i%2 == 0 {
			writeFiles(t, dir, map[string]string{"freeze.rego": freezeModule})
		} else if err := os.Remove(filepath.Join(dir, "freeze.rego")); err != nil {
			t.Fatal(err)
		}
		if err := e.Reload(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stopWorkers()
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestExplainUsesVersionInForce(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"freeze.rego": freezeModule})
	e := newTestEngine(t, Options{Dir: dir})
	// A broken edit on disk, not yet (and never) in force.
	writeFiles(t, dir, map[string]string{"freeze.rego": "package sandgate.access\n\ndeny contains"})
	input, _ := json.Marshal(memberCreate)
	raw, _, err := e.Explain(context.Background(), AccessQuery+".code", input)
	if err != nil {
		t.Fatalf("Explain: %v", err)
	}
	if !strings.Contains(string(raw), "OPS::FREEZE") {
		t.Errorf("Explain result %s, want the version in force (OPS::FREEZE)", raw)
	}
}

func TestPlatformDataFilesValidated(t *testing.T) {
	tests := []struct {
		name, file string
		wantErr    string
	}{
		{"bad target", "always_allow: [\"http://pypi.org\"]\n", "always_allow[0]"},
		{"not a list", "always_deny: evil.example\n", "always_deny must be a list"},
		{"bad max_rules", "max_rules: 0\n", "max_rules"},
		{"bad default", "default_action: maybe\n", "default_action"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"sandgate/platform/p.yaml": tt.file})
			_, err := New(context.Background(), Options{Dir: dir, Logger: quietLogger()})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New = %v, want an error about %s", err, tt.wantErr)
			}
		})
	}
	t.Run("max_rules from a file", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"sandgate/platform/p.json": `{"max_rules": 1}`})
		e := newTestEngine(t, Options{Dir: dir})
		_, d := e.Egress(context.Background(), EgressInput{NetworkPolicy: &NetworkPolicy{Egress: []EgressRule{{"allow", "a.com"}, {"allow", "b.com"}}}})
		if d.Allow || d.Code != CodeInvalidEgress {
			t.Fatalf("two rules with max_rules 1: %+v", d)
		}
	})
}
