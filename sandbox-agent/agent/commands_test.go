package agent_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate/sandbox-agent/agent"
	"github.com/sandgate/sandgate/sandbox-agent/initproc"
	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

func TestAuth(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	tests := []struct {
		name   string
		header []string
		want   int
	}{
		{"missing", nil, http.StatusUnauthorized},
		{"wrong", []string{"nope"}, http.StatusUnauthorized},
		{"prefix of the token", []string{testToken[:4]}, http.StatusUnauthorized},
		{"right", []string{testToken}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{"/ping", "/metrics", "/files/info?path=/"} {
				req, _ := http.NewRequest(http.MethodGet, a.url(path), nil)
				if tt.header != nil {
					req.Header[agent.TokenHeader] = tt.header
				}
				resp, err := a.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tt.want {
					t.Fatalf("%s: status %d, want %d", path, resp.StatusCode, tt.want)
				}
				if tt.want == http.StatusUnauthorized && !strings.Contains(string(body), `"code":"UNAUTHORIZED"`) {
					t.Fatalf("%s: body %s", path, body)
				}
			}
		})
	}
}

func TestCommandForeground(t *testing.T) {
	t.Setenv("SANDGATE_AGENT_TOKEN", "must-not-leak")
	a := newTestAgent(t, agent.Config{})
	dir := t.TempDir()
	tests := []struct {
		name       string
		req        map[string]any
		wantStdout []string
		wantStderr []string
		wantExit   string // "" = success
	}{
		{"lines", map[string]any{"command": "echo one; echo two"}, []string{"one", "two"}, nil, ""},
		{"crlf and no trailing newline", map[string]any{"command": `printf 'a\r\nb'`}, []string{"a", "b"}, nil, ""},
		{"stderr", map[string]any{"command": "echo oops >&2"}, nil, []string{"oops"}, ""},
		{"empty lines kept", map[string]any{"command": "printf 'x\\n\\ny\\n'"}, []string{"x", "", "y"}, nil, ""},
		{"exit code", map[string]any{"command": "echo before; exit 3"}, []string{"before"}, nil, "3"},
		{"cwd", map[string]any{"command": "pwd", "cwd": dir}, []string{dir}, nil, ""},
		{"envs", map[string]any{"command": "echo $GREETING", "envs": map[string]string{"GREETING": "hello world"}}, []string{"hello world"}, nil, ""},
		{"sandgate variables scrubbed", map[string]any{"command": "echo ${SANDGATE_AGENT_TOKEN:-unset}", "envs": map[string]string{"SANDGATE_X": "1"}}, []string{"unset"}, nil, ""},
		{"unicode", map[string]any{"command": "echo 'héllo 世界'"}, []string{"héllo 世界"}, nil, ""},
		{"killed by signal", map[string]any{"command": "kill -9 $$"}, nil, nil, "137"},
		{"argv literal", map[string]any{"argv": []string{"printf", "%s|", "a b", "$HOME", "*", "; echo x"}}, []string{"a b|$HOME|*|; echo x|"}, nil, ""},
		{"argv exit code", map[string]any{"argv": []string{"sh", "-c", "exit 5"}}, nil, nil, "5"},
		{"argv path from the request's PATH", map[string]any{"argv": []string{"printenv", "ONLY_HERE"}, "envs": map[string]string{"ONLY_HERE": "yes"}}, []string{"yes"}, nil, ""},
		{"argv relative to cwd", map[string]any{"argv": []string{"./run.sh"}, "cwd": dir}, []string{"ran"}, nil, ""},
	}
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := a.with(t)
			events := a.runStream("/command", tt.req)
			if events[0].Type != agent.EventInit || events[0].Text == "" {
				t.Fatalf("first event %+v, want init with the command id", events[0])
			}
			if diff := cmp.Diff(tt.wantStdout, texts(events, agent.EventStdout)); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantStderr, texts(events, agent.EventStderr)); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
			end := last(t, events)
			if tt.wantExit == "" {
				if end.Type != agent.EventComplete {
					t.Fatalf("last event %+v, want execution_complete", end)
				}
				return
			}
			if end.Type != agent.EventErr || end.Error == nil || end.Error.EName != "CommandExecError" || end.Error.EValue != tt.wantExit {
				t.Fatalf("last event %+v, want CommandExecError %s", end, tt.wantExit)
			}
		})
	}
}

func TestCommandErrors(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	tests := []struct {
		name   string
		method string
		path   string
		body   any
		status int
		code   string
	}{
		{"missing command", http.MethodPost, "/command", map[string]any{}, 400, agent.CodeInvalidRequest},
		{"command and argv", http.MethodPost, "/command", map[string]any{"command": "true", "argv": []string{"true"}}, 400, agent.CodeInvalidRequest},
		{"empty argv", http.MethodPost, "/command", map[string]any{"argv": []string{}}, 400, agent.CodeInvalidRequest},
		{"empty argv[0]", http.MethodPost, "/command", map[string]any{"argv": []string{""}}, 400, agent.CodeInvalidRequest},
		{"NUL in argv", http.MethodPost, "/command", map[string]any{"argv": []string{"echo", "a\x00b"}}, 400, agent.CodeInvalidRequest},
		{"argv program not found", http.MethodPost, "/command", map[string]any{"argv": []string{"no-such-program-here"}}, 400, agent.CodeInvalidRequest},
		{"argv program not on a relative PATH", http.MethodPost, "/command", map[string]any{"argv": []string{"run.sh"}, "envs": map[string]string{"PATH": "."}}, 400, agent.CodeInvalidRequest},
		{"bad json", http.MethodPost, "/command", "not an object", 400, agent.CodeInvalidRequest},
		{"missing cwd", http.MethodPost, "/command", map[string]any{"command": "true", "cwd": "/no/such/dir"}, 404, agent.CodeFileNotFound},
		{"unknown status", http.MethodGet, "/command/status/nope", nil, 404, agent.CodeNotFound},
		{"unknown logs", http.MethodGet, "/command/nope/logs", nil, 404, agent.CodeNotFound},
		{"interrupt without id", http.MethodDelete, "/command", nil, 400, agent.CodeMissingQuery},
		{"interrupt unknown", http.MethodDelete, "/command?id=nope", nil, 404, agent.CodeNotFound},
		{"unknown endpoint", http.MethodGet, "/nope", nil, 404, agent.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := a.with(t)
			a.wantError(tt.method, tt.path, tt.body, tt.status, tt.code)
		})
	}
}

// TestCommandStreamEndsWithCommand checks that a grandchild holding the output pipe
// open does not keep the stream open.
func TestCommandStreamEndsWithCommand(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	start := time.Now()
	events := a.runStream("/command", map[string]any{"command": "sleep 3 & echo started"})
	if took := time.Since(start); took > time.Second {
		t.Fatalf("stream took %v to close after the command exited", took)
	}
	if got := texts(events, agent.EventStdout); len(got) != 1 || got[0] != "started" {
		t.Fatalf("stdout %q", got)
	}
}

func TestCommandBackground(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	start := time.Now()
	events := a.runStream("/command", map[string]any{
		"command": "for i in 1 2 3 4 5; do echo line$i; done; echo err >&2; sleep 0.3; printf tail", "background": true,
	})
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Fatalf("background stream took %v", took)
	}
	if len(events) != 2 || events[0].Type != agent.EventInit || events[1].Type != agent.EventComplete {
		t.Fatalf("events %+v, want init then execution_complete", events)
	}
	id := events[0].Text

	var st struct {
		ID       string `json:"id"`
		Content  string `json:"content"`
		Running  bool   `json:"running"`
		ExitCode *int   `json:"exit_code"`
	}
	a.mustJSON(http.MethodGet, "/command/status/"+id, nil, 200, &st)
	if st.ID != id || !strings.HasPrefix(st.Content, "for i in") {
		t.Fatalf("status %+v", st)
	}
	// While it runs, only complete lines are returned.
	eventually(t, 2*time.Second, "first lines", func() bool {
		body, _ := logs(t, a, id, "")
		return strings.Contains(body, "err\n")
	})
	eventually(t, 5*time.Second, "command to finish", func() bool {
		a.mustJSON(http.MethodGet, "/command/status/"+id, nil, 200, &st)
		return !st.Running
	})
	if st.ExitCode == nil || *st.ExitCode != 0 {
		t.Fatalf("exit code %v", st.ExitCode)
	}
	tests := []struct {
		cursor     string
		want       string
		wantCursor string
	}{
		{"", "line1\nline2\nline3\nline4\nline5\nerr\ntail", "7"},
		{"0", "line1\nline2\nline3\nline4\nline5\nerr\ntail", "7"},
		{"2", "line3\nline4\nline5\nerr\ntail", "7"},
		{"6", "tail", "7"},
		{"7", "", "7"},
		{"100", "", "7"},
	}
	for _, tt := range tests {
		t.Run("cursor="+tt.cursor, func(t *testing.T) {
			body, next := logs(t, a, id, tt.cursor)
			if body != tt.want || next != tt.wantCursor {
				t.Fatalf("logs(%s) = %q, cursor %s; want %q, cursor %s", tt.cursor, body, next, tt.want, tt.wantCursor)
			}
		})
	}
	a.wantError(http.MethodGet, "/command/"+id+"/logs?cursor=-1", nil, 400, agent.CodeInvalidRequest)
}

func logs(t testing.TB, a *testAgent, id, cursor string) (string, string) {
	t.Helper()
	path := "/command/" + id + "/logs"
	if cursor != "" {
		path += "?cursor=" + cursor
	}
	resp := a.request(http.MethodGet, path, nil, nil)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("logs: %d %s", resp.StatusCode, b)
	}
	return string(b), resp.Header.Get("EXECD-COMMANDS-TAIL-CURSOR")
}

// TestCommandLogsFollow polls a running command with the cursor it is given and must
// see every line exactly once.
func TestCommandLogsFollow(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	events := a.runStream("/command", map[string]any{"command": "for i in $(seq 1 200); do echo n$i; sleep 0.002; done", "background": true})
	id := events[0].Text
	var got strings.Builder
	cursor := "0"
	var st struct{ Running bool }
	for {
		a.mustJSON(http.MethodGet, "/command/status/"+id, nil, 200, &st)
		body, next := logs(t, a, id, cursor)
		got.WriteString(body)
		cursor = next
		if !st.Running {
			body, _ := logs(t, a, id, cursor)
			got.WriteString(body)
			break
		}
		time.Sleep(15 * time.Millisecond)
	}
	var want strings.Builder
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&want, "n%d\n", i)
	}
	if got.String() != want.String() {
		t.Fatalf("followed logs differ:\n%s", got.String())
	}
	if cursor != "200" {
		t.Fatalf("final cursor %s", cursor)
	}
}

func TestCommandInterrupt(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	t.Run("foreground", func(t *testing.T) {
		a := a.with(t)
		stream := a.openStream("/command", map[string]any{"command": "sleep 100"})
		init, _ := stream.next(t)
		start := time.Now()
		a.mustJSON(http.MethodDelete, "/command?id="+init.Text, nil, 200, nil)
		rest := stream.all(t)
		if took := time.Since(start); took > time.Second {
			t.Fatalf("interrupt took %v", took)
		}
		end := last(t, rest)
		if end.Type != agent.EventErr || end.Error.EName != "CommandExecError" {
			t.Fatalf("last event %+v, want an error", end)
		}
	})
	t.Run("background group", func(t *testing.T) {
		a := a.with(t)
		// The child ignores SIGTERM: the group is killed after the grace period.
		events := a.runStream("/command", map[string]any{"command": "trap '' TERM; sleep 100 & sleep 100; wait", "background": true})
		id := events[0].Text
		start := time.Now()
		a.mustJSON(http.MethodDelete, "/command?id="+id, nil, 200, nil)
		var st struct {
			Running  bool
			ExitCode *int `json:"exit_code"`
		}
		eventually(t, time.Second, "background command to stop", func() bool {
			a.mustJSON(http.MethodGet, "/command/status/"+id, nil, 200, &st)
			return !st.Running
		})
		if took := time.Since(start); took > time.Second {
			t.Fatalf("interrupt took %v", took)
		}
		if st.ExitCode == nil || *st.ExitCode == 0 {
			t.Fatalf("exit code %v", st.ExitCode)
		}
	})
}

func TestCommandTimeout(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	start := time.Now()
	events := a.runStream("/command", map[string]any{"command": "echo begin; sleep 100", "timeout": 300})
	took := time.Since(start)
	if took < 300*time.Millisecond || took > 1500*time.Millisecond {
		t.Fatalf("timeout took %v", took)
	}
	end := last(t, events)
	if end.Type != agent.EventErr || end.Error.EValue != "137" {
		t.Fatalf("last event %+v", end)
	}
	var st struct{ Error string }
	a.mustJSON(http.MethodGet, "/command/status/"+events[0].Text, nil, 200, &st)
	if !strings.Contains(st.Error, "timed out") {
		t.Fatalf("status error %q", st.Error)
	}
}

func TestCommandPing(t *testing.T) {
	a := newTestAgent(t, agent.Config{PingInterval: 100 * time.Millisecond})
	events := a.runStream("/command", map[string]any{"command": "sleep 0.5; echo done"})
	pings := 0
	for _, ev := range events {
		if ev.Type == agent.EventPing {
			pings++
		}
	}
	if pings == 0 {
		t.Fatalf("no ping during a silent command: %+v", events)
	}
}

// TestCommandLargeOutput streams 50 MB and checks that every line arrives, in order.
func TestCommandLargeOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("large output")
	}
	a := newTestAgent(t, agent.Config{})
	const lines = 50000 // 50000 lines of 1000 bytes = 50 MB
	t.Run("foreground", func(t *testing.T) {
		a := a.with(t)
		stream := a.openStream("/command", map[string]any{"command": fmt.Sprintf("seq -f '%%0999.0f' 1 %d", lines)})
		n := 0
		total := 0
		for {
			ev, ok := stream.next(t)
			if !ok {
				break
			}
			if ev.Type != agent.EventStdout {
				continue
			}
			n++
			total += len(ev.Text) + 1
			v, err := strconv.Atoi(strings.TrimLeft(ev.Text, "0"))
			if err != nil || v != n || len(ev.Text) != 999 {
				t.Fatalf("line %d: %q", n, ev.Text[:min(len(ev.Text), 40)])
			}
		}
		if n != lines || total != lines*1000 {
			t.Fatalf("got %d lines, %d bytes", n, total)
		}
	})
	t.Run("background kept in a file", func(t *testing.T) {
		a := a.with(t)
		events := a.runStream("/command", map[string]any{"command": fmt.Sprintf("seq -f '%%0999.0f' 1 %d", lines), "background": true})
		id := events[0].Text
		var st struct{ Running bool }
		eventually(t, 30*time.Second, "command to finish", func() bool {
			a.mustJSON(http.MethodGet, "/command/status/"+id, nil, 200, &st)
			return !st.Running
		})
		resp := a.request(http.MethodGet, "/command/"+id+"/logs", nil, nil)
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n != lines*1000 || resp.Header.Get("EXECD-COMMANDS-TAIL-CURSOR") != strconv.Itoa(lines) {
			t.Fatalf("logs: %d bytes, cursor %s", n, resp.Header.Get("EXECD-COMMANDS-TAIL-CURSOR"))
		}
	})
}

func TestCommandUIDGID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	a := newTestAgent(t, agent.Config{})
	// t.TempDir's parent is private to root; other users need a path they can enter.
	dir, err := os.MkdirTemp("", "agent-uid-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		uid  *int
		gid  *int
		want []string
	}{
		{"uid and gid", ptr(65534), ptr(65533), []string{"65534", "65533"}},
		{"gid only", nil, ptr(123), []string{"0", "123"}},
		{"uid only uses the user's group", ptr(65534), nil, []string{"65534", "65534"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := a.with(t)
			file := filepath.Join(dir, strings.NewReplacer(" ", "_", "'", "").Replace(tt.name))
			req := map[string]any{"command": "id -u; id -g; touch " + file, "cwd": dir}
			if tt.uid != nil {
				req["uid"] = *tt.uid
			}
			if tt.gid != nil {
				req["gid"] = *tt.gid
			}
			events := a.runStream("/command", req)
			if diff := cmp.Diff(tt.want, texts(events, agent.EventStdout)); diff != "" {
				t.Fatalf("id (-want +got):\n%s\n%+v", diff, events)
			}
			fi, err := os.Stat(file)
			if err != nil {
				t.Fatal(err)
			}
			if uid := strconv.Itoa(int(fileUID(fi))); uid != tt.want[0] {
				t.Fatalf("file owner %s", uid)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestEnvExtension(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	a.mustJSON(http.MethodPut, "/sandgate/env", map[string]any{"envs": map[string]string{"POOL_VAR": "claimed", "SANDGATE_SECRET": "no"}}, 200, nil)
	var got struct{ Envs map[string]string }
	a.mustJSON(http.MethodGet, "/sandgate/env", nil, 200, &got)
	if diff := cmp.Diff(map[string]string{"POOL_VAR": "claimed"}, got.Envs); diff != "" {
		t.Fatalf("env (-want +got):\n%s", diff)
	}
	events := a.runStream("/command", map[string]any{"command": "echo $POOL_VAR ${SANDGATE_SECRET:-none}"})
	if out := texts(events, agent.EventStdout); len(out) != 1 || out[0] != "claimed none" {
		t.Fatalf("command output %q", out)
	}
	var sess struct {
		SessionID string `json:"session_id"`
	}
	a.mustJSON(http.MethodPost, "/session", map[string]any{}, 200, &sess)
	events = a.runStream("/session/"+sess.SessionID+"/run", map[string]any{"command": "echo $POOL_VAR"})
	if out := texts(events, agent.EventStdout); len(out) != 1 || out[0] != "claimed" {
		t.Fatalf("session output %q", out)
	}
}

func TestEntrypointExtension(t *testing.T) {
	t.Run("not managed", func(t *testing.T) {
		a := newTestAgent(t, agent.Config{})
		a.wantError(http.MethodPost, "/sandgate/entrypoint", map[string]any{"entrypoint": []string{"true"}}, 501, agent.CodeNotSupported)
	})
	t.Run("started", func(t *testing.T) {
		env := procs.NewEnvironment()
		started := make(chan []string, 1)
		a := newTestAgent(t, agent.Config{Env: env, StartEntrypoint: func(argv []string) error {
			started <- argv
			return nil
		}})
		a.wantError(http.MethodPost, "/sandgate/entrypoint", map[string]any{"entrypoint": []string{}}, 400, agent.CodeInvalidRequest)
		a.mustJSON(http.MethodPost, "/sandgate/entrypoint", map[string]any{"entrypoint": []string{"sleep", "1"}}, 200, nil)
		if got := <-started; !cmp.Equal(got, []string{"sleep", "1"}) {
			t.Fatalf("started %q", got)
		}
	})
	t.Run("start marker written once started", func(t *testing.T) {
		fail := errors.New("no such file")
		a := newTestAgent(t, agent.Config{StartEntrypoint: func(argv []string) error {
			if argv[0] == "missing" {
				return fail
			}
			return nil
		}})
		marker := filepath.Join(t.TempDir(), "started")
		a.wantError(http.MethodPost, "/sandgate/entrypoint", map[string]any{"entrypoint": []string{"missing"}, "startedMarker": marker}, 400, agent.CodeInvalidRequest)
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Fatalf("marker after a failed start: %v", err)
		}
		a.mustJSON(http.MethodPost, "/sandgate/entrypoint", map[string]any{"entrypoint": []string{"sleep", "1"}, "startedMarker": marker}, 200, nil)
		if fi, err := os.Stat(marker); err != nil || fi.Size() != 0 {
			t.Fatalf("marker after the start: %v", err)
		}
	})
	t.Run("settle: an exit is reported, without a start marker", func(t *testing.T) {
		// The real supervisor: these are real processes.
		sup := initproc.NewSupervisor(procs.NewEnvironment())
		a := newTestAgent(t, agent.Config{StartEntrypoint: sup.Start, SettleEntrypoint: sup.Settle})
		marker := filepath.Join(t.TempDir(), "started")
		a.wantError(http.MethodPost, "/sandgate/entrypoint", map[string]any{"entrypoint": []string{"true"}, "settleMillis": -1}, 400, agent.CodeInvalidRequest)
		a.wantError(http.MethodPost, "/sandgate/entrypoint", map[string]any{"entrypoint": []string{"true"}, "settleMillis": 3_600_000}, 400, agent.CodeInvalidRequest)
		var got struct {
			Exited   bool `json:"exited"`
			ExitCode int  `json:"exitCode"`
			Settled  bool `json:"settled"`
		}
		a.mustJSON(http.MethodPost, "/sandgate/entrypoint", map[string]any{"entrypoint": []string{"sh", "-c", "exit 7"}, "startedMarker": marker, "settleMillis": 10_000}, 200, &got)
		<-sup.Exited()
		if !got.Exited || got.ExitCode != 7 || got.Settled {
			t.Fatalf("answer for an entrypoint that exits at once: %+v", got)
		}
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Fatalf("start marker for an entrypoint that exited: %v", err)
		}
		got.Exited, got.ExitCode = false, 0
		a.mustJSON(http.MethodPost, "/sandgate/entrypoint", map[string]any{"entrypoint": []string{"sleep", "30"}, "startedMarker": marker, "settleMillis": 10_000}, 200, &got)
		t.Cleanup(func() { sup.Signal(syscall.SIGKILL); <-sup.Exited() })
		if got.Exited || !got.Settled {
			t.Fatalf("answer for an entrypoint that runs: %+v", got)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Fatalf("no start marker for an entrypoint that runs: %v", err)
		}
	})
}

// TestCommandPlainProgram runs plain program invocations, which the agent execs without
// the shell when it can (directexec.go), next to the same command with its first
// character escaped, which bash reads the same but the agent leaves to bash: output,
// stderr and exit code must match, the lookup's failures included.
func TestCommandPlainProgram(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	// t.TempDir's parent is private to root; other users need a path they can enter.
	bin, err := os.MkdirTemp("", "agent-bin-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(bin, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("no-shebang", "echo from a script without a shebang line; exit 4\n", 0o755)
	write("not-executable", "#!/bin/sh\necho ran\n", 0o644)
	write("owner-only", "#!/bin/sh\necho ran as $(id -u)\n", 0o744)
	write("args", "#!/bin/sh\nprintf '%s|' \"$0\" \"$@\"; echo; echo err >&2; exit 5\n", 0o755)
	if err := os.Mkdir(filepath.Join(bin, "a-directory"), 0o755); err != nil {
		t.Fatal(err)
	}
	envs := map[string]string{"PATH": bin + ":/usr/bin:/bin"}
	tests := []struct {
		name    string
		command string
		uid     *int
	}{
		{"true", "true", nil},
		{"false", "false", nil},
		{"program with arguments", "args one --two=2 +%s", nil},
		{"program by path", filepath.Join(bin, "args") + " x", nil},
		{"program exit code and stderr", "ls /no/such/file", nil},
		{"env", "env", nil},
		{"script without a shebang line", "no-shebang", nil},
		{"missing command", "no-such-command-anywhere", nil},
		{"missing path", "/no/such/program", nil},
		{"not executable", "not-executable", nil},
		{"not executable by path", filepath.Join(bin, "not-executable"), nil},
		{"directory", filepath.Join(bin, "a-directory"), nil},
		{"as a user", "id -u", ptr(65534)},
		{"as a user who may not run it", "owner-only", ptr(65534)},
		{"as root who may", "owner-only", ptr(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.uid != nil && os.Geteuid() != 0 {
				t.Skip("needs root to switch users")
			}
			a := a.with(t)
			type outcome struct {
				Stdout, Stderr []string
				End            string
			}
			runOne := func(command string) outcome {
				req := map[string]any{"command": command, "envs": envs}
				if tt.uid != nil {
					req["uid"] = *tt.uid
				}
				events := a.runStream("/command", req)
				o := outcome{Stdout: texts(events, agent.EventStdout), Stderr: texts(events, agent.EventStderr)}
				end := last(t, events)
				o.End = end.Type
				if end.Error != nil {
					o.End += " " + end.Error.EName + " " + end.Error.EValue
				}
				if tt.command == "env" {
					sort.Strings(o.Stdout)
				}
				return o
			}
			direct, shell := runOne(tt.command), runOne(`\`+tt.command)
			if diff := cmp.Diff(shell, direct); diff != "" {
				t.Fatalf("%q (+) differs from the shell's (-):\n%s", tt.command, diff)
			}
		})
	}
}

// TestEnvFileReachesLaterCommands appends to $EXECD_ENVS the way the SDKs' set_env
// does and checks that later commands get it and that request envs override it.
func TestEnvFileReachesLaterCommands(t *testing.T) {
	t.Setenv("EXECD_ENVS", "")
	a := newTestAgent(t, agent.Config{})
	set := `test -n "$EXECD_ENVS" && mkdir -p "$(dirname "$EXECD_ENVS")" && printf '%s\n' "SET_LATER='a b \$HOME'" 'QUOTED="x\ty"' >> "$EXECD_ENVS"`
	if end := last(t, a.runStream("/command", map[string]any{"command": set})); end.Type != agent.EventComplete {
		t.Fatalf("append: %+v", end)
	}
	events := a.runStream("/command", map[string]any{"command": `printf '%s|%s\n' "$SET_LATER" "$QUOTED"`})
	if diff := cmp.Diff([]string{"a b $HOME|x\ty"}, texts(events, agent.EventStdout)); diff != "" {
		t.Errorf("later command (-want +got):\n%s", diff)
	}
	events = a.runStream("/command", map[string]any{"argv": []string{"printenv", "SET_LATER"}, "envs": map[string]string{"SET_LATER": "request"}})
	if diff := cmp.Diff([]string{"request"}, texts(events, agent.EventStdout)); diff != "" {
		t.Errorf("request envs over the file (-want +got):\n%s", diff)
	}
}
