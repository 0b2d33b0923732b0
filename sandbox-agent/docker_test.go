package main

// These tests run the static agent in real containers of sandgate/code-interpreter
// (built by images/code-interpreter.sh). They talk to each container on its bridge
// address, which only the test's own container answers. They skip only when no Docker
// daemon answers.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	testImage   = "sandgate/code-interpreter:0.1.0"
	dockerToken = "docker-test-token"
)

var (
	agentOnce sync.Once
	agentDir  string
	agentErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if agentDir != "" {
		os.RemoveAll(agentDir)
	}
	os.Exit(code)
}

func docker(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// requireDocker skips without a Docker daemon, and makes sure the image and a static
// agent binary exist.
func requireDocker(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("docker tests are not short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := docker(ctx, "version", "--format", "{{.Server.Version}}"); err != nil {
		t.Skipf("no docker daemon answers: %v", err)
	}
	if _, err := docker(ctx, "image", "inspect", testImage); err != nil {
		build := exec.Command("bash", "../images/code-interpreter.sh", "0.1.0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			t.Fatalf("build %s: %v", testImage, err)
		}
	}
	agentOnce.Do(func() {
		agentDir, agentErr = os.MkdirTemp("", "sandbox-agent-bin-*")
		if agentErr != nil {
			return
		}
		_ = os.Chmod(agentDir, 0o755)
		cmd := exec.Command("go", "build", "-o", filepath.Join(agentDir, "sandbox-agent"), ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("build static agent: %v: %s", err, out)
		}
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return agentDir
}

// container is one running test container.
type container struct {
	id   string
	base string // http://ip:44772
}

// startContainer runs the agent as PID 1 with the given entrypoint; the container is
// removed when the test ends.
func startContainer(t testing.TB, bin string, entrypoint ...string) *container {
	t.Helper()
	return startContainerWith(t, bin, nil, entrypoint...)
}

// startContainerWith is startContainer with extra `docker run` options.
func startContainerWith(t testing.TB, bin string, dockerArgs []string, entrypoint ...string) *container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"run", "-d", "--label", "sandgate.test=sandbox-agent",
		"-v", bin + ":/sandgate:ro", "-e", "SANDGATE_AGENT_TOKEN=" + dockerToken}
	args = append(args, dockerArgs...)
	args = append(args, testImage, "/sandgate/sandbox-agent", "init", "--")
	id, err := docker(ctx, append(args, entrypoint...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := docker(ctx, "rm", "-f", "-v", id); err != nil {
			t.Errorf("remove container: %v", err)
		}
	})
	ip, err := docker(ctx, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", id)
	if err != nil {
		t.Fatal(err)
	}
	return &container{id: id, base: "http://" + ip + ":44772"}
}

// waitExit waits for the container to stop and returns its exit code.
func (c *container) waitExit(t testing.TB, timeout time.Duration) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := docker(ctx, "wait", c.id)
	if err != nil {
		t.Fatal(err)
	}
	var code int
	fmt.Sscan(out, &code)
	return code
}

func (c *container) logs(t testing.TB) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "logs", c.id)
	out, _ := cmd.CombinedOutput()
	return string(out)
}

func (c *container) request(t testing.TB, method, path string, body any) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	req.Header.Set("X-EXECD-ACCESS-TOKEN", dockerToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

func (c *container) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, c.base+"/ping", nil)
		req.Header.Set("X-EXECD-ACCESS-TOKEN", dockerToken)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent never answered /ping: %v\n%s", err, c.logs(t))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type event struct {
	Type           string         `json:"type"`
	Text           string         `json:"text"`
	ExecutionCount int            `json:"execution_count"`
	Results        map[string]any `json:"results"`
	Error          *struct {
		EName     string   `json:"ename"`
		EValue    string   `json:"evalue"`
		Traceback []string `json:"traceback"`
	} `json:"error"`
}

// stream posts body and returns a channel of its events, closed at the end of the
// stream.
func (c *container) stream(t testing.TB, path string, body any) <-chan event {
	t.Helper()
	resp := c.request(t, http.MethodPost, path, body)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
	}
	ch := make(chan event, 64)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			var ev event
			if json.Unmarshal(line, &ev) == nil && ev.Type != "ping" {
				ch <- ev
			}
		}
	}()
	return ch
}

func collect(ch <-chan event) []event {
	var out []event
	for ev := range ch {
		out = append(out, ev)
	}
	return out
}

func (c *container) runCode(t testing.TB, contextID, code string) []event {
	t.Helper()
	return collect(c.stream(t, "/code", map[string]any{"context": map[string]any{"id": contextID}, "code": code}))
}

func (c *container) newContext(t testing.TB, language string) string {
	t.Helper()
	resp := c.request(t, http.MethodPost, "/code/context", map[string]any{"language": language})
	defer resp.Body.Close()
	var ctx struct{ ID, Language string }
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.Unmarshal(b, &ctx) != nil || ctx.ID == "" {
		t.Fatalf("create %s context: %d %s", language, resp.StatusCode, b)
	}
	return ctx.ID
}

func lastEvent(events []event) event {
	if len(events) == 0 {
		return event{}
	}
	return events[len(events)-1]
}

func TestDockerCodeInterpreter(t *testing.T) {
	bin := requireDocker(t)
	c := startContainer(t, bin, "sleep", "infinity")
	c.waitReady(t)
	first := c.newContext(t, "python")
	second := c.newContext(t, "python")

	t.Run("state kept in a context", func(t *testing.T) {
		c.runCode(t, first, "x = 41")
		events := c.runCode(t, first, "x + 1")
		var result string
		count := 0
		for _, ev := range events {
			if ev.Type == "result" {
				result, _ = ev.Results["text"].(string)
			}
			if ev.Type == "execution_count" {
				count = ev.ExecutionCount
			}
		}
		if result != "42" || count != 2 || lastEvent(events).Type != "execution_complete" {
			t.Fatalf("events %+v", events)
		}
	})
	t.Run("contexts are isolated", func(t *testing.T) {
		events := c.runCode(t, second, "x")
		end := lastEvent(events)
		if end.Type != "error" || end.Error.EName != "NameError" || !strings.Contains(end.Error.EValue, "'x'") || len(end.Error.Traceback) == 0 {
			t.Fatalf("events %+v", events)
		}
	})
	t.Run("stdout and stderr", func(t *testing.T) {
		events := c.runCode(t, first, "import sys\nprint('out')\nprint('err', file=sys.stderr)")
		var out, errOut string
		for _, ev := range events {
			switch ev.Type {
			case "stdout":
				out += ev.Text
			case "stderr":
				errOut += ev.Text
			}
		}
		if out != "out\n" || errOut != "err\n" {
			t.Fatalf("stdout %q stderr %q", out, errOut)
		}
	})
	t.Run("matplotlib png", func(t *testing.T) {
		events := c.runCode(t, first, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()")
		for _, ev := range events {
			s, ok := ev.Results["image/png"].(string)
			if ev.Type != "result" || !ok {
				continue
			}
			raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
			if err != nil {
				t.Fatalf("png is not base64: %v", err)
			}
			img, err := png.Decode(bytes.NewReader(raw))
			if err != nil {
				t.Fatalf("png does not decode: %v", err)
			}
			if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
				t.Fatalf("tiny image %v", b)
			}
			return
		}
		t.Fatalf("no image/png result in %+v", events)
	})
	t.Run("dataframe html", func(t *testing.T) {
		events := c.runCode(t, first, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
		for _, ev := range events {
			if html, ok := ev.Results["text/html"].(string); ok && strings.Contains(html, "<table") {
				if text, _ := ev.Results["text"].(string); !strings.Contains(text, "a") {
					t.Fatalf("text/plain missing beside html: %+v", ev.Results)
				}
				return
			}
		}
		t.Fatalf("no text/html table in %+v", events)
	})
	t.Run("interrupt a running cell", func(t *testing.T) {
		ch := c.stream(t, "/code", map[string]any{"context": map[string]any{"id": first}, "code": "import time\nprint('started', flush=True)\ntime.sleep(100)"})
		for ev := range ch {
			if ev.Type == "stdout" && strings.Contains(ev.Text, "started") {
				break
			}
		}
		start := time.Now()
		resp := c.request(t, http.MethodDelete, "/code?id="+first, nil)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("interrupt: %d", resp.StatusCode)
		}
		events := collect(ch)
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("interrupt took %v", took)
		}
		end := lastEvent(events)
		if end.Type != "error" || end.Error.EName != "KeyboardInterrupt" {
			t.Fatalf("interrupted cell ended with %+v", end)
		}
		// The context survives the interrupt.
		events = c.runCode(t, first, "x")
		if r := lastEvent(events); r.Type != "execution_complete" {
			t.Fatalf("after interrupt: %+v", events)
		}
	})
	t.Run("default context and env", func(t *testing.T) {
		resp := c.request(t, http.MethodPut, "/sandgate/env", map[string]any{"envs": map[string]string{"CLAIMED_BY": "tenant-a"}})
		resp.Body.Close()
		ctx := c.newContext(t, "python")
		events := c.runCode(t, ctx, "import os\nos.environ.get('CLAIMED_BY')")
		found := false
		for _, ev := range events {
			if ev.Type == "result" && ev.Results["text"] == "'tenant-a'" {
				found = true
			}
		}
		if !found {
			t.Fatalf("env not applied to a later context: %+v", events)
		}
		events = collect(c.stream(t, "/code", map[string]any{"context": map[string]any{"language": "python"}, "code": "1 + 1"}))
		if len(events) == 0 || events[0].Type != "init" || lastEvent(events).Type != "execution_complete" {
			t.Fatalf("default context run: %+v", events)
		}
	})
	t.Run("delete context", func(t *testing.T) {
		resp := c.request(t, http.MethodDelete, "/code/contexts/"+second, nil)
		resp.Body.Close()
		resp = c.request(t, http.MethodGet, "/code/contexts/"+second, nil)
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Fatalf("deleted context: %d", resp.StatusCode)
		}
	})
	t.Run("no zombies left", func(t *testing.T) {
		// The shell exits at once, orphaning its child; PID 1 must reap it.
		collect(c.stream(t, "/command", map[string]any{"command": "sh -c 'sleep 0.2 &'"}))
		time.Sleep(time.Second)
		events := collect(c.stream(t, "/command", map[string]any{"command": "grep -l '^State:.*Z' /proc/[0-9]*/status || echo none"}))
		var out []string
		for _, ev := range events {
			if ev.Type == "stdout" {
				out = append(out, ev.Text)
			}
		}
		if len(out) != 1 || out[0] != "none" {
			t.Fatalf("zombies: %q", out)
		}
	})
}

func TestDockerInit(t *testing.T) {
	bin := requireDocker(t)
	t.Run("exit code propagates", func(t *testing.T) {
		c := startContainer(t, bin, "sh", "-c", "exit 7")
		if code := c.waitExit(t, 30*time.Second); code != 7 {
			t.Fatalf("exit code %d, want 7\n%s", code, c.logs(t))
		}
	})
	t.Run("missing entrypoint exits 127", func(t *testing.T) {
		c := startContainer(t, bin, "no-such-program")
		if code := c.waitExit(t, 30*time.Second); code != 127 {
			t.Fatalf("exit code %d, want 127", code)
		}
		if logs := c.logs(t); !strings.Contains(logs, "no-such-program") {
			t.Fatalf("no clear message: %q", logs)
		}
	})
	t.Run("SIGTERM is forwarded", func(t *testing.T) {
		c := startContainer(t, bin, "sh", "-c", "trap 'echo got-term; exit 42' TERM; while :; do sleep 0.1; done")
		c.waitReady(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := docker(ctx, "stop", "-t", "10", c.id); err != nil {
			t.Fatal(err)
		}
		if code := c.waitExit(t, 30*time.Second); code != 42 {
			t.Fatalf("exit code %d, want 42\n%s", code, c.logs(t))
		}
		if !strings.Contains(c.logs(t), "got-term") {
			t.Fatalf("entrypoint did not see SIGTERM: %s", c.logs(t))
		}
	})
	t.Run("killed by a forwarded signal", func(t *testing.T) {
		c := startContainer(t, bin, "sleep", "100")
		c.waitReady(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := docker(ctx, "kill", "-s", "USR1", c.id); err != nil {
			t.Fatal(err)
		}
		if code := c.waitExit(t, 30*time.Second); code != 138 {
			t.Fatalf("exit code %d, want 138 (128+SIGUSR1)", code)
		}
	})
	t.Run("agent token and scrubbed env", func(t *testing.T) {
		c := startContainer(t, bin, "sleep", "infinity")
		c.waitReady(t)
		req, _ := http.NewRequest(http.MethodGet, c.base+"/ping", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("ping without token: %d", resp.StatusCode)
		}
		events := collect(c.stream(t, "/command", map[string]any{"command": "cat /proc/1/environ | tr '\\0' '\\n' | grep -c SANDGATE_AGENT_TOKEN; env | grep -c SANDGATE_ || true"}))
		var out []string
		for _, ev := range events {
			if ev.Type == "stdout" {
				out = append(out, ev.Text)
			}
		}
		if len(out) != 2 || out[1] != "0" {
			t.Fatalf("SANDGATE_ variables reached a command: %q", out)
		}
	})
	t.Run("entrypoint replaced through the API ends the container", func(t *testing.T) {
		c := startContainer(t, bin, "sleep", "infinity")
		c.waitReady(t)
		resp := c.request(t, http.MethodPost, "/sandgate/entrypoint", map[string]any{"entrypoint": []string{"sh", "-c", "sleep 0.5; exit 5"}})
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("entrypoint: %d", resp.StatusCode)
		}
		if code := c.waitExit(t, 30*time.Second); code != 5 {
			t.Fatalf("exit code %d, want the new entrypoint's 5", code)
		}
	})
	t.Run("freeze stops the workload and the agent still answers", func(t *testing.T) {
		c := startContainer(t, bin, "sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.01; done")
		c.waitReady(t)
		count := func() string {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := docker(ctx, "exec", c.id, "cat", "/tmp/count")
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		post := func(path string) {
			resp := c.request(t, http.MethodPost, path, nil)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
			}
		}
		post("/sandgate/freeze")
		before := count()
		time.Sleep(300 * time.Millisecond)
		if after := count(); after != before {
			t.Fatalf("the entrypoint counted from %s to %s while frozen", before, after)
		}
		// The agent answers; a command started now runs (the gateway refuses a paused
		// sandbox's commands: this is the agent alone).
		resp := c.request(t, http.MethodGet, "/ping", nil)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("ping while frozen: %d", resp.StatusCode)
		}
		post("/sandgate/thaw")
		deadline := time.Now().Add(10 * time.Second)
		for count() == before {
			if time.Now().After(deadline) {
				t.Fatal("the entrypoint did not count again after the thaw")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("metrics come from the container's cgroup", func(t *testing.T) {
		c := startContainerWith(t, bin, []string{"--memory", "256m", "--cpus", "0.5"}, "sleep", "infinity")
		c.waitReady(t)
		resp := c.request(t, http.MethodGet, "/metrics", nil)
		defer resp.Body.Close()
		var m struct {
			CPUCount    float64 `json:"cpu_count"`
			CPUUsedPct  float64 `json:"cpu_used_pct"`
			MemTotalMiB float64 `json:"mem_total_mib"`
			MemUsedMiB  float64 `json:"mem_used_mib"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		if m.MemTotalMiB != 256 || m.CPUCount != 0.5 || m.MemUsedMiB <= 0 || m.MemUsedMiB > 256 {
			t.Fatalf("metrics %+v, want the container's 256 MiB and 0.5 CPU limits", m)
		}
	})
	t.Run("serves forever without an entrypoint", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c := startContainer(t, bin)
		c.waitReady(t)
		if _, err := docker(ctx, "stop", "-t", "10", c.id); err != nil {
			t.Fatal(err)
		}
		if code := c.waitExit(t, 30*time.Second); code != 0 {
			t.Fatalf("exit code %d after SIGTERM, want 0", code)
		}
	})
}

// BenchmarkCodeOnePlusOne measures a `1 + 1` round trip in a warm Python context.
func BenchmarkCodeOnePlusOne(b *testing.B) {
	bin := requireDocker(b)
	c := startContainer(b, bin, "sleep", "infinity")
	c.waitReady(b)
	ctxID := c.newContext(b, "python")
	c.runCode(b, ctxID, "1 + 1")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		events := c.runCode(b, ctxID, "1 + 1")
		if lastEvent(events).Type != "execution_complete" {
			b.Fatalf("events %+v", events)
		}
	}
}
