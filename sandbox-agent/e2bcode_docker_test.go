package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// e2bLine is one line of an E2B /execute answer.
type e2bLine map[string]any

func (l e2bLine) str(key string) string { s, _ := l[key].(string); return s }

// e2bExecute posts an E2B run to the agent and returns its lines, failing on a status
// other than 200.
func (c *container) e2bExecute(t *testing.T, body map[string]any) []e2bLine {
	t.Helper()
	resp := c.request(t, http.MethodPost, "/e2b-code/execute", body)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("execute: %d %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("content type %q", ct)
	}
	var out []e2bLine
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l e2bLine
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		out = append(out, l)
	}
	if len(out) == 0 || out[len(out)-1].str("type") != "end_of_execution" {
		t.Fatalf("run does not end with end_of_execution: %v", out)
	}
	return out
}

func linesOf(lines []e2bLine, typ string) []e2bLine {
	var out []e2bLine
	for _, l := range lines {
		if l.str("type") == typ {
			out = append(out, l)
		}
	}
	return out
}

func (c *container) e2bContext(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	resp := c.request(t, http.MethodPost, "/e2b-code/contexts", body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var ctx map[string]any
	if resp.StatusCode != 200 || json.Unmarshal(b, &ctx) != nil || ctx["id"] == "" {
		t.Fatalf("create context: %d %s", resp.StatusCode, b)
	}
	return ctx
}

// TestDockerE2BCodeRunAfterAFailedRun: a run that fails does not cost the next one
// anything. ipykernel aborts the execute requests that reach it within
// stop_on_error_timeout of a cell that failed with stop_on_error (0 s by default, which
// still aborts one sent the moment the failure was answered, before the kernel's loop
// ends the abort): the agent sends every cell, its own included (a run's env_vars are
// set by one), without stop_on_error. The kernel here holds the window open for 10 s,
// so that a cell sent after a failure is aborted every time, not only on a busy machine.
func TestDockerE2BCodeRunAfterAFailedRun(t *testing.T) {
	bin := requireDocker(t)
	ipython := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ipython, "profile_default"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ipython, "profile_default", "ipython_kernel_config.py"),
		[]byte("c.Kernel.stop_on_error_timeout = 10.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{ipython, filepath.Join(ipython, "profile_default")} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	c := startContainerWith(t, bin, []string{"-v", ipython + ":/sandgate-ipython", "-e", "IPYTHONDIR=/sandgate-ipython"}, "sleep", "infinity")
	c.waitReady(t)
	fail := func(t *testing.T) {
		t.Helper()
		if errs := linesOf(c.e2bExecute(t, map[string]any{"code": "undefined_name"}), "error"); len(errs) != 1 {
			t.Fatalf("the failing run reported %v", errs)
		}
	}
	t.Run("a run", func(t *testing.T) {
		fail(t)
		lines := c.e2bExecute(t, map[string]any{"code": "1 + 1"})
		if r := linesOf(lines, "result"); len(r) != 1 || r[0].str("text") != "2" {
			t.Fatalf("the run after a failed one: %v", lines)
		}
	})
	t.Run("a run with env vars", func(t *testing.T) {
		fail(t)
		lines := c.e2bExecute(t, map[string]any{"code": "import os\nos.environ.get('E2B_RUN_VAR')", "env_vars": map[string]string{"E2B_RUN_VAR": "set"}})
		if r := linesOf(lines, "result"); len(r) != 1 || r[0].str("text") != "'set'" {
			t.Fatalf("the run with env vars after a failed one: %v", lines)
		}
	})
}

// TestDockerE2BCodeInterpreter drives the agent's E2B code-interpreter API in the code
// interpreter image, as the e2b-code-interpreter SDKs call it through the gateway.
func TestDockerE2BCodeInterpreter(t *testing.T) {
	bin := requireDocker(t)
	c := startContainer(t, bin, "sleep", "infinity")
	c.waitReady(t)

	t.Run("health", func(t *testing.T) {
		resp := c.request(t, http.MethodGet, "/e2b-code/health", nil)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("health: %d", resp.StatusCode)
		}
	})
	t.Run("default context keeps state, counts runs and streams output", func(t *testing.T) {
		c.e2bExecute(t, map[string]any{"code": "x = 41"})
		lines := c.e2bExecute(t, map[string]any{"code": "import sys\nprint('out')\nprint('err', file=sys.stderr)\nx + 1"})
		results := linesOf(lines, "result")
		if len(results) != 1 || results[0].str("text") != "42" || results[0]["is_main_result"] != true {
			t.Fatalf("results %v", results)
		}
		if n := linesOf(lines, "number_of_executions"); len(n) != 1 || n[0]["execution_count"].(float64) < 2 {
			t.Fatalf("execution count %v", n)
		}
		out, errOut := linesOf(lines, "stdout"), linesOf(lines, "stderr")
		if len(out) != 1 || out[0].str("text") != "out\n" || len(errOut) != 1 || errOut[0].str("text") != "err\n" {
			t.Fatalf("stdout %v stderr %v", out, errOut)
		}
		if ts, _ := out[0]["timestamp"].(float64); ts < 1e18 {
			t.Fatalf("timestamp %v is not in nanoseconds", out[0]["timestamp"])
		}
	})
	t.Run("error", func(t *testing.T) {
		lines := c.e2bExecute(t, map[string]any{"code": "undefined_name"})
		errs := linesOf(lines, "error")
		if len(errs) != 1 || errs[0].str("name") != "NameError" || !strings.Contains(errs[0].str("value"), "undefined_name") || errs[0].str("traceback") == "" {
			t.Fatalf("errors %v", errs)
		}
	})
	t.Run("env vars hold for one run", func(t *testing.T) {
		lines := c.e2bExecute(t, map[string]any{"code": "import os\nos.environ.get('E2B_RUN_VAR')", "env_vars": map[string]string{"E2B_RUN_VAR": "set"}})
		if r := linesOf(lines, "result"); len(r) != 1 || r[0].str("text") != "'set'" {
			t.Fatalf("with env: %v", lines)
		}
		lines = c.e2bExecute(t, map[string]any{"code": "import os\nos.environ.get('E2B_RUN_VAR')"})
		if r := linesOf(lines, "result"); len(r) != 0 {
			t.Fatalf("env var outlived its run: %v", lines)
		}
	})
	t.Run("matplotlib chart as data", func(t *testing.T) {
		lines := c.e2bExecute(t, map[string]any{"code": "import matplotlib.pyplot as plt\n" +
			"plt.plot([1, 2, 3], [1, 4, 9], label='squares')\nplt.title('growth')\nplt.xlabel('n')\nplt.show()"})
		for _, r := range linesOf(lines, "result") {
			chart, ok := r["chart"].(map[string]any)
			if !ok {
				continue
			}
			if r.str("png") == "" {
				t.Fatalf("chart without its png: %v", r)
			}
			els, _ := chart["elements"].([]any)
			if chart["type"] != "line" || chart["title"] != "growth" || chart["x_label"] != "n" || len(els) != 1 {
				t.Fatalf("chart %v", chart)
			}
			series := els[0].(map[string]any)
			points, _ := series["points"].([]any)
			if series["label"] != "squares" || len(points) != 3 || points[2].([]any)[1].(float64) != 9 {
				t.Fatalf("series %v", series)
			}
			return
		}
		t.Fatalf("no chart in %v", lines)
	})
	t.Run("bar and pie charts", func(t *testing.T) {
		lines := c.e2bExecute(t, map[string]any{"code": "import matplotlib.pyplot as plt\n" +
			"fig, (a, b) = plt.subplots(1, 2)\na.bar(['x', 'y'], [3, 5])\nb.pie([1, 3], labels=['p', 'q'])\nplt.show()"})
		for _, r := range linesOf(lines, "result") {
			chart, ok := r["chart"].(map[string]any)
			if !ok {
				continue
			}
			els, _ := chart["elements"].([]any)
			if chart["type"] != "superchart" || len(els) != 2 {
				t.Fatalf("chart %v", chart)
			}
			bar, pie := els[0].(map[string]any), els[1].(map[string]any)
			bars, _ := bar["elements"].([]any)
			slices, _ := pie["elements"].([]any)
			if bar["type"] != "bar" || len(bars) != 2 || bars[1].(map[string]any)["label"] != "y" || bars[1].(map[string]any)["value"].(float64) != 5 {
				t.Fatalf("bar %v", bar)
			}
			if pie["type"] != "pie" || len(slices) != 2 || slices[1].(map[string]any)["label"] != "q" || slices[1].(map[string]any)["angle"].(float64) != 270 {
				t.Fatalf("pie %v", pie)
			}
			return
		}
		t.Fatalf("no chart in %v", lines)
	})
	t.Run("dataframe as data", func(t *testing.T) {
		lines := c.e2bExecute(t, map[string]any{"code": "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', None]})"})
		r := linesOf(lines, "result")
		if len(r) != 1 || !strings.Contains(r[0].str("html"), "<table") {
			t.Fatalf("results %v", r)
		}
		data, _ := r[0]["data"].(map[string]any)
		col, _ := data["b"].(map[string]any)
		if col == nil || col["0"] != "x" || col["1"] != nil {
			t.Fatalf("data %v", r[0]["data"])
		}
	})
	t.Run("contexts: create, run, list, restart, remove", func(t *testing.T) {
		ctx := c.e2bContext(t, map[string]any{"language": "python", "cwd": "/tmp"})
		id := ctx["id"].(string)
		if ctx["language"] != "python" || ctx["cwd"] != "/tmp" {
			t.Fatalf("context %v", ctx)
		}
		lines := c.e2bExecute(t, map[string]any{"code": "import os\ny = 7\nos.getcwd()", "context_id": id})
		if r := linesOf(lines, "result"); len(r) != 1 || r[0].str("text") != "'/tmp'" {
			t.Fatalf("cwd: %v", lines)
		}
		resp := c.request(t, http.MethodGet, "/e2b-code/contexts", nil)
		var list []map[string]any
		json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		found := false
		for _, l := range list {
			found = found || l["id"] == id
		}
		if !found {
			t.Fatalf("context %s not listed: %v", id, list)
		}
		resp = c.request(t, http.MethodPost, "/e2b-code/contexts/"+id+"/restart", nil)
		resp.Body.Close()
		if resp.StatusCode != 204 {
			t.Fatalf("restart: %d", resp.StatusCode)
		}
		lines = c.e2bExecute(t, map[string]any{"code": "y", "context_id": id})
		if e := linesOf(lines, "error"); len(e) != 1 || e[0].str("name") != "NameError" {
			t.Fatalf("state survived the restart: %v", lines)
		}
		resp = c.request(t, http.MethodDelete, "/e2b-code/contexts/"+id, nil)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("remove: %d", resp.StatusCode)
		}
		resp = c.request(t, http.MethodPost, "/e2b-code/execute", map[string]any{"code": "1", "context_id": id})
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Fatalf("run in a removed context: %d", resp.StatusCode)
		}
	})
	t.Run("bash context", func(t *testing.T) {
		ctx := c.e2bContext(t, map[string]any{"language": "bash"})
		lines := c.e2bExecute(t, map[string]any{"code": "echo \"$GREETING\"", "context_id": ctx["id"], "env_vars": map[string]string{"GREETING": "it's here"}})
		if out := linesOf(lines, "stdout"); len(out) != 1 || strings.TrimSpace(out[0].str("text")) != "it's here" {
			t.Fatalf("bash run: %v", lines)
		}
		lines = c.e2bExecute(t, map[string]any{"code": "(exit 3)", "context_id": ctx["id"]})
		if e := linesOf(lines, "error"); len(e) != 1 || !strings.Contains(e[0].str("value"), "3") {
			t.Fatalf("failing bash run: %v", lines)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		for name, body := range map[string]any{
			"context and language": map[string]any{"code": "1", "context_id": "x", "language": "python"},
			"bad env name":         map[string]any{"code": "1", "env_vars": map[string]string{"A B": "1"}},
			"not JSON":             "code",
		} {
			resp := c.request(t, http.MethodPost, "/e2b-code/execute", body)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !strings.Contains(string(b), `"code"`) {
				t.Errorf("%s: %d %s", name, resp.StatusCode, b)
			}
		}
		resp := c.request(t, http.MethodPost, "/e2b-code/contexts/none/restart", nil)
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("restart of an unknown context: %d", resp.StatusCode)
		}
	})
}
