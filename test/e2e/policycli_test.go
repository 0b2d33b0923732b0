package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// policyCLI runs `sandgate policy args…` with stdin and returns stdout, stderr and the
// exit code.
func policyCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "sandgate"), append([]string{"policy"}, args...)...)
	cmd.Dir = t.TempDir()
	// The operator directory must come from the arguments alone.
	cmd.Env = append(os.Environ(), "SANDGATE_POLICY_DIR=")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	default:
		t.Fatalf("run sandgate policy %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// TestPolicyCLI drives `sandgate policy test` and `sandgate policy eval` as a policy
// author would: the default policy passes its own tests, an operator test that fails
// makes the command fail, and one access input evaluates to the default decision.
func TestPolicyCLI(t *testing.T) {
	failingDir := t.TempDir()
	// A viewer is read-only in the default policy, so this operator test must fail.
	writePolicyFile(t, filepath.Join(failingDir, "ops_test.rego"), `package sandgate.ops_test

import data.sandgate.access

test_viewer_may_create if {
	access.decision.allow with input as {
		"principal": {"kind": "api_key", "id": "k1", "tenant": "t1", "role": "viewer"},
		"tenant": "t1", "action": "sandbox.create",
		"resource": {"kind": "sandbox", "tenant": "t1"},
		"request": {"method": "POST", "path": "/v1/sandboxes"},
	}
}
`)
	passingDir := t.TempDir()
	writePolicyFile(t, filepath.Join(passingDir, "ops_test.rego"), `package sandgate.ops_test

import data.sandgate.access

test_viewer_may_not_create if {
	not access.decision.allow with input as {
		"principal": {"kind": "api_key", "id": "k1", "tenant": "t1", "role": "viewer"},
		"tenant": "t1", "action": "sandbox.create",
		"resource": {"kind": "sandbox", "tenant": "t1"},
		"request": {"method": "POST", "path": "/v1/sandboxes"},
	}
}
`)
	brokenDir := t.TempDir()
	writePolicyFile(t, filepath.Join(brokenDir, "broken.rego"), "package sandgate.ops\n\nallow if {\n")

	t.Run("test", func(t *testing.T) {
		for _, tt := range []struct {
			name     string
			args     []string
			wantCode int
			wantOut  []string
		}{
			{name: "default policy passes", args: []string{"test"}, wantCode: 0, wantOut: []string{"PASS: "}},
			{name: "operator test that passes", args: []string{"test", passingDir}, wantCode: 0, wantOut: []string{"test_viewer_may_not_create: PASS"}},
			{name: "operator test that fails", args: []string{"test", failingDir}, wantCode: 1, wantOut: []string{"test_viewer_may_create: FAIL"}},
			{name: "policy that does not compile", args: []string{"test", brokenDir}, wantCode: 1},
		} {
			t.Run(tt.name, func(t *testing.T) {
				stdout, stderr, code := policyCLI(t, "", tt.args...)
				if code != tt.wantCode {
					t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, tail(stdout, 4000), stderr)
				}
				for _, want := range tt.wantOut {
					if !strings.Contains(stdout, want) {
						t.Errorf("stdout lacks %q:\n%s", want, tail(stdout, 4000))
					}
				}
			})
		}
	})

	t.Run("eval", func(t *testing.T) {
		accessInput := func(role, action string) string {
			b, _ := json.Marshal(map[string]any{
				"principal": map[string]any{"kind": "api_key", "id": "k1", "tenant": "t1", "role": role},
				"tenant":    "t1", "action": action,
				"resource": map[string]any{"kind": "sandbox", "id": "sb-1", "tenant": "t1"},
				"request":  map[string]any{"method": "GET", "path": "/v1/sandboxes/sb-1"},
			})
			return string(b)
		}
		inputFile := filepath.Join(t.TempDir(), "input.json")
		writePolicyFile(t, inputFile, accessInput("viewer", "sandbox.delete"))
		for _, tt := range []struct {
			name      string
			stdin     string
			args      []string
			wantCode  int
			wantAllow any // nil: no result to check
		}{
			{name: "viewer reads from stdin", stdin: accessInput("viewer", "sandbox.get"),
				args: []string{"eval", "--query", "data.sandgate.access.decision", "--input", "-"}, wantAllow: true},
			{name: "viewer deletes from a file", args: []string{"eval", "--query", "data.sandgate.access.decision", "--input", inputFile}, wantAllow: false},
			{name: "query that does not parse", args: []string{"eval", "--query", "data.sandgate.access.decision[", "--input", inputFile}, wantCode: 1},
			{name: "input that is not JSON", stdin: "{not json", args: []string{"eval", "--query", "data.sandgate.access.decision", "--input", "-"}, wantCode: 1},
			{name: "policy that does not compile", args: []string{"eval", "--dir", brokenDir, "--query", "data.sandgate.access.decision", "--input", inputFile}, wantCode: 1},
		} {
			t.Run(tt.name, func(t *testing.T) {
				stdout, stderr, code := policyCLI(t, tt.stdin, tt.args...)
				if code != tt.wantCode {
					t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout, stderr)
				}
				if tt.wantAllow == nil {
					return
				}
				var rs []struct {
					Expressions []struct {
						Value map[string]any `json:"value"`
					} `json:"expressions"`
				}
				if err := json.Unmarshal([]byte(stdout), &rs); err != nil || len(rs) != 1 || len(rs[0].Expressions) != 1 {
					t.Fatalf("result is not one expression (%v):\n%s", err, stdout)
				}
				if got := rs[0].Expressions[0].Value["allow"]; got != tt.wantAllow {
					t.Errorf("allow = %v, want %v; decision %v", got, tt.wantAllow, rs[0].Expressions[0].Value)
				}
			})
		}
	})
}

func writePolicyFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
