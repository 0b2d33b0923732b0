package agent_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate/sandbox-agent/agent"
)

func createSession(t testing.TB, a *testAgent, body any) string {
	t.Helper()
	var resp struct {
		SessionID string `json:"session_id"`
	}
	a.mustJSON(http.MethodPost, "/session", body, 200, &resp)
	if resp.SessionID == "" {
		t.Fatal("empty session_id")
	}
	return resp.SessionID
}

func TestSession(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	id := createSession(t, a, map[string]any{"cwd": dir})
	steps := []struct {
		name     string
		req      map[string]any
		stdout   []string
		stderr   []string
		wantExit string
	}{
		{"starts in cwd", map[string]any{"command": "pwd"}, []string{dir}, nil, ""},
		{"cd and export", map[string]any{"command": "cd sub && export COLOR=blue && greet() { echo hi $1; }"}, nil, nil, ""},
		{"state carries over", map[string]any{"command": "pwd; echo $COLOR; greet you"}, []string{filepath.Join(dir, "sub"), "blue", "hi you"}, nil, ""},
		{"output without newline", map[string]any{"command": "printf partial"}, []string{"partial"}, nil, ""},
		{"trailing empty line kept", map[string]any{"command": "printf 'a\\n\\n'"}, []string{"a", ""}, nil, ""},
		{"stderr and exit code", map[string]any{"command": "echo bad >&2; false"}, nil, []string{"bad"}, "1"},
		{"syntax error does not break the session", map[string]any{"command": "echo \"unterminated"}, nil, nil, "2"},
		{"still alive", map[string]any{"command": "echo alive"}, []string{"alive"}, nil, ""},
		{"stdin is empty", map[string]any{"command": "cat; echo after"}, []string{"after"}, nil, ""},
		{"per-run cwd", map[string]any{"command": "pwd", "cwd": other}, []string{other}, nil, ""},
		{"per-run cwd is restored", map[string]any{"command": "pwd"}, []string{filepath.Join(dir, "sub")}, nil, ""},
		{"missing per-run cwd", map[string]any{"command": "pwd", "cwd": "/no/such"}, nil, nil, "1"},
		{"timeout kills the run only", map[string]any{"command": "sleep 100", "timeout": 200}, nil, nil, "137"},
		{"alive after timeout", map[string]any{"command": "echo $COLOR"}, []string{"blue"}, nil, ""},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			a := a.with(t)
			events := a.runStream("/session/"+id+"/run", st.req)
			if events[0].Type != agent.EventInit {
				t.Fatalf("first event %+v", events[0])
			}
			if diff := cmp.Diff(st.stdout, texts(events, agent.EventStdout)); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if st.stderr != nil {
				if diff := cmp.Diff(st.stderr, texts(events, agent.EventStderr)); diff != "" {
					t.Errorf("stderr (-want +got):\n%s", diff)
				}
			}
			end := last(t, events)
			if st.wantExit == "" && end.Type != agent.EventComplete {
				t.Fatalf("last event %+v", end)
			}
			if st.wantExit != "" && (end.Type != agent.EventErr || end.Error.EValue != st.wantExit) {
				t.Fatalf("last event %+v (error %+v), want exit %s", end, end.Error, st.wantExit)
			}
		})
	}
	t.Run("exit ends the session", func(t *testing.T) {
		a := a.with(t)
		id := createSession(t, a, nil)
		events := a.runStream("/session/"+id+"/run", map[string]any{"command": "exit 4"})
		if end := last(t, events); end.Type != agent.EventErr {
			t.Fatalf("last event %+v", end)
		}
		a.wantError(http.MethodPost, "/session/"+id+"/run", map[string]any{"command": "true"}, 404, agent.CodeNotFound)
	})
	t.Run("delete", func(t *testing.T) {
		a := a.with(t)
		id := createSession(t, a, map[string]any{})
		a.mustJSON(http.MethodDelete, "/session/"+id, nil, 200, nil)
		a.wantError(http.MethodDelete, "/session/"+id, nil, 404, agent.CodeNotFound)
		a.wantError(http.MethodPost, "/session/"+id+"/run", map[string]any{"command": "true"}, 404, agent.CodeNotFound)
	})
	t.Run("errors", func(t *testing.T) {
		a := a.with(t)
		a.wantError(http.MethodPost, "/session", map[string]any{"cwd": "/no/such"}, 404, agent.CodeFileNotFound)
		a.wantError(http.MethodPost, "/session/"+id+"/run", map[string]any{}, 400, agent.CodeInvalidRequest)
	})
	t.Run("client disconnect stops the run", func(t *testing.T) {
		a := a.with(t)
		id := createSession(t, a, nil)
		stream := a.openStream("/session/"+id+"/run", map[string]any{"command": "sleep 100"})
		stream.next(t)
		stream.resp.Body.Close()
		start := time.Now()
		events := a.runStream("/session/"+id+"/run", map[string]any{"command": "echo next"})
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("next run waited %v", took)
		}
		if out := texts(events, agent.EventStdout); len(out) != 1 || out[0] != "next" {
			t.Fatalf("stdout %q", out)
		}
	})
}

func TestCodeBash(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	var c struct{ ID, Language string }
	a.mustJSON(http.MethodPost, "/code/context", map[string]any{"language": "bash"}, 200, &c)
	if c.ID == "" || c.Language != "bash" {
		t.Fatalf("context %+v", c)
	}
	events := a.runStream("/code", map[string]any{"context": map[string]any{"id": c.ID}, "code": "X=41; echo set"})
	if events[0].Type != agent.EventInit || events[0].Text != c.ID {
		t.Fatalf("init %+v", events[0])
	}
	events = a.runStream("/code", map[string]any{"context": map[string]any{"id": c.ID, "language": "bash"}, "code": "echo $((X+1))"})
	if out := texts(events, agent.EventStdout); len(out) != 1 || out[0] != "42" || last(t, events).Type != agent.EventComplete {
		t.Fatalf("events %+v", events)
	}
	// Another context is isolated.
	var other struct{ ID string }
	a.mustJSON(http.MethodPost, "/code/context", map[string]any{"language": "bash"}, 200, &other)
	events = a.runStream("/code", map[string]any{"context": map[string]any{"id": other.ID}, "code": "echo ${X:-unset}"})
	if out := texts(events, agent.EventStdout); len(out) != 1 || out[0] != "unset" {
		t.Fatalf("isolated context saw %q", out)
	}
	// Interrupt a running cell.
	stream := a.openStream("/code", map[string]any{"context": map[string]any{"id": c.ID}, "code": "sleep 100"})
	stream.next(t)
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	a.mustJSON(http.MethodDelete, "/code?id="+c.ID, nil, 200, nil)
	if end := last(t, stream.all(t)); end.Type != agent.EventErr {
		t.Fatalf("interrupted cell ended with %+v", end)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("interrupt took %v", took)
	}

	var list []struct{ ID, Language string }
	a.mustJSON(http.MethodGet, "/code/contexts?language=bash", nil, 200, &list)
	if len(list) != 2 {
		t.Fatalf("contexts %+v", list)
	}
	a.mustJSON(http.MethodGet, "/code/contexts?language=python", nil, 200, &list)
	if len(list) != 0 {
		t.Fatalf("python contexts %+v", list)
	}
	var got struct{ ID, Language string }
	a.mustJSON(http.MethodGet, "/code/contexts/"+c.ID, nil, 200, &got)
	if got.ID != c.ID || got.Language != "bash" {
		t.Fatalf("get context %+v", got)
	}
	a.mustJSON(http.MethodDelete, "/code/contexts/"+c.ID, nil, 200, nil)
	a.wantError(http.MethodGet, "/code/contexts/"+c.ID, nil, 404, agent.CodeContextNotFound)
	a.wantError(http.MethodDelete, "/code/contexts/"+c.ID, nil, 404, agent.CodeContextNotFound)
	a.wantError(http.MethodPost, "/code", map[string]any{"context": map[string]any{"id": c.ID}, "code": "true"}, 404, agent.CodeContextNotFound)
	a.mustJSON(http.MethodDelete, "/code/contexts?language=bash", nil, 200, nil)
	a.mustJSON(http.MethodGet, "/code/contexts?language=bash", nil, 200, &list)
	if len(list) != 0 {
		t.Fatalf("contexts after bulk delete %+v", list)
	}
	a.wantError(http.MethodDelete, "/code/contexts", nil, 400, agent.CodeMissingQuery)
	a.wantError(http.MethodPost, "/code", map[string]any{"context": map[string]any{"language": "bash"}}, 400, agent.CodeInvalidRequest)

	// Without a context id the language's default context is used, and it keeps state.
	a.runStream("/code", map[string]any{"context": map[string]any{"language": "bash"}, "code": "Y=7"})
	events = a.runStream("/code", map[string]any{"context": map[string]any{"language": "bash"}, "code": "echo $Y"})
	if out := texts(events, agent.EventStdout); len(out) != 1 || out[0] != "7" {
		t.Fatalf("default context output %q", out)
	}
}

// TestCodePythonWithoutJupyter runs where the agent's Python lacks Jupyter (this host's
// test environment) and expects a clear NOT_SUPPORTED; the Docker test covers Jupyter.
func TestCodePythonWithoutJupyter(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	status, body := a.do(http.MethodPost, "/code/context", map[string]any{"language": "python"})
	if status == 200 {
		t.Skip("this environment has Jupyter; covered by the Docker test")
	}
	if status != http.StatusNotImplemented || !contains(body, agent.CodeNotSupported) {
		t.Fatalf("status %d body %s", status, body)
	}
	a.wantError(http.MethodPost, "/code", map[string]any{"code": "1+1"}, http.StatusNotImplemented, agent.CodeNotSupported)
}
