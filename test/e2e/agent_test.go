package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// The agent API tests reach every endpoint of a sandbox's agent the way an OpenSandbox
// SDK does: GET /v1/sandboxes/{id}/endpoints/44772, then http:// + endpoint with the
// headers it returned, so every byte crosses the gateway's proxy into a real container.

// as returns a copy of the agent client that reports to t, so that subtests fail
// themselves instead of the test that created the client.
func (a *agent) as(t testing.TB) *agent {
	c := *a
	c.t = t
	return &c
}

// call sends one request with an optional JSON body and reads the whole answer.
func (a *agent) call(method, path string, body any) response {
	a.t.Helper()
	var rd io.Reader
	ct := ""
	if body != nil {
		js, err := json.Marshal(body)
		if err != nil {
			a.t.Fatal(err)
		}
		rd, ct = bytes.NewReader(js), "application/json"
	}
	resp := a.request(method, path, rd, ct)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// mustCall is call that fails the test unless the status is want.
func (a *agent) mustCall(want int, method, path string, body any) response {
	a.t.Helper()
	r := a.call(method, path, body)
	if r.Status != want {
		a.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.Status, want, r.Body)
	}
	return r
}

// stream posts a JSON body to a streaming endpoint and returns all its events.
func (a *agent) stream(path string, body any) []event {
	a.t.Helper()
	js, _ := json.Marshal(body)
	resp := a.request("POST", path, bytes.NewReader(js), "application/json")
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		a.t.Fatalf("POST %s: %d %s", path, resp.StatusCode, data)
	}
	return readEvents(a.t, resp.Body)
}

// eachEvent parses a stream one event at a time, calling fn with the event's arrival
// time, without keeping the events: some streams here are tens of megabytes.
func eachEvent(t testing.TB, r io.Reader, fn func(ev event, at time.Time)) {
	t.Helper()
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		at := time.Now()
		s := bytes.TrimSpace(line)
		s = bytes.TrimSpace(bytes.TrimPrefix(s, []byte("data:")))
		if len(s) > 0 && s[0] != ':' {
			var ev event
			if jerr := json.Unmarshal(s, &ev); jerr != nil {
				t.Fatalf("bad event line %q: %v", s, jerr)
			}
			fn(ev, at)
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("read events: %v", err)
		}
	}
}

// collectEvents reads a whole stream without a testing.TB, for use in goroutines.
func collectEvents(r io.Reader) ([]event, error) {
	var evs []event
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		s := bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace(line), []byte("data:")))
		if len(s) > 0 && s[0] != ':' {
			var ev event
			if jerr := json.Unmarshal(s, &ev); jerr != nil {
				return evs, fmt.Errorf("bad event line %q: %w", s, jerr)
			}
			evs = append(evs, ev)
		}
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
	}
}

func eventTypes(evs []event) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		if ev.Type != "ping" {
			out = append(out, ev.Type)
		}
	}
	return out
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// uploadFiles sends several files in one multipart request of (metadata, file) pairs.
func uploadFiles(t testing.TB, a *agent, files []uploadSpec) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range files {
		meta := map[string]any{"path": f.path}
		if f.mode != 0 {
			meta["mode"] = f.mode
		}
		writeMetadataPart(mw, meta)
		fw, _ := mw.CreateFormFile("file", "blob")
		fw.Write(f.data)
	}
	mw.Close()
	resp := a.request("POST", "/files/upload", &buf, mw.FormDataContentType())
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
}

type uploadSpec struct {
	path string
	mode int
	data []byte
}

// writeMetadataPart writes a metadata part as the SDKs do: a JSON file part.
func writeMetadataPart(mw *multipart.Writer, meta map[string]any) {
	js, _ := json.Marshal(meta)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
	h.Set("Content-Type", "application/json")
	pw, _ := mw.CreatePart(h)
	pw.Write(js)
}

// patternReader is an endless, deterministic, incompressible byte stream (AES-CTR of
// zeros), so large transfers need no buffer and can be checked by hash.
func patternReader(seed byte) io.Reader {
	key := make([]byte, 16)
	key[0] = seed
	block, _ := aes.NewCipher(key)
	return cipher.StreamReader{S: cipher.NewCTR(block, make([]byte, aes.BlockSize)), R: zeroReader{}}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// streamUpload uploads size bytes of patternReader(seed) to path in one multipart
// request whose body is produced while it is sent, and returns the data's SHA-256.
func streamUpload(t testing.TB, a *agent, path string, size int64, seed byte) string {
	t.Helper()
	pr, pw := io.Pipe()
	defer pr.Close() // unblocks the writer if the request fails early
	mw := multipart.NewWriter(pw)
	h := sha256.New()
	go func() {
		writeMetadataPart(mw, map[string]any{"path": path, "mode": 644})
		fw, err := mw.CreateFormFile("file", "big.bin")
		if err == nil {
			_, err = io.Copy(io.MultiWriter(fw, h), io.LimitReader(patternReader(seed), size))
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	resp := a.request("POST", "/files/upload", pr, mw.FormDataContentType())
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	pr.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("upload %s: %d %s", path, resp.StatusCode, body)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestAgentAPI covers commands, sessions, files, directories, metrics and the
// in-sandbox port proxy of one sandbox of the base image, through the gateway.
func TestAgentAPI(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{})
	agentOf := g.agent(id)

	t.Run("endpoint points at the gateway with the access header", func(t *testing.T) {
		if !strings.HasPrefix(agentOf.base, "http://"+g.Addr+"/") || !strings.Contains(agentOf.base, "/sandboxes/"+id+"/proxy/44772") {
			t.Fatalf("endpoint %s is not the gateway's path-mode proxy for port 44772", agentOf.base)
		}
		if agentOf.headers["X-EXECD-ACCESS-TOKEN"] == "" {
			t.Fatalf("endpoint headers %v carry no X-EXECD-ACCESS-TOKEN", agentOf.headers)
		}
		agentOf.as(t).mustCall(200, "GET", "/ping", nil)
	})

	commandTests(t, agentOf)
	sessionTests(t, agentOf)
	fileTests(t, agentOf, []peakProbe{
		{"gateway", g.proc.Pid()},
		{"agent", containerPid(t, "sandgate-"+id)},
	})
	directoryTests(t, agentOf)

	t.Run("metrics", func(t *testing.T) {
		a := agentOf.as(t)
		var m struct {
			CPUCount    float64 `json:"cpu_count"`
			CPUUsedPct  float64 `json:"cpu_used_pct"`
			MemTotalMiB float64 `json:"mem_total_mib"`
			MemUsedMiB  float64 `json:"mem_used_mib"`
			Timestamp   int64   `json:"timestamp"`
		}
		r := a.mustCall(200, "GET", "/metrics", nil)
		if err := json.Unmarshal(r.Body, &m); err != nil {
			t.Fatalf("metrics: %v: %s", err, r.Body)
		}
		if m.CPUCount <= 0 || m.MemTotalMiB <= 0 || m.MemUsedMiB <= 0 || m.CPUUsedPct < 0 {
			t.Fatalf("implausible metrics %s", r.Body)
		}
		if d := time.Since(time.UnixMilli(m.Timestamp)); d < -time.Minute || d > time.Minute {
			t.Fatalf("metrics timestamp %d is %s away from now", m.Timestamp, d)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", a.base+"/metrics/watch", nil)
		for k, v := range a.headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("metrics/watch: %v", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("metrics/watch: %d", resp.StatusCode)
		}
		line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
		if err != nil {
			t.Fatalf("metrics/watch: no line within the deadline (buffered by the proxy?): %v", err)
		}
		m.CPUCount = 0
		if err := json.Unmarshal(line, &m); err != nil || m.CPUCount <= 0 {
			t.Fatalf("metrics/watch line %q: %v", line, err)
		}
	})

	t.Run("metrics come from the sandbox's own cgroup", func(t *testing.T) {
		limited := g.createSandbox(map[string]any{"resourceLimits": map[string]string{"cpu": "500m", "memory": "256Mi"}})
		t.Cleanup(func() { g.do("DELETE", "/v1/sandboxes/"+limited, nil) })
		m := g.agent(limited).as(t).mustCall(200, "GET", "/metrics", nil).JSON(t)
		if m["cpu_count"] != 0.5 || m["mem_total_mib"] != float64(256) {
			t.Fatalf("metrics of a sandbox limited to 500m CPU and 256Mi: %v", m)
		}
	})

	t.Run("code interpreter is not supported without Jupyter", func(t *testing.T) {
		a := agentOf.as(t)
		r := a.call("POST", "/code/context", map[string]any{"language": "python"})
		expectError(t, r, 501, "NOT_SUPPORTED")
		if msg, _ := r.JSON(t)["message"].(string); !strings.Contains(msg, "only code language is bash") {
			t.Errorf("message %q does not say which language the sandbox has", msg)
		}
	})

	portProxyTests(t, g, id, agentOf)
	ptyTests(t, agentOf)

	t.Run("unknown agent route answers code and message", func(t *testing.T) {
		expectError(t, agentOf.as(t).call("GET", "/no/such/route", nil), 404, "NOT_FOUND")
	})
}

func commandTests(t *testing.T, agentOf *agent) {
	t.Run("command events", func(t *testing.T) {
		a := agentOf.as(t)
		evs := a.stream("/command", map[string]any{"command": "echo out; echo err >&2"})
		got := eventTypes(evs)
		want := []string{"init", "stdout", "stderr", "execution_complete"}
		if strings.Join(got[:1], ",") != "init" || got[len(got)-1] != "execution_complete" || len(got) != 4 {
			t.Fatalf("event types %v, want %v (stdout/stderr in either order)", got, want)
		}
		if evs[0].Text == "" {
			t.Fatalf("init event without command id: %+v", evs[0])
		}
		if stdoutOf(evs) != "out" {
			t.Fatalf("stdout %q", stdoutOf(evs))
		}
		for _, ev := range evs {
			if ev.Type == "stderr" && ev.Text != "err" {
				t.Fatalf("stderr %q", ev.Text)
			}
		}
	})

	t.Run("non-zero exit ends with a CommandExecError", func(t *testing.T) {
		evs := agentOf.as(t).run("exit 3")
		last := lastEvent(evs)
		if last.Type != "error" || last.Error == nil || last.Error.Ename != "CommandExecError" || last.Error.Evalue != "3" {
			t.Fatalf("last event %+v", last)
		}
	})

	t.Run("plain programs run as under the shell", func(t *testing.T) {
		// The agent execs a plain program invocation itself (sandbox-agent/agent/
		// directexec.go); with its first character escaped the same command means the
		// same to bash but goes through it. Both must give the program the same
		// environment, directory and exit, and fail alike when there is no program.
		a := agentOf.as(t)
		a.mustCall(200, "POST", "/directories", map[string]any{"/tmp/plain-bin": map[string]any{"mode": 755}})
		for _, c := range []string{
			"printf 'echo from a script without a shebang line; exit 4\\n' > /tmp/plain-bin/no-shebang; chmod 755 /tmp/plain-bin/no-shebang",
			"printf '#!/bin/sh\\necho ran\\n' > /tmp/plain-bin/not-executable; chmod 644 /tmp/plain-bin/not-executable",
		} {
			if last := lastEvent(a.run(c)); last.Type != "execution_complete" {
				t.Fatalf("%s: %+v", c, last)
			}
		}
		type outcome struct {
			Stdout, Stderr []string
			End            string
		}
		runOne := func(command, cwd string, envs map[string]string) outcome {
			body := map[string]any{"command": command, "envs": envs}
			if cwd != "" {
				body["cwd"] = cwd
			}
			var o outcome
			for _, ev := range a.stream("/command", body) {
				switch ev.Type {
				case "stdout":
					o.Stdout = append(o.Stdout, ev.Text)
				case "stderr":
					o.Stderr = append(o.Stderr, ev.Text)
				case "execution_complete":
					o.End = ev.Type
				case "error":
					o.End = ev.Type + " " + ev.Error.Ename + " " + ev.Error.Evalue
				}
			}
			sort.Strings(o.Stdout) // env lists bash's variable table in its own order
			return o
		}
		withBin := map[string]string{"PATH": "/tmp/plain-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "GREETING": "hello world"}
		for _, tt := range []struct {
			name, command, cwd string
			envs               map[string]string
		}{
			{"env", "env", "", nil},
			{"env with the request's variables", "env", "", withBin},
			{"env in a directory", "env", "/tmp", nil},
			{"working directory", "/bin/pwd", "/usr/bin", nil},
			{"true", "true", "", nil},
			{"false", "false", "", nil},
			{"exit code and stderr of a program", "ls /no/such/file", "", nil},
			{"arguments", "stat -c %n:%F /tmp", "", nil},
			{"missing command", "no-such-command-anywhere", "", nil},
			{"missing path", "/no/such/program", "", nil},
			{"script without a shebang line", "no-shebang", "", withBin},
			{"not executable", "not-executable", "", withBin},
			{"directory", "/tmp", "", nil},
		} {
			t.Run(tt.name, func(t *testing.T) {
				direct, shell := runOne(tt.command, tt.cwd, tt.envs), runOne(`\`+tt.command, tt.cwd, tt.envs)
				if !reflect.DeepEqual(direct, shell) {
					t.Fatalf("%q gave\n%+v\nand through the shell\n%+v", tt.command, direct, shell)
				}
				if direct.End == "" {
					t.Fatalf("%q: no end event", tt.command)
				}
			})
		}
	})

	t.Run("gateway streams without buffering", func(t *testing.T) {
		a := agentOf.as(t)
		start := time.Now()
		resp := a.request("POST", "/command", strings.NewReader(`{"command":"echo a; sleep 2; echo b"}`), "application/json")
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
			t.Errorf("Content-Type %q, want text/event-stream", ct)
		}
		var firstA, lastB, end time.Time
		eachEvent(t, resp.Body, func(ev event, at time.Time) {
			switch {
			case ev.Type == "stdout" && ev.Text == "a":
				firstA = at
			case ev.Type == "stdout" && ev.Text == "b":
				lastB = at
			}
			end = at
		})
		if firstA.IsZero() || lastB.IsZero() {
			t.Fatal("missing stdout a or b")
		}
		// b comes 2 s after a: a that arrives with b was held back by a buffer.
		if d := firstA.Sub(start); d > 1500*time.Millisecond {
			t.Fatalf("first stdout arrived %s after the request: the proxy buffers the stream", d)
		}
		if d := lastB.Sub(firstA); d < 1500*time.Millisecond {
			t.Fatalf("a and b arrived %s apart, want about 2s", d)
		}
		if d := end.Sub(lastB); d > time.Second {
			t.Fatalf("stream ended %s after the last output: tail delay", d)
		}
	})

	t.Run("envs cwd uid gid", func(t *testing.T) {
		a := agentOf.as(t)
		evs := a.stream("/command", map[string]any{
			"command": `echo "$GREETING|$(pwd)|$(id -u):$(id -g)"`,
			"envs":    map[string]string{"GREETING": "hello world"},
			"cwd":     "/usr/share",
			"uid":     65534, "gid": 65534,
		})
		if got := stdoutOf(evs); got != "hello world|/usr/share|65534:65534" {
			t.Fatalf("stdout %q; events %+v", got, evs)
		}
		r := a.call("POST", "/command", map[string]any{"command": "true", "cwd": "/no/such/dir"})
		expectError(t, r, 404, "FILE_NOT_FOUND")
	})

	t.Run("timeout kills the process group", func(t *testing.T) {
		a := agentOf.as(t)
		start := time.Now()
		evs := a.stream("/command", map[string]any{"command": "sleep 3131 & sleep 3132; echo never", "timeout": 500})
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("timeout of 500ms took %s", d)
		}
		if last := lastEvent(evs); last.Type != "error" || stdoutOf(evs) != "" {
			t.Fatalf("events after timeout: %+v", evs)
		}
		// The background child of the timed-out shell died with it.
		waitFor(t, 5*time.Second, func() bool {
			out := stdoutOf(a.run(`for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 313[12]' || true`))
			return out == "0"
		}, "sleep 3131/3132 to be gone")
	})

	t.Run("keep-alive pings on a silent command", func(t *testing.T) {
		evs := agentOf.as(t).run("sleep 4")
		pings := 0
		for _, ev := range evs {
			if ev.Type == "ping" {
				pings++
			}
		}
		if pings == 0 || lastEvent(evs).Type != "execution_complete" {
			t.Fatalf("want a ping during 4 silent seconds: %+v", evs)
		}
	})

	t.Run("background status and logs cursor", func(t *testing.T) {
		a := agentOf.as(t)
		start := time.Now()
		evs := a.stream("/command", map[string]any{"command": "echo one; echo two; sleep 2; echo three; exit 4", "background": true})
		if d := time.Since(start); d > time.Second {
			t.Fatalf("background command answered after %s", d)
		}
		if got := eventTypes(evs); strings.Join(got, ",") != "init,execution_complete" {
			t.Fatalf("background events %v", got)
		}
		cmdID := evs[0].Text
		logs := func(cursor int) (string, string) {
			r := a.mustCall(200, "GET", "/command/"+cmdID+"/logs?cursor="+strconv.Itoa(cursor), nil)
			return string(r.Body), r.Header.Get("EXECD-COMMANDS-TAIL-CURSOR")
		}
		type status struct {
			ID         string     `json:"id"`
			Content    string     `json:"content"`
			Running    bool       `json:"running"`
			ExitCode   *int       `json:"exit_code"`
			StartedAt  time.Time  `json:"started_at"`
			FinishedAt *time.Time `json:"finished_at"`
		}
		getStatus := func() status {
			var st status
			r := a.mustCall(200, "GET", "/command/status/"+cmdID, nil)
			if err := json.Unmarshal(r.Body, &st); err != nil {
				t.Fatalf("status: %v: %s", err, r.Body)
			}
			return st
		}
		var text, cursor string
		waitFor(t, 5*time.Second, func() bool { text, cursor = logs(0); return strings.Contains(text, "two") }, "the first two lines")
		if text != "one\ntwo\n" || cursor != "2" {
			t.Fatalf("logs?cursor=0 = %q cursor %q, want \"one\\ntwo\\n\" cursor 2", text, cursor)
		}
		if st := getStatus(); !st.Running || st.ID != cmdID || st.ExitCode != nil || st.FinishedAt != nil || st.StartedAt.IsZero() || !strings.Contains(st.Content, "echo one") {
			t.Fatalf("status while running: %+v", st)
		}
		waitFor(t, 10*time.Second, func() bool { return !getStatus().Running }, "the background command to finish")
		st := getStatus()
		if st.ExitCode == nil || *st.ExitCode != 4 || st.FinishedAt == nil || st.FinishedAt.Before(st.StartedAt) {
			t.Fatalf("status after exit: %+v", st)
		}
		if text, cursor = logs(2); text != "three\n" || cursor != "3" {
			t.Fatalf("logs?cursor=2 = %q cursor %q", text, cursor)
		}
		if text, cursor = logs(3); text != "" || cursor != "3" {
			t.Fatalf("logs?cursor=3 = %q cursor %q", text, cursor)
		}
		expectError(t, a.call("GET", "/command/status/no-such-id", nil), 404, "NOT_FOUND")
	})

	t.Run("interrupt of sleep 100 returns within a second", func(t *testing.T) {
		a := agentOf.as(t)
		resp := a.request("POST", "/command", strings.NewReader(`{"command":"sleep 100"}`), "application/json")
		defer resp.Body.Close()
		idc := make(chan string, 1)
		done := make(chan []event, 1)
		go func() {
			var evs []event
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadBytes('\n')
				s := bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace(line), []byte("data:")))
				if len(s) > 0 {
					var ev event
					if json.Unmarshal(s, &ev) == nil {
						if ev.Type == "init" {
							idc <- ev.Text
						}
						evs = append(evs, ev)
					}
				}
				if err != nil {
					done <- evs
					return
				}
			}
		}()
		var cmdID string
		select {
		case cmdID = <-idc:
		case <-time.After(10 * time.Second):
			t.Fatal("no init event")
		}
		start := time.Now()
		a.mustCall(200, "DELETE", "/command?id="+url.QueryEscape(cmdID), nil)
		select {
		case evs := <-done:
			if d := time.Since(start); d > time.Second {
				t.Fatalf("stream ended %s after the interrupt", d)
			}
			if last := lastEvent(evs); last.Type != "error" {
				t.Fatalf("interrupted stream ends with %+v, want an error event", last)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("stream did not end within 5s of the interrupt")
		}
		if st := a.mustCall(200, "GET", "/command/status/"+cmdID, nil).JSON(t); st["running"] != false {
			t.Fatalf("status after interrupt: %v", st)
		}
		expectError(t, a.call("DELETE", "/command?id=no-such-id", nil), 404, "NOT_FOUND")
	})

	t.Run("a client leaving the gateway stops its command", func(t *testing.T) {
		a := agentOf.as(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", a.base+"/command", strings.NewReader(`{"command":"sleep 4242"}`))
		for k, v := range a.headers {
			req.Header.Set(k, v)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		if !strings.Contains(line, `"init"`) {
			t.Fatalf("first line %q", line)
		}
		running := func() string {
			return stdoutOf(a.run(`for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 4242' || true`))
		}
		if got := running(); got != "1" {
			t.Fatalf("%s sleep 4242 processes before the client left", got)
		}
		cancel()
		resp.Body.Close()
		waitFor(t, 5*time.Second, func() bool { return running() == "0" }, "sleep 4242 to stop after its client left the gateway")
	})

	t.Run("50 MB of output arrives whole and in order", func(t *testing.T) {
		a := agentOf.as(t)
		const n = 7_000_000 // seq 1 7000000 prints about 55 MB
		resp := a.request("POST", "/command", strings.NewReader(fmt.Sprintf(`{"command":"seq 1 %d"}`, n)), "application/json")
		defer resp.Body.Close()
		next, bytesOut, last := 1, 0, ""
		eachEvent(t, resp.Body, func(ev event, _ time.Time) {
			last = ev.Type
			if ev.Type != "stdout" {
				return
			}
			if ev.Text != strconv.Itoa(next) {
				t.Fatalf("line %d is %q", next, ev.Text)
			}
			next++
			bytesOut += len(ev.Text) + 1
		})
		if next != n+1 || last != "execution_complete" {
			t.Fatalf("got %d lines (%d bytes), last event %q", next-1, bytesOut, last)
		}
		if bytesOut < 50_000_000 {
			t.Fatalf("only %d bytes", bytesOut)
		}
	})
}

func sessionTests(t *testing.T, agentOf *agent) {
	t.Run("session keeps cd and exported variables", func(t *testing.T) {
		a := agentOf.as(t)
		var created struct {
			SessionID string `json:"session_id"`
		}
		if err := json.Unmarshal(a.mustCall(200, "POST", "/session", map[string]any{"cwd": "/tmp"}).Body, &created); err != nil || created.SessionID == "" {
			t.Fatalf("create session: %v", err)
		}
		run := "/session/" + created.SessionID + "/run"
		if got := stdoutOf(a.stream(run, map[string]any{"command": "pwd"})); got != "/tmp" {
			t.Fatalf("initial cwd %q", got)
		}
		evs := a.stream(run, map[string]any{"command": "mkdir -p /tmp/sess/inner && cd /tmp/sess/inner && export SESSION_VAR='kept value'"})
		if lastEvent(evs).Type != "execution_complete" {
			t.Fatalf("setup: %+v", evs)
		}
		if got := stdoutOf(a.stream(run, map[string]any{"command": `echo "$(pwd) $SESSION_VAR"`})); got != "/tmp/sess/inner kept value" {
			t.Fatalf("second run sees %q", got)
		}
		if last := lastEvent(a.stream(run, map[string]any{"command": "false"})); last.Type != "error" || last.Error == nil || last.Error.Evalue != "1" {
			t.Fatalf("false in a session: %+v", last)
		}
		if got := stdoutOf(a.stream(run, map[string]any{"command": "echo still $SESSION_VAR"})); got != "still kept value" {
			t.Fatalf("after a failing run: %q", got)
		}
		a.mustCall(200, "DELETE", "/session/"+created.SessionID, nil)
		expectError(t, a.call("POST", run, map[string]any{"command": "pwd"}), 404, "NOT_FOUND")
		expectError(t, a.call("DELETE", "/session/"+created.SessionID, nil), 404, "NOT_FOUND")
	})
}

type fileInfo struct {
	Path       string    `json:"path"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modified_at"`
	Owner      string    `json:"owner"`
	Group      string    `json:"group"`
	Mode       int       `json:"mode"`
}

func filesInfo(t testing.TB, a *agent, paths ...string) map[string]fileInfo {
	t.Helper()
	q := url.Values{"path": paths}
	r := a.mustCall(200, "GET", "/files/info?"+q.Encode(), nil)
	var out map[string]fileInfo
	if err := json.Unmarshal(r.Body, &out); err != nil {
		t.Fatalf("files/info: %v: %s", err, r.Body)
	}
	return out
}

// peakProbe names a process whose peak resident memory (VmHWM) a test watches.
type peakProbe struct {
	name string
	pid  int
}

// peakRSS reads a process's peak resident set size in bytes.
func peakRSS(t testing.TB, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read status of pid %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM for pid %d", pid)
	return 0
}

// containerPid is the host pid of a container's first process (the agent).
func containerPid(t testing.TB, name string) int {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", name).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid <= 0 {
		t.Fatalf("pid of %s: %q", name, out)
	}
	return pid
}

func fileTests(t *testing.T, agentOf *agent, probes []peakProbe) {
	dir := "/tmp/e2e files"
	a1, b1, c1 := dir+"/a.txt", dir+"/sub dir/b.txt", dir+"/ünïcødé/c.bin"

	t.Run("upload three files in one request", func(t *testing.T) {
		a := agentOf.as(t)
		uploadFiles(t, a, []uploadSpec{
			{path: a1, mode: 600, data: []byte("hello alpha\nhello again\n")},
			{path: b1, mode: 644, data: []byte("bravo")},
			{path: c1, mode: 755, data: bytes.Repeat([]byte{0, 1, 2, 3}, 1000)},
		})
		info := filesInfo(t, a, a1, b1, c1)
		want := map[string]struct {
			size int64
			mode int
		}{a1: {24, 600}, b1: {5, 644}, c1: {4000, 755}}
		for p, w := range want {
			got, ok := info[p]
			if !ok || got.Type != "file" || got.Size != w.size || got.Mode != w.mode || got.Path != p || got.ModifiedAt.IsZero() {
				t.Errorf("info[%q] = %+v, want file of %d bytes mode %d", p, got, w.size, w.mode)
			}
		}
		if got := stdoutOf(a.run("cat " + shellQuote(b1))); got != "bravo" {
			t.Fatalf("b.txt reads %q inside the sandbox", got)
		}
	})

	t.Run("missing path gives code and message", func(t *testing.T) {
		a := agentOf.as(t)
		expectError(t, a.call("GET", "/files/info?path=/no/such/file", nil), 404, "FILE_NOT_FOUND")
		expectError(t, a.call("GET", "/files/download?path=/no/such/file", nil), 404, "FILE_NOT_FOUND")
		expectError(t, a.call("DELETE", "/files?path=/no/such/file", nil), 404, "FILE_NOT_FOUND")
		expectError(t, a.call("GET", "/directories/list?path=/no/such/dir", nil), 404, "FILE_NOT_FOUND")
		expectError(t, a.call("GET", "/files/info", nil), 400, "MISSING_QUERY")
	})

	t.Run("permission errors give code and message", func(t *testing.T) {
		a := agentOf.as(t)
		// /sys is mounted read-only in every container, even for root.
		expectError(t, a.call("POST", "/directories", map[string]any{"/sys/e2e-denied": map[string]any{"mode": 755}}), 403, "PERMISSION_DENIED")
		expectError(t, a.call("POST", "/files/upload?x", nil), 400, "INVALID_REQUEST_BODY")
	})

	t.Run("permissions", func(t *testing.T) {
		a := agentOf.as(t)
		a.mustCall(200, "POST", "/files/permissions", map[string]any{a1: map[string]any{"mode": 640, "owner": "nobody", "group": "nogroup"}})
		got := filesInfo(t, a, a1)[a1]
		if got.Mode != 640 || got.Owner != "nobody" || got.Group != "nogroup" {
			t.Fatalf("after chmod/chown: %+v", got)
		}
		if out := stdoutOf(a.run("stat -c '%a %U %G' " + shellQuote(a1))); out != "640 nobody nogroup" {
			t.Fatalf("stat inside the sandbox: %q", out)
		}
	})

	t.Run("search", func(t *testing.T) {
		a := agentOf.as(t)
		r := a.mustCall(200, "GET", "/files/search?"+url.Values{"path": {dir}, "pattern": {"*.txt"}}.Encode(), nil)
		var found []fileInfo
		if err := json.Unmarshal(r.Body, &found); err != nil {
			t.Fatalf("search: %v: %s", err, r.Body)
		}
		var paths []string
		for _, f := range found {
			paths = append(paths, f.Path)
		}
		if strings.Join(paths, ",") != a1+","+b1 && strings.Join(paths, ",") != b1+","+a1 {
			t.Fatalf("search *.txt found %q, want a.txt and b.txt", paths)
		}
		r = a.mustCall(200, "GET", "/files/search?"+url.Values{"path": {dir}}.Encode(), nil)
		if err := json.Unmarshal(r.Body, &found); err != nil || len(found) != 3 {
			t.Fatalf("search with the default pattern found %d: %s", len(found), r.Body)
		}
	})

	t.Run("replace", func(t *testing.T) {
		a := agentOf.as(t)
		a.mustCall(200, "POST", "/files/replace", map[string]any{a1: map[string]any{"old": "hello", "new": "bye"}})
		if got := a.mustCall(200, "GET", "/files/download?path="+url.QueryEscape(a1), nil).Body; string(got) != "bye alpha\nbye again\n" {
			t.Fatalf("after replace: %q", got)
		}
	})

	t.Run("replace detailed counts 0, 1 and 3 matches", func(t *testing.T) {
		// The SDKs' replaceContentsDetailed send ?verbose=true and decode
		// {path: {replacedCount}}; an empty 200 fails them.
		a := agentOf.as(t)
		none, one, three := dir+"/r0.txt", dir+"/r1.txt", dir+"/r3.txt"
		uploadFiles(t, a, []uploadSpec{
			{path: none, mode: 644, data: []byte("no match here")},
			{path: one, mode: 644, data: []byte("one cat")},
			{path: three, mode: 644, data: []byte("cat, cat\nand cat")},
		})
		r := a.mustCall(200, "POST", "/files/replace?verbose=true", map[string]any{
			none:  map[string]string{"old": "cat", "new": "dog"},
			one:   map[string]string{"old": "cat", "new": "dog"},
			three: map[string]string{"old": "cat", "new": "dog"},
		})
		var got map[string]map[string]int
		if err := json.Unmarshal(r.Body, &got); err != nil {
			t.Fatalf("verbose replace answered %q: %v", r.Body, err)
		}
		want := map[string]map[string]int{none: {"replacedCount": 0}, one: {"replacedCount": 1}, three: {"replacedCount": 3}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("verbose replace answered %s, want %v", r.Body, want)
		}
		for p, content := range map[string]string{none: "no match here", one: "one dog", three: "dog, dog\nand dog"} {
			if b := a.mustCall(200, "GET", "/files/download?path="+url.QueryEscape(p), nil).Body; string(b) != content {
				t.Fatalf("%s after replace: %q, want %q", p, b, content)
			}
		}
		a.mustCall(200, "DELETE", "/files?"+url.Values{"path": {none, one, three}}.Encode(), nil)
	})

	t.Run("move", func(t *testing.T) {
		a := agentOf.as(t)
		dest := dir + "/moved.txt"
		a.mustCall(200, "POST", "/files/mv", []map[string]string{{"src": a1, "dest": dest}})
		expectError(t, a.call("GET", "/files/info?path="+url.QueryEscape(a1), nil), 404, "FILE_NOT_FOUND")
		if got := filesInfo(t, a, dest)[dest]; got.Size != int64(len("bye alpha\nbye again\n")) {
			t.Fatalf("moved file: %+v", got)
		}
		expectError(t, a.call("POST", "/files/mv", []map[string]string{{"src": a1, "dest": dest}}), 404, "FILE_NOT_FOUND")
		a1 = dest
	})

	t.Run("move across filesystems", func(t *testing.T) {
		// /tmp is on the container's root filesystem and /dev/shm is a tmpfs: rename(2)
		// fails with EXDEV there, and a move must then copy and remove, as mv(1) does
		// (a file moved onto a mounted volume is the everyday case).
		a := agentOf.as(t)
		src, dest := dir+"/cross.txt", "/dev/shm/e2e-cross.txt"
		uploadFiles(t, a, []uploadSpec{{path: src, mode: 640, data: []byte("across")}})
		a.mustCall(200, "POST", "/files/mv", []map[string]string{{"src": src, "dest": dest}})
		if got := a.mustCall(200, "GET", "/files/download?path="+url.QueryEscape(dest), nil).Body; string(got) != "across" {
			t.Fatalf("moved file reads %q", got)
		}
		if got := filesInfo(t, a, dest)[dest]; got.Mode != 640 {
			t.Fatalf("moved file lost its mode: %+v", got)
		}
		expectError(t, a.call("GET", "/files/info?path="+url.QueryEscape(src), nil), 404, "FILE_NOT_FOUND")
	})

	t.Run("delete", func(t *testing.T) {
		a := agentOf.as(t)
		a.mustCall(200, "DELETE", "/files?"+url.Values{"path": {a1, b1}}.Encode(), nil)
		expectError(t, a.call("GET", "/files/info?path="+url.QueryEscape(b1), nil), 404, "FILE_NOT_FOUND")
		expectError(t, a.call("DELETE", "/files?path="+url.QueryEscape(dir), nil), 400, "IS_A_DIRECTORY")
	})

	t.Run("100 MiB upload and ranged download match by hash", func(t *testing.T) {
		a := agentOf.as(t)
		const size = 100 << 20
		path := "/tmp/big/blob.bin"
		before := make([]int64, len(probes))
		for i, p := range probes {
			// Reset the peak to the current size, so that the peak after the
			// transfers measures them alone.
			if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.pid), []byte("5"), 0); err != nil {
				t.Fatalf("reset the peak memory of the %s: %v", p.name, err)
			}
			before[i] = peakRSS(t, p.pid)
		}
		sum := streamUpload(t, a, path, size, 7)
		if got := stdoutOf(a.run("sha256sum " + path + " | cut -d' ' -f1")); got != sum {
			t.Fatalf("sha256 inside the sandbox %s, uploaded %s", got, sum)
		}
		// Read it back in three ranges, hashing as the bytes arrive.
		h := sha256.New()
		for _, rg := range []struct{ header, contentRange string }{
			{"bytes=0-41943039", "bytes 0-41943039/104857600"},
			{"bytes=41943040-83886079", "bytes 41943040-83886079/104857600"},
			{"bytes=83886080-", "bytes 83886080-104857599/104857600"},
		} {
			req, _ := http.NewRequest("GET", a.base+"/files/download?path="+url.QueryEscape(path), nil)
			for k, v := range a.headers {
				req.Header.Set(k, v)
			}
			req.Header.Set("Range", rg.header)
			resp, err := a.client.Do(req)
			if err != nil {
				t.Fatalf("download %s: %v", rg.header, err)
			}
			n, err := io.Copy(h, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusPartialContent || resp.Header.Get("Content-Range") != rg.contentRange {
				t.Fatalf("range %s: status %d Content-Range %q, %d bytes, %v", rg.header, resp.StatusCode, resp.Header.Get("Content-Range"), n, err)
			}
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != sum {
			t.Fatalf("downloaded sha256 %s, uploaded %s", got, sum)
		}
		req, _ := http.NewRequest("GET", a.base+"/files/download?path="+url.QueryEscape(path), nil)
		for k, v := range a.headers {
			req.Header.Set(k, v)
		}
		req.Header.Set("Range", "bytes=104857600-")
		resp, err := a.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		expectError(t, response{Status: resp.StatusCode, Header: resp.Header, Body: body}, 416, "RANGE_NOT_SATISFIABLE")
		// Neither the gateway nor the agent held the file: both stream it through
		// fixed buffers, so their peak memory grows by far less than 100 MiB.
		for i, p := range probes {
			grew := peakRSS(t, p.pid) - before[i]
			t.Logf("%s peak memory: %d MiB before, +%d KiB during the transfers", p.name, before[i]>>20, grew>>10)
			if grew > 40<<20 {
				t.Errorf("the %s's peak memory grew by %d MiB while 100 MiB went through it", p.name, grew>>20)
			}
		}
		a.run("rm -rf /tmp/big")
	})
}

func directoryTests(t *testing.T, agentOf *agent) {
	t.Run("directories mkdir list rm", func(t *testing.T) {
		a := agentOf.as(t)
		root := "/tmp/e2e dirs"
		a.mustCall(200, "POST", "/directories", map[string]any{root + "/x/y/z": map[string]any{"mode": 700}})
		if got := filesInfo(t, a, root+"/x/y/z")[root+"/x/y/z"]; got.Type != "directory" || got.Mode != 700 {
			t.Fatalf("mkdir -p: %+v", got)
		}
		a.run("echo data > " + shellQuote(root+"/x/f.txt") + " && ln -s /etc " + shellQuote(root+"/link"))
		list := func(depth int) map[string]string {
			r := a.mustCall(200, "GET", "/directories/list?"+url.Values{"path": {root}, "depth": {strconv.Itoa(depth)}}.Encode(), nil)
			var entries []fileInfo
			if err := json.Unmarshal(r.Body, &entries); err != nil {
				t.Fatalf("list: %v: %s", err, r.Body)
			}
			out := map[string]string{}
			for _, e := range entries {
				out[strings.TrimPrefix(e.Path, root+"/")] = e.Type
			}
			return out
		}
		if got := list(1); len(got) != 2 || got["x"] != "directory" || got["link"] != "symlink" {
			t.Fatalf("depth 1: %v", got)
		}
		got := list(3)
		want := map[string]string{"x": "directory", "link": "symlink", "x/f.txt": "file", "x/y": "directory", "x/y/z": "directory"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("depth 3: %v, want %v (a symlink is listed, not followed)", got, want)
		}
		expectError(t, a.call("GET", "/directories/list?path="+url.QueryEscape(root+"/x/f.txt"), nil), 400, "NOT_A_DIRECTORY")
		a.mustCall(200, "DELETE", "/directories?path="+url.QueryEscape(root), nil)
		expectError(t, a.call("GET", "/files/info?path="+url.QueryEscape(root), nil), 404, "FILE_NOT_FOUND")
		if got := stdoutOf(a.run("ls /etc/hostname")); got != "/etc/hostname" {
			t.Fatalf("rm -rf followed the symlink: %q", got)
		}
	})
}

// startInSandbox runs a server in the background and waits until the agent's port proxy
// reaches it.
func startInSandbox(t testing.TB, a *agent, command string, port int, path string) {
	t.Helper()
	evs := a.stream("/command", map[string]any{"command": command, "background": true})
	if lastEvent(evs).Type != "execution_complete" {
		t.Fatalf("start %q: %+v", command, evs)
	}
	cmdID := evs[0].Text
	t.Cleanup(func() { a.call("DELETE", "/command?id="+url.QueryEscape(cmdID), nil) })
	waitFor(t, 15*time.Second, func() bool {
		return a.call("GET", fmt.Sprintf("/proxy/%d%s", port, path), nil).Status == 200
	}, fmt.Sprintf("in-sandbox server on port %d", port))
}

const sseServerPy = `import http.server, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/headers"):
            body = str(self.headers).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        if self.path.startswith("/ready"):
            return
        for i in range(3):
            self.wfile.write(("data: tick%d\n\n" % i).encode())
            self.wfile.flush()
            time.sleep(1)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// wsEchoServerPy is a minimal WebSocket echo server (text frames under 126 bytes),
// enough to show that upgrades cross the gateway and the agent's port proxy.
const wsEchoServerPy = `import socket, base64, hashlib, struct, threading
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def handle(c):
    f = c.makefile("rb")
    key = None
    while True:
        line = f.readline().decode().strip()
        if not line:
            break
        k, _, v = line.partition(":")
        if k.lower() == "sec-websocket-key":
            key = v.strip()
    if key is None:
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        c.close()
        return
    acc = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
    c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % acc).encode())
    while True:
        h = f.read(2)
        if len(h) < 2:
            return
        op, n = h[0] & 15, h[1] & 127
        if n == 126:
            n = struct.unpack(">H", f.read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", f.read(8))[0]
        mask = f.read(4)
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(f.read(n)))
        if op == 8:
            c.sendall(b"\x88\x02\x03\xe8")
            return
        if op == 1:
            out = b"echo:" + data
            c.sendall(bytes([0x81, len(out)]) + out)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8767))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
`

// agentTokenOf reads the agent's own token from the container's configuration.
func agentTokenOf(t testing.TB, id string) string {
	t.Helper()
	return directAgent(t, id).headers["X-EXECD-ACCESS-TOKEN"]
}

func portProxyTests(t *testing.T, g *gateway, id string, agentOf *agent) {
	t.Run("port proxy HTTP", func(t *testing.T) {
		a := agentOf.as(t)
		uploadFiles(t, a, []uploadSpec{{path: "/tmp/www/hello.txt", data: []byte("hello from inside\n")}})
		startInSandbox(t, a, "cd /tmp/www && exec python3 -m http.server 8765 --bind 127.0.0.1", 8765, "/hello.txt")
		r := a.mustCall(200, "GET", "/proxy/8765/hello.txt?x=1", nil)
		if string(r.Body) != "hello from inside\n" {
			t.Fatalf("proxied body %q", r.Body)
		}
		expectError(t, a.call("GET", "/proxy/8799/", nil), 502, "BAD_GATEWAY")
	})

	t.Run("port proxy SSE arrives incrementally", func(t *testing.T) {
		a := agentOf.as(t)
		uploadFiles(t, a, []uploadSpec{{path: "/tmp/sse/server.py", data: []byte(sseServerPy)}})
		startInSandbox(t, a, "exec python3 /tmp/sse/server.py 8766", 8766, "/ready")
		start := time.Now()
		resp := a.request("GET", "/proxy/8766/events", nil, "")
		defer resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("SSE: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		var arrivals []time.Duration
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: tick") {
				arrivals = append(arrivals, time.Since(start))
			}
		}
		if len(arrivals) != 3 {
			t.Fatalf("got %d ticks", len(arrivals))
		}
		if arrivals[0] > 1500*time.Millisecond || arrivals[2]-arrivals[0] < 1500*time.Millisecond {
			t.Fatalf("ticks arrived at %v: not streamed as sent (1 s apart)", arrivals)
		}
	})

	t.Run("no credential reaches a server in the sandbox", func(t *testing.T) {
		// The SDKs' server-proxy mode sends the tenant's API key as the agent token;
		// neither it nor the agent's own token may be readable by code in the sandbox.
		a := agentOf.as(t)
		uploadFiles(t, a, []uploadSpec{{path: "/tmp/headers/server.py", data: []byte(sseServerPy)}})
		startInSandbox(t, a, "exec python3 /tmp/headers/server.py 8768", 8768, "/ready")
		apiKey := g.APIKey
		serverProxy := &agent{t: t, base: a.base, client: a.client, headers: map[string]string{
			"X-EXECD-ACCESS-TOKEN": apiKey, "OPEN-SANDBOX-API-KEY": apiKey, "Authorization": "Bearer " + apiKey,
		}}
		for name, c := range map[string]*agent{"endpoint header": a, "API key (server-proxy mode)": serverProxy} {
			r := c.mustCall(200, "GET", "/proxy/8768/headers", nil)
			seen := string(r.Body)
			if !strings.Contains(seen, "Host:") {
				t.Fatalf("%s: not a header dump: %q", name, seen)
			}
			for _, secret := range []string{apiKey, a.headers["X-EXECD-ACCESS-TOKEN"], agentTokenOf(t, id)} {
				if secret != "" && strings.Contains(seen, secret) {
					t.Errorf("%s: the in-sandbox server saw a credential; its request headers:\n%s", name, seen)
				}
			}
			if strings.Contains(strings.ToLower(seen), "x-execd-access-token") {
				t.Errorf("%s: the agent token header reached the in-sandbox server:\n%s", name, seen)
			}
		}
	})

	t.Run("port proxy WebSocket", func(t *testing.T) {
		a := agentOf.as(t)
		uploadFiles(t, a, []uploadSpec{{path: "/tmp/ws/server.py", data: []byte(wsEchoServerPy)}})
		startInSandbox(t, a, "exec python3 /tmp/ws/server.py", 8767, "/")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		conn := dialAgentWS(t, ctx, a, "/proxy/8767/echo")
		defer conn.CloseNow()
		for _, msg := range []string{"one", "two"} {
			if err := conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatalf("write: %v", err)
			}
			typ, data, err := conn.Read(ctx)
			if err != nil || typ != websocket.MessageText || string(data) != "echo:"+msg {
				t.Fatalf("read: %v %v %q", typ, err, data)
			}
		}
		conn.Close(websocket.StatusNormalClosure, "")
	})
}

// dialAgentWS opens a WebSocket to an agent path through the gateway, with the
// endpoint's headers.
func dialAgentWS(t testing.TB, ctx context.Context, a *agent, path string) *websocket.Conn {
	t.Helper()
	conn, resp, err := tryDialAgentWS(ctx, a, path)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("WebSocket %s: status %d: %v", path, status, err)
	}
	conn.SetReadLimit(8 << 20)
	return conn
}

func tryDialAgentWS(ctx context.Context, a *agent, path string) (*websocket.Conn, *http.Response, error) {
	h := http.Header{}
	for k, v := range a.headers {
		h.Set(k, v)
	}
	return websocket.Dial(ctx, "ws://"+strings.TrimPrefix(a.base, "http://")+path, &websocket.DialOptions{HTTPHeader: h})
}

// ptyClient reads a PTY WebSocket in the background and keeps the output and the byte
// offset reached.
type ptyClient struct {
	conn     *websocket.Conn
	mu       sync.Mutex
	out      bytes.Buffer
	offset   int64 // terminal output offset after the last byte received
	replayAt int64 // offset of the first replay frame
	closeErr error
	done     chan struct{}
}

func attachPTY(t testing.TB, a *agent, sessionID string, query string) *ptyClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn := dialAgentWS(t, ctx, a, "/pty/"+sessionID+"/ws"+query)
	p := &ptyClient{conn: conn, done: make(chan struct{}), replayAt: -1}
	t.Cleanup(func() { conn.CloseNow(); cancel(); <-p.done })
	go func() {
		defer close(p.done)
		for {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				p.mu.Lock()
				p.closeErr = err
				p.mu.Unlock()
				return
			}
			if typ != websocket.MessageBinary || len(data) == 0 {
				continue
			}
			p.mu.Lock()
			switch data[0] {
			case 0x03:
				if len(data) >= 9 {
					off := int64(binary.BigEndian.Uint64(data[1:9]))
					if p.replayAt < 0 {
						p.replayAt = off
					}
					p.out.Write(data[9:])
					p.offset = off + int64(len(data)-9)
				}
			case 0x01, 0x02:
				p.out.Write(data[1:])
				p.offset += int64(len(data) - 1)
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *ptyClient) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *ptyClient) send(t testing.TB, s string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.conn.Write(ctx, websocket.MessageBinary, append([]byte{0x00}, s...)); err != nil {
		t.Fatalf("pty write: %v", err)
	}
}

func (p *ptyClient) control(t testing.TB, v map[string]any) {
	t.Helper()
	js, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.conn.Write(ctx, websocket.MessageText, js); err != nil {
		t.Fatalf("pty control: %v", err)
	}
}

// ansiEscape matches the terminal control sequences bash writes around its prompt
// (bracketed paste mode and the like).
var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// hasLine reports whether the terminal output holds line as a whole line.
func hasLine(out, line string) bool {
	for _, l := range strings.Split(ansiEscape.ReplaceAllString(out, ""), "\n") {
		if strings.Trim(l, "\r") == line {
			return true
		}
	}
	return false
}

// waitLine waits for a whole output line: a typed command is echoed on the prompt's
// line, so only the command's output forms a line of its own.
func (p *ptyClient) waitLine(t testing.TB, line string) {
	t.Helper()
	p.waitFor(t, fmt.Sprintf("line %q", line), func(out string) bool { return hasLine(out, line) })
}

func (p *ptyClient) waitOutput(t testing.TB, substr string) {
	t.Helper()
	p.waitFor(t, fmt.Sprintf("%q", substr), func(out string) bool { return strings.Contains(out, substr) })
}

func (p *ptyClient) waitFor(t testing.TB, what string, cond func(out string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond(p.output()) {
		if time.Now().After(deadline) {
			p.mu.Lock()
			defer p.mu.Unlock()
			t.Fatalf("no terminal output %s within 10s; have %q (replay at %d, offset %d, read error %v)", what, tail(p.out.String(), 300), p.replayAt, p.offset, p.closeErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ptyTests(t *testing.T, agentOf *agent) {
	t.Run("pty over WebSocket", func(t *testing.T) {
		a := agentOf.as(t)
		var created struct {
			SessionID string `json:"session_id"`
		}
		if err := json.Unmarshal(a.mustCall(200, "POST", "/pty", map[string]any{"cwd": "/tmp"}).Body, &created); err != nil || created.SessionID == "" {
			t.Fatalf("create pty: %v", err)
		}
		sid := created.SessionID
		t.Cleanup(func() { a.call("DELETE", "/pty/"+sid, nil) })

		p := attachPTY(t, a, sid, "")
		p.send(t, "echo hi\r")
		p.waitLine(t, "hi")
		if !strings.Contains(p.output(), "echo hi") {
			t.Fatalf("the typed command is not echoed: %q", p.output())
		}

		p.control(t, map[string]any{"type": "resize", "cols": 123, "rows": 45})
		p.send(t, "stty size\r")
		p.waitLine(t, "45 123")

		p.send(t, "sleep 100\r")
		time.Sleep(300 * time.Millisecond)
		p.control(t, map[string]any{"type": "signal", "signal": "SIGINT"})
		p.send(t, "echo after-$((40+2))\r")
		p.waitLine(t, "after-42")

		st := a.mustCall(200, "GET", "/pty/"+sid, nil).JSON(t)
		if st["running"] != true || st["attached"] != true {
			t.Fatalf("pty status %v", st)
		}

		t.Run("a second client is refused without takeover", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, resp, err := tryDialAgentWS(ctx, a, "/pty/"+sid+"/ws")
			if err == nil {
				conn.CloseNow()
				t.Fatal("a second client attached without takeover")
			}
			if resp == nil || resp.StatusCode != http.StatusConflict {
				t.Fatalf("second client: %v (response %v)", err, resp)
			}
		})

		// Output produced while nobody is attached is replayed from the offset the
		// client had reached.
		p.send(t, "sleep 1; echo while-away-$((6*7))\r")
		time.Sleep(200 * time.Millisecond)
		p.mu.Lock()
		reached := p.offset
		p.mu.Unlock()
		p.conn.Close(websocket.StatusNormalClosure, "")
		<-p.done
		time.Sleep(1500 * time.Millisecond)

		q := attachPTY(t, a, sid, "?since="+strconv.FormatInt(reached, 10))
		q.waitLine(t, "while-away-42")
		q.mu.Lock()
		replayAt := q.replayAt
		q.mu.Unlock()
		if replayAt != reached {
			t.Fatalf("replay starts at offset %d, want %d", replayAt, reached)
		}
		if strings.Contains(q.output(), "echo hi") {
			t.Fatalf("replay from %d repeats output from before it: %q", reached, q.output())
		}

		// Takeover closes the first client with 4001.
		r := attachPTY(t, a, sid, "?takeover=1&since=0")
		r.waitOutput(t, "echo hi")
		select {
		case <-q.done:
		case <-time.After(5 * time.Second):
			t.Fatal("the displaced client was not closed")
		}
		if code := websocket.CloseStatus(q.closeErr); code != 4001 {
			t.Fatalf("displaced client closed with %v (%v), want 4001", code, q.closeErr)
		}
		r.send(t, "exit 7\r")
		waitFor(t, 10*time.Second, func() bool {
			st := a.mustCall(200, "GET", "/pty/"+sid, nil).JSON(t)
			return st["running"] == false && st["exit_code"] == float64(7)
		}, "the pty shell to exit with 7")

		a.mustCall(200, "DELETE", "/pty/"+sid, nil)
		expectError(t, a.call("GET", "/pty/"+sid, nil), 404, "NOT_FOUND")
	})
}

// TestAgentCodeInterpreter runs Python and bash code contexts of a code-interpreter
// sandbox through the gateway.
func TestAgentCodeInterpreter(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{"image": map[string]any{"uri": "sandgate/code-interpreter:0.1.0"}})
	agentOf := g.agent(id)

	newContext := func(t *testing.T, a *agent, language string) string {
		t.Helper()
		r := a.mustCall(200, "POST", "/code/context", map[string]any{"language": language})
		var c struct {
			ID       string `json:"id"`
			Language string `json:"language"`
		}
		if err := json.Unmarshal(r.Body, &c); err != nil || c.ID == "" || c.Language != language {
			t.Fatalf("create %s context: %v: %s", language, err, r.Body)
		}
		return c.ID
	}
	runCode := func(a *agent, ctxID, code string) []event {
		return a.stream("/code", map[string]any{"context": map[string]any{"id": ctxID}, "code": code})
	}
	resultOf := func(evs []event, mime string) (string, bool) {
		for _, ev := range evs {
			if ev.Type == "result" {
				if s, ok := ev.Results[mime].(string); ok {
					return s, true
				}
			}
		}
		return "", false
	}

	var first, second string
	t.Run("contexts keep state and are isolated", func(t *testing.T) {
		a := agentOf.as(t)
		first, second = newContext(t, a, "python"), newContext(t, a, "python")
		if evs := runCode(a, first, "x = 41"); lastEvent(evs).Type != "execution_complete" {
			t.Fatalf("x = 41: %+v", evs)
		}
		evs := runCode(a, first, "x + 1")
		if got, ok := resultOf(evs, "text"); !ok || got != "42" {
			t.Fatalf("x + 1 in the first context: %+v", evs)
		}
		if lastEvent(evs).Type != "execution_complete" {
			t.Fatalf("x + 1 ends with %+v", lastEvent(evs))
		}
		counted := false
		for _, ev := range evs {
			counted = counted || ev.Type == "execution_count"
		}
		if !counted {
			t.Errorf("no execution_count event: %v", eventTypes(evs))
		}
		// The error event carries ename, evalue and the traceback.
		resp := a.request("POST", "/code", strings.NewReader(`{"context":{"id":"`+second+`"},"code":"x + 1"}`), "application/json")
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var errEvent struct {
			Type  string `json:"type"`
			Error struct {
				Ename     string   `json:"ename"`
				Evalue    string   `json:"evalue"`
				Traceback []string `json:"traceback"`
			} `json:"error"`
		}
		for _, line := range strings.Split(string(raw), "\n") {
			line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "data:"))
			if strings.Contains(line, `"type":"error"`) {
				_ = json.Unmarshal([]byte(line), &errEvent)
			}
		}
		if errEvent.Type != "error" || errEvent.Error.Ename != "NameError" || !strings.Contains(errEvent.Error.Evalue, "'x'") ||
			len(errEvent.Error.Traceback) == 0 || !strings.Contains(strings.Join(errEvent.Error.Traceback, "\n"), "NameError") {
			t.Fatalf("x + 1 in the second context: %s", raw)
		}
	})

	t.Run("stdout and stderr", func(t *testing.T) {
		a := agentOf.as(t)
		evs := runCode(a, first, "import sys\nprint('out')\nprint('err', file=sys.stderr)")
		var out, errOut string
		for _, ev := range evs {
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

	t.Run("matplotlib figure is a PNG that decodes", func(t *testing.T) {
		a := agentOf.as(t)
		evs := runCode(a, first, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()")
		s, ok := resultOf(evs, "image/png")
		if !ok {
			t.Fatalf("no image/png result: %+v", eventTypes(evs))
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
		if err != nil {
			t.Fatalf("image/png is not base64: %v", err)
		}
		img, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("image/png does not decode: %v", err)
		}
		if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
			t.Fatalf("figure is %v", b)
		}
	})

	t.Run("DataFrame gives HTML", func(t *testing.T) {
		a := agentOf.as(t)
		evs := runCode(a, first, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
		html, ok := resultOf(evs, "text/html")
		if !ok || !strings.Contains(html, "<table") || !strings.Contains(html, "<th>b</th>") {
			t.Fatalf("no HTML table: %+v", evs)
		}
		if text, _ := resultOf(evs, "text"); !strings.Contains(text, "a") {
			t.Fatalf("no text/plain beside the HTML: %q", text)
		}
	})

	t.Run("interrupt stops a running cell", func(t *testing.T) {
		a := agentOf.as(t)
		done := make(chan []event, 1)
		resp := a.request("POST", "/code", strings.NewReader(`{"context":{"id":"`+second+`"},"code":"import time\ntime.sleep(100)"}`), "application/json")
		defer resp.Body.Close()
		go func() { evs, _ := collectEvents(resp.Body); done <- evs }()
		time.Sleep(time.Second)
		start := time.Now()
		a.mustCall(200, "DELETE", "/code?id="+url.QueryEscape(second), nil)
		select {
		case evs := <-done:
			if last := lastEvent(evs); last.Type != "error" || last.Error == nil || last.Error.Ename != "KeyboardInterrupt" {
				t.Fatalf("interrupted cell ends with %+v", last)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("cell stopped %s after the interrupt", d)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("cell still running 15s after the interrupt")
		}
		if got, _ := resultOf(runCode(a, second, "6 * 7"), "text"); got != "42" {
			t.Fatalf("context unusable after interrupt: %q", got)
		}
	})

	t.Run("bash context is a persistent shell", func(t *testing.T) {
		a := agentOf.as(t)
		sh := newContext(t, a, "bash")
		if evs := runCode(a, sh, "cd /usr && export CI_VAR=kept"); lastEvent(evs).Type != "execution_complete" {
			t.Fatalf("setup: %+v", evs)
		}
		evs := runCode(a, sh, `echo "$(pwd) $CI_VAR"`)
		var out string
		for _, ev := range evs {
			if ev.Type == "stdout" {
				out += ev.Text
			}
		}
		if strings.TrimSpace(out) != "/usr kept" {
			t.Fatalf("bash context output %q", out)
		}
	})

	t.Run("context list get delete", func(t *testing.T) {
		a := agentOf.as(t)
		var list []struct {
			ID       string `json:"id"`
			Language string `json:"language"`
		}
		if err := json.Unmarshal(a.mustCall(200, "GET", "/code/contexts?language=python", nil).Body, &list); err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, c := range list {
			if c.Language != "python" {
				t.Fatalf("list?language=python gave %+v", c)
			}
			ids[c.ID] = true
		}
		if !ids[first] || !ids[second] {
			t.Fatalf("list %+v lacks %s or %s", list, first, second)
		}
		if c := a.mustCall(200, "GET", "/code/contexts/"+first, nil).JSON(t); c["id"] != first {
			t.Fatalf("get context: %v", c)
		}
		a.mustCall(200, "DELETE", "/code/contexts/"+first, nil)
		expectError(t, a.call("GET", "/code/contexts/"+first, nil), 404, "CONTEXT_NOT_FOUND")
		expectError(t, a.call("POST", "/code", map[string]any{"context": map[string]any{"id": first}, "code": "1"}), 404, "CONTEXT_NOT_FOUND")
		a.mustCall(200, "DELETE", "/code/contexts?language=python", nil)
		if err := json.Unmarshal(a.mustCall(200, "GET", "/code/contexts?language=python", nil).Body, &list); err != nil || len(list) != 0 {
			t.Fatalf("after deleting every python context: %+v %v", list, err)
		}
	})

	t.Run("default python context by language", func(t *testing.T) {
		a := agentOf.as(t)
		evs := a.stream("/code", map[string]any{"context": map[string]any{"language": "python"}, "code": "1 + 1"})
		if got, _ := resultOf(evs, "text"); got != "2" {
			t.Fatalf("1 + 1: %+v", evs)
		}
	})
}
