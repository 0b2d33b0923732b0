package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// cliEnv runs the built `sandgate` client commands with their own config directory.
type cliEnv struct {
	t      *testing.T
	config string // XDG_CONFIG_HOME
}

func newCLIEnv(t *testing.T) *cliEnv {
	return &cliEnv{t: t, config: t.TempDir()}
}

func (c *cliEnv) command(stdin string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(binDir, "sandgate"), args...)
	cmd.Dir = c.t.TempDir()
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+c.config, "SANDGATE_URL=", "SANDGATE_API_KEY=")
	cmd.Stdin = strings.NewReader(stdin)
	return cmd
}

// run runs the client and returns stdout, stderr and the exit code.
func (c *cliEnv) run(stdin string, args ...string) (string, string, int) {
	c.t.Helper()
	cmd := c.command(stdin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	code := 0
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	default:
		c.t.Fatalf("run sandgate %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// ok runs the client and fails the test unless it exits 0.
func (c *cliEnv) ok(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.run("", args...)
	if code != 0 {
		c.t.Fatalf("sandgate %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
	}
	return out
}

// okJSON runs the client with -o json and decodes its output into v.
func (c *cliEnv) okJSON(v any, args ...string) {
	c.t.Helper()
	out := c.ok(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("sandgate %v -o json: %v\n%s", args, err, out)
	}
}

// TestCLI drives the sandgate client commands as a user would, from login to rm.
func TestCLI(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	c := newCLIEnv(t)

	t.Run("login", func(t *testing.T) {
		if _, errOut, code := c.run("wrong-key\n", "login", "--url", "http://"+g.Addr); code == 0 || !strings.Contains(errOut, "INVALID_API_KEY") {
			t.Fatalf("login with a wrong key: exit %d, stderr %q", code, errOut)
		}
		out, errOut, code := c.run(e.APIKey+"\n", "login", "--url", "http://"+g.Addr)
		if code != 0 || !strings.Contains(out, "Logged in") {
			t.Fatalf("login: exit %d\n%s%s", code, out, errOut)
		}
		path := filepath.Join(c.config, "sandgate", "config.json")
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("config %s: %v, mode %v; want 0600", path, err, st.Mode())
		}
		var cfg struct{ URL, Key string }
		data, _ := os.ReadFile(path)
		if json.Unmarshal(data, &cfg) != nil || cfg.Key != e.APIKey || cfg.URL != "http://"+g.Addr {
			t.Fatalf("config = %s", data)
		}
	})

	var sb struct {
		ID     string
		Status struct{ State string }
	}
	c.okJSON(&sb, "sandbox", "create", "--timeout", "30m", "-l", "via=cli")
	t.Cleanup(func() { g.do("DELETE", "/v1/sandboxes/"+sb.ID, nil) })
	if sb.ID == "" || sb.Status.State != "Running" {
		t.Fatalf("create = %+v", sb)
	}

	t.Run("sandbox", func(t *testing.T) {
		var page struct {
			Items []struct{ ID string }
		}
		c.okJSON(&page, "sandbox", "ls", "-l", "via=cli")
		if len(page.Items) != 1 || page.Items[0].ID != sb.ID {
			t.Fatalf("ls = %+v", page)
		}
		if out := c.ok("sandbox", "ls"); !strings.Contains(out, "STATE") || !strings.Contains(out, sb.ID) || !strings.Contains(out, "via=cli") {
			t.Fatalf("ls table:\n%s", out)
		}
		if out := c.ok("sandbox", "get", sb.ID, "-o", "yaml"); !strings.Contains(out, "id: "+sb.ID) || !strings.Contains(out, "state: Running") {
			t.Fatalf("get yaml:\n%s", out)
		}
		var renewed struct{ ExpiresAt time.Time }
		c.okJSON(&renewed, "sandbox", "renew", sb.ID, "--for", "2h")
		if d := time.Until(renewed.ExpiresAt); d < 100*time.Minute || d > 2*time.Hour+time.Minute {
			t.Fatalf("renewed to %v", renewed.ExpiresAt)
		}
		c.ok("sandbox", "pause", sb.ID)
		waitFor(t, time.Minute, func() bool { return strings.Contains(c.ok("sandbox", "get", sb.ID), "Paused") }, "paused")
		_, errOut, code := c.run("", "sandbox", "pause", sb.ID)
		if code == 0 || !strings.Contains(errOut, "SANDBOX::NOT_RUNNING") {
			t.Fatalf("pause twice: exit %d, stderr %q", code, errOut)
		}
		c.ok("sandbox", "resume", sb.ID)
		waitFor(t, time.Minute, func() bool { return strings.Contains(c.ok("sandbox", "get", sb.ID), "Running") }, "resumed")
		_, errOut, code = c.run("", "sandbox", "get", "00000000-0000-0000-0000-000000000000")
		if code == 0 || !strings.Contains(errOut, "SANDBOX::NOT_FOUND") || !strings.Contains(errOut, "request ") {
			t.Fatalf("get unknown: exit %d, stderr %q", code, errOut)
		}
	})

	t.Run("exec", func(t *testing.T) {
		out, errOut, code := c.run("", "exec", sb.ID, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
		if out != "out\n" || errOut != "err\n" || code != 7 {
			t.Fatalf("exec: exit %d, stdout %q, stderr %q; want 7, out, err", code, out, errOut)
		}
		if out := c.ok("exec", sb.ID, "echo $((6*7)) | tr 4 x"); out != "x2\n" {
			t.Fatalf("exec shell line: %q", out)
		}
		if out := c.ok("exec", "-w", "/tmp", "-e", "A=b c", sb.ID, "--", "sh", "-c", `echo "$PWD $A"`); out != "/tmp b c\n" {
			t.Fatalf("exec -w -e: %q", out)
		}
		if out := c.ok("exec", sb.ID, "ls", "-d", "/tmp"); out != "/tmp\n" {
			t.Fatalf("exec without --: %q", out)
		}
		if _, _, code := c.run("", "exec", sb.ID, "--", "false"); code != 1 {
			t.Fatalf("exec false: exit %d", code)
		}
	})

	t.Run("cp", func(t *testing.T) {
		dir := t.TempDir()
		big := make([]byte, 5<<20+3)
		_, _ = rand.Read(big)
		src := filepath.Join(dir, "big.bin")
		if err := os.WriteFile(src, big, 0o640); err != nil {
			t.Fatal(err)
		}
		c.ok("cp", src, sb.ID+":/tmp/cp/big.bin")
		back := filepath.Join(dir, "back.bin")
		c.ok("cp", sb.ID+":/tmp/cp/big.bin", back)
		got, _ := os.ReadFile(back)
		if !bytes.Equal(got, big) {
			t.Fatalf("round trip: %d bytes, want %d identical", len(got), len(big))
		}
		if st, _ := os.Stat(back); st.Mode().Perm() != 0o640 {
			t.Fatalf("mode after round trip: %v", st.Mode())
		}
		if out := c.ok("exec", sb.ID, "sha256sum /tmp/cp/big.bin | cut -c1-64"); strings.TrimSpace(out) != sha256Hex(big) {
			t.Fatalf("checksum in the sandbox %q differs", out)
		}
		tree := filepath.Join(dir, "tree")
		for name, body := range map[string]string{"a.txt": "A", "sub/b.txt": "B\n", "sub/deeper/c.bin": string(big[:1000])} {
			os.MkdirAll(filepath.Dir(filepath.Join(tree, name)), 0o755)
			os.WriteFile(filepath.Join(tree, name), []byte(body), 0o644)
		}
		if _, errOut, code := c.run("", "cp", tree, sb.ID+":/tmp/tree"); code == 0 || !strings.Contains(errOut, "-r") {
			t.Fatalf("cp of a directory without -r: exit %d, %q", code, errOut)
		}
		c.ok("cp", "-r", tree, sb.ID+":/tmp/tree")
		if out := c.ok("exec", sb.ID, "cat /tmp/tree/sub/b.txt /tmp/tree/a.txt"); out != "B\nA\n" {
			t.Fatalf("uploaded tree: %q", out)
		}
		down := filepath.Join(dir, "down")
		c.ok("cp", "-r", sb.ID+":/tmp/tree", down)
		for name, body := range map[string]string{"a.txt": "A", "sub/b.txt": "B\n", "sub/deeper/c.bin": string(big[:1000])} {
			if got, err := os.ReadFile(filepath.Join(down, name)); err != nil || string(got) != body {
				t.Fatalf("downloaded %s: %v (%d bytes)", name, err, len(got))
			}
		}
	})

	t.Run("shell", func(t *testing.T) {
		cmd := c.command("", "shell", sb.ID, "--shell", "/bin/sh")
		cmd.Stdin = nil
		ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 90, Rows: 33})
		if err != nil {
			t.Fatal(err)
		}
		defer ptmx.Close()
		var mu sync.Mutex
		var screen bytes.Buffer
		go func() {
			buf := make([]byte, 4096)
			for {
				n, err := ptmx.Read(buf)
				mu.Lock()
				screen.Write(buf[:n])
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
		seen := func(s string) func() bool {
			return func() bool { mu.Lock(); defer mu.Unlock(); return strings.Contains(screen.String(), s) }
		}
		ptmx.Write([]byte("stty size; echo sum=$((40+2))\n"))
		waitFor(t, time.Minute, seen("sum=42"), "the shell's answer")
		if !seen("33 90")() {
			t.Fatalf("the sandbox terminal does not have this one's size:\n%s", screen.String())
		}
		pty.Setsize(ptmx, &pty.Winsize{Cols: 101, Rows: 27})
		waitFor(t, time.Minute, func() bool {
			ptmx.Write([]byte("stty size\n"))
			time.Sleep(200 * time.Millisecond)
			return seen("27 101")()
		}, "the resize")
		ptmx.Write([]byte("exit 3\n"))
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
				t.Fatalf("shell exit: %v, want code 3", err)
			}
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			t.Fatal("the shell did not end")
		}
	})

	t.Run("exec -i", func(t *testing.T) {
		cmd := c.command("", "exec", "-i", sb.ID, "--", "sh", "-c", "read x; echo got-$x; exit 4")
		cmd.Stdin = nil
		ptmx, err := pty.Start(cmd)
		if err != nil {
			t.Fatal(err)
		}
		defer ptmx.Close()
		ptmx.Write([]byte("abc\n"))
		out, _ := io.ReadAll(ptmx) // ends with EIO once the client exited
		var exitErr *exec.ExitError
		if err := cmd.Wait(); !errors.As(err, &exitErr) || exitErr.ExitCode() != 4 || !strings.Contains(string(out), "got-abc") {
			t.Fatalf("exec -i: %v, output %q; want exit 4 and got-abc", err, out)
		}
	})

	t.Run("preview", func(t *testing.T) {
		out := c.ok("preview", sb.ID, "8000", "--ttl", "10m")
		if !strings.HasPrefix(out, "http") || !strings.Contains(out, sb.ID) {
			t.Fatalf("preview: %q", out)
		}
	})

	t.Run("logs", func(t *testing.T) {
		a := g.agent(sb.ID)
		body, _ := json.Marshal(map[string]any{"command": "echo l1; sleep 1; echo l2", "background": true})
		resp := a.request("POST", "/command", bytes.NewReader(body), "application/json")
		evs := readEvents(t, resp.Body)
		resp.Body.Close()
		if out := c.ok("logs", sb.ID, evs[0].Text, "--follow"); out != "l1\nl2\n" {
			t.Fatalf("logs --follow: %q", out)
		}
	})

	t.Run("pools", func(t *testing.T) {
		c.ok("pool", "create", "cli-pool", "--buffer-min", "0", "--buffer-max", "1", "--pool-max", "2")
		c.ok("pool", "edit", "cli-pool", "--pool-max", "3")
		var pools []struct {
			Name         string
			CapacitySpec struct{ PoolMax int }
		}
		c.okJSON(&pools, "pool", "ls")
		if len(pools) != 1 || pools[0].Name != "cli-pool" || pools[0].CapacitySpec.PoolMax != 3 {
			t.Fatalf("pools = %+v", pools)
		}
		c.ok("pool", "rm", "cli-pool")
	})

	t.Run("batch", func(t *testing.T) {
		cmd := c.command("", "batch", "create", "--count", "20", "--timeout", "20m", "-o", "json")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("batch create: %v\n%s", err, errOut.String())
		}
		var b struct {
			ID      string
			Count   int
			Members []struct {
				ID     string
				Status struct{ State string }
			}
			Summary struct{ Running, Failed int }
		}
		if err := json.Unmarshal(out.Bytes(), &b); err != nil {
			t.Fatalf("batch -o json: %v\n%s", err, out.String())
		}
		t.Cleanup(func() { g.do("DELETE", "/v1/batches/"+b.ID, nil) })
		if b.Count != 20 || len(b.Members) != 20 || b.Summary.Running != 20 {
			t.Fatalf("batch = %+v", b)
		}
		for _, m := range b.Members {
			if m.Status.State != "Running" {
				t.Fatalf("member %s is %s", m.ID, m.Status.State)
			}
		}
		lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
		if last := lines[len(lines)-1]; !strings.Contains(last, "20/20 running") {
			t.Fatalf("progress ends with %q, want 20/20 running; all:\n%s", last, errOut.String())
		}
		table := c.ok("batch", "get", b.ID)
		if !strings.Contains(table, "20 running, 0 pending, 0 failed, 0 gone of 20") {
			t.Fatalf("batch summary:\n%s", table)
		}
		c.ok("batch", "rm", b.ID)
	})

	t.Run("admin", func(t *testing.T) {
		var tenant struct{ ID string }
		c.okJSON(&tenant, "tenant", "create", "cli-tenant", "--max-concurrent", "4")
		var key struct{ ID, Key, Role string }
		c.okJSON(&key, "key", "create", "--tenant", tenant.ID, "--role", "viewer")
		if key.Key == "" || key.Role != "viewer" {
			t.Fatalf("key = %+v", key)
		}
		_, errOut, code := c.run("", "sandbox", "create", "--api-key", key.Key)
		if code == 0 || !strings.Contains(errOut, "POLICY::DENIED") {
			t.Fatalf("viewer create: exit %d, stderr %q", code, errOut)
		}
		if out := c.ok("key", "ls", "--tenant", tenant.ID); !strings.Contains(out, key.ID) || strings.Contains(out, key.Key) {
			t.Fatalf("key ls:\n%s", out)
		}
		c.ok("key", "rm", "--tenant", tenant.ID, key.ID)
		var pol struct {
			Version string
			Modules []struct{ Name string }
		}
		c.okJSON(&pol, "policy", "get")
		if pol.Version == "" || len(pol.Modules) == 0 {
			t.Fatalf("policy get = %+v", pol)
		}
		if src := c.ok("policy", "get", "access.rego"); !strings.Contains(src, "package sandgate.access") {
			t.Fatalf("policy get access.rego: %.200s", src)
		}
		wasm := filepath.Join(t.TempDir(), "noop.wasm")
		os.WriteFile(wasm, buildNoopPlugin(t), 0o644)
		c.ok("plugin", "push", "cli-noop", wasm)
		if out := c.ok("plugin", "ls"); !strings.Contains(out, "cli-noop") {
			t.Fatalf("plugin ls:\n%s", out)
		}
		if out := c.ok("plugin", "get", "cli-noop", "-o", "yaml"); !strings.Contains(out, "name: cli-noop") {
			t.Fatalf("plugin get:\n%s", out)
		}
		c.ok("plugin", "rm", "cli-noop")
		rego := filepath.Join(t.TempDir(), "cli_extra.rego")
		os.WriteFile(rego, []byte("package sandgate.cliextra\n\nmarker := true\n"), 0o644)
		if out := c.ok("policy", "push", rego); !strings.Contains(out, "in force") {
			t.Fatalf("policy push: %q", out)
		}
		var pushed struct{ Overrides []string }
		c.okJSON(&pushed, "policy", "get")
		if !slices.Contains(pushed.Overrides, "cli_extra.rego") {
			t.Fatalf("pushed module not in force: %+v", pushed)
		}
		os.WriteFile(rego, []byte("package"), 0o644)
		if _, errOut, code := c.run("", "policy", "push", rego); code == 0 || !strings.Contains(errOut, "POLICY") {
			t.Fatalf("push of a broken module: exit %d, %q", code, errOut)
		}
		g.do("DELETE", "/v1/policy/overrides?module=cli_extra.rego", nil)
		c.ok("tenant", "edit", tenant.ID, "--max-concurrent", "6")
		var tget struct{ Quotas struct{ MaxConcurrent int } }
		c.okJSON(&tget, "tenant", "get", tenant.ID)
		if tget.Quotas.MaxConcurrent != 6 {
			t.Fatalf("tenant after edit: %+v", tget)
		}
		if out := c.ok("tenant", "ls"); !strings.Contains(out, tenant.ID) {
			t.Fatalf("tenant ls:\n%s", out)
		}
		out := c.ok("events", "--type", "sandbox.created")
		if !strings.Contains(out, "sandbox.created") || !strings.Contains(out, sb.ID) {
			t.Fatalf("events:\n%s", out)
		}
	})

	t.Run("rm", func(t *testing.T) {
		// From the newest event on: the removal cannot slip in before the stream starts.
		var newest struct{ Items []struct{ ID string } }
		c.okJSON(&newest, "events", "--newest", "--limit", "1")
		if len(newest.Items) != 1 {
			t.Fatalf("no newest event: %+v", newest)
		}
		follow := c.command("", "events", "--follow", "--after", newest.Items[0].ID, "--type", "sandbox.deleted", "-o", "json")
		stdout, err := follow.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := follow.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { follow.Process.Kill(); follow.Wait() }()
		got := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			got <- line
		}()
		c.ok("sandbox", "rm", sb.ID)
		select {
		case line := <-got:
			var ev struct{ Type, SandboxID string }
			if json.Unmarshal([]byte(line), &ev) != nil || ev.Type != "sandbox.deleted" || ev.SandboxID != sb.ID {
				t.Fatalf("followed event %q", line)
			}
		case <-time.After(time.Minute):
			t.Fatal("events --follow printed nothing for the removal")
		}
		_, errOut, code := c.run("", "exec", sb.ID, "--", "true")
		if code == 0 || !strings.Contains(errOut, "SANDBOX::NOT_FOUND") {
			t.Fatalf("exec in a removed sandbox: exit %d, %q", code, errOut)
		}
	})
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
