package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandgate "github.com/sandgate/sandgate/client"
)

// sdkClient returns a Go SDK client of g with key.
func sdkClient(t testing.TB, g *gateway, key string) *sandgate.Client {
	t.Helper()
	c, err := sandgate.New("http://"+g.Addr, key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// expectSDKError checks that err is the gateway's error answer with status and code
// (and a message), as expectError does for a raw response.
func expectSDKError(t testing.TB, err error, status int, code string) {
	t.Helper()
	var apiErr *sandgate.Error
	if !errors.As(err, &apiErr) || !errors.Is(err, &sandgate.Error{Code: code, Status: status}) || apiErr.Message == "" {
		t.Fatalf("err = %v, want %d %s with a message", err, status, code)
	}
}

// errOf drops a call's result and keeps its error: expectSDKError(t, errOf(c.Get(…)), …).
func errOf[T any](_ T, err error) error { return err }

// sdkCreate creates a Running sandbox of the base image and removes it at the end.
func sdkCreate(t testing.TB, ctx context.Context, c *sandgate.Client, req sandgate.CreateRequest) *sandgate.Sandbox {
	t.Helper()
	if req.Image == nil {
		req.Image = &sandgate.Image{URI: baseImage}
	}
	if req.Entrypoint == nil {
		req.Entrypoint = []string{"tail", "-f", "/dev/null"}
	}
	sb, err := c.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), sb.ID) })
	if sb.Status.State != sandgate.StateRunning {
		t.Fatalf("create: state %s, want Running", sb.Status.State)
	}
	return sb
}

// TestGoSDKLifecycle drives every lifecycle call of the Go SDK against the gateway, and
// checks that server errors come back typed.
func TestGoSDKLifecycle(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := sdkClient(t, g, e.APIKey)

	if err := c.Health(ctx); err != nil {
		t.Fatalf("health: %v", err)
	}
	who, err := c.Whoami(ctx)
	if err != nil || who.Tenant == "" || who.Role != sandgate.RoleAdmin {
		t.Fatalf("whoami = %+v, %v", who, err)
	}

	sb := sdkCreate(t, ctx, c, sandgate.CreateRequest{Timeout: sandgate.Seconds(10 * time.Minute), Metadata: map[string]string{"team": "sdk"}})
	got, err := c.GetSandbox(ctx, sb.ID)
	if err != nil || got.ID != sb.ID || got.Image == nil || got.Image.URI != baseImage || got.Metadata["team"] != "sdk" {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if _, err := c.WaitForState(ctx, sb.ID, sandgate.StateRunning); err != nil {
		t.Fatalf("wait running: %v", err)
	}
	page, err := c.ListSandboxes(ctx, sandgate.ListOptions{States: []string{"running"}, Metadata: map[string]string{"team": "sdk"}, PageSize: 5})
	if err != nil || len(page.Items) != 1 || page.Items[0].ID != sb.ID || page.Pagination.TotalItems != 1 {
		t.Fatalf("list = %+v, %v", page, err)
	}
	all, err := c.ListAllSandboxes(ctx, sandgate.ListOptions{})
	if err != nil || len(all) != 1 {
		t.Fatalf("list all = %d, %v", len(all), err)
	}
	v := "yes"
	patched, err := c.PatchMetadata(ctx, sb.ID, map[string]*string{"team": nil, "sdk": &v})
	if err != nil || patched.Metadata["sdk"] != "yes" || patched.Metadata["team"] != "" {
		t.Fatalf("patch metadata = %+v, %v", patched, err)
	}
	want := time.Now().Add(30 * time.Minute).Truncate(time.Second)
	exp, err := c.RenewSandbox(ctx, sb.ID, want)
	if err != nil || !exp.Equal(want) {
		t.Fatalf("renew = %v, %v; want %v", exp, err, want)
	}
	_, err = c.RenewSandbox(ctx, sb.ID, time.Now().Add(-time.Hour))
	if !errors.Is(err, sandgate.ErrInvalidExpiration) {
		t.Fatalf("renew into the past: %v, want ErrInvalidExpiration", err)
	}

	ep, err := c.GetEndpoint(ctx, sb.ID, sandgate.AgentPort)
	if err != nil || !strings.Contains(ep.Endpoint, sb.ID) || len(ep.Headers) == 0 {
		t.Fatalf("endpoint = %+v, %v", ep, err)
	}
	link, err := c.PreviewLink(ctx, sb.ID, 8000, 10*time.Minute)
	if err != nil || link.URL == "" || link.ExpiresAt == nil {
		t.Fatalf("preview link = %+v, %v", link, err)
	}
	if err := c.RotateAccess(ctx, sb.ID); err != nil {
		t.Fatalf("rotate access: %v", err)
	}

	if err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if _, err := c.WaitForState(ctx, sb.ID, sandgate.StatePaused); err != nil {
		t.Fatalf("wait paused: %v", err)
	}
	if err := c.PauseSandbox(ctx, sb.ID); !errors.Is(err, sandgate.ErrNotRunning) {
		t.Fatalf("pause twice: %v, want ErrNotRunning", err)
	}
	if err := c.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if _, err := c.WaitForState(ctx, sb.ID, sandgate.StateRunning); err != nil {
		t.Fatalf("wait resumed: %v", err)
	}
	if err := c.ResumeSandbox(ctx, sb.ID); !errors.Is(err, sandgate.ErrNotPaused) {
		t.Fatalf("resume twice: %v, want ErrNotPaused", err)
	}

	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	_, err = c.GetSandbox(ctx, sb.ID)
	var apiErr *sandgate.Error
	if !errors.Is(err, sandgate.ErrNotFound) || !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.RequestID == "" || apiErr.Message == "" {
		t.Fatalf("get deleted: %#v, want a 404 ErrNotFound with message and request id", err)
	}
	if _, err := c.CreateSandbox(ctx, sandgate.CreateRequest{Entrypoint: []string{"true"}}); !errors.Is(err, sandgate.ErrInvalidParameter) {
		t.Fatalf("create without image: %v, want ErrInvalidParameter", err)
	}
	bad := sdkClient(t, g, "not-a-key")
	if _, err := bad.ListSandboxes(ctx, sandgate.ListOptions{}); !errors.Is(err, sandgate.ErrInvalidAPIKey) {
		t.Fatalf("wrong key: %v, want ErrInvalidAPIKey", err)
	}
	if _, err := sdkClient(t, g, "").ListSandboxes(ctx, sandgate.ListOptions{}); !errors.Is(err, sandgate.ErrMissingAPIKey) {
		t.Fatalf("no key: %v, want ErrMissingAPIKey", err)
	}
}

// TestGoSDKAgent drives the agent calls of the Go SDK (commands, sessions, code, files,
// PTY, metrics) and the egress client through the gateway.
func TestGoSDKAgent(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := sdkClient(t, g, e.APIKey)
	sb := sdkCreate(t, ctx, c, sandgate.CreateRequest{NetworkPolicy: &sandgate.NetworkPolicy{DefaultAction: "deny", Egress: []sandgate.EgressRule{{Action: "allow", Target: "example.com"}}}})
	a, err := c.Agent(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("commands", func(t *testing.T) {
		res, err := a.Exec(ctx, "echo out; echo err >&2; exit 3")
		if err != nil || res.Stdout != "out\n" || res.Stderr != "err\n" || res.ExitCode != 3 || res.ID == "" {
			t.Fatalf("exec = %+v, %v", res, err)
		}
		var lines []string
		res, err = a.Run(ctx, sandgate.Command{Command: "pwd; echo $GREETING", Cwd: "/tmp", Env: map[string]string{"GREETING": "hi"}}, sandgate.Handlers{Stdout: func(l string) { lines = append(lines, l) }})
		if err != nil || res.ExitCode != 0 || strings.Join(lines, ",") != "/tmp,hi" {
			t.Fatalf("run = %+v %q, %v", res, lines, err)
		}
		var types []string
		for ev, err := range a.Stream(ctx, sandgate.Command{Command: "echo streamed"}) {
			if err != nil {
				t.Fatal(err)
			}
			types = append(types, ev.Type)
		}
		if strings.Join(types, ",") != "init,stdout,execution_complete" {
			t.Fatalf("stream types = %v", types)
		}
		bg, err := a.Run(ctx, sandgate.Command{Command: "echo one; echo two; sleep 600", Background: true}, sandgate.Handlers{})
		if err != nil || bg.ID == "" {
			t.Fatalf("background = %+v, %v", bg, err)
		}
		waitFor(t, time.Minute, func() bool {
			out, _, err := a.CommandLogs(ctx, bg.ID, 0)
			return err == nil && out == "one\ntwo\n"
		}, "background output")
		if _, next, _ := a.CommandLogs(ctx, bg.ID, 0); next != 2 {
			t.Fatalf("logs cursor = %d, want 2", next)
		}
		st, err := a.CommandStatus(ctx, bg.ID)
		if err != nil || !st.Running {
			t.Fatalf("status = %+v, %v", st, err)
		}
		if err := a.Interrupt(ctx, bg.ID); err != nil {
			t.Fatalf("interrupt: %v", err)
		}
		waitFor(t, time.Minute, func() bool {
			st, err := a.CommandStatus(ctx, bg.ID)
			return err == nil && !st.Running
		}, "interrupted")
		sid, err := a.CreateSession(ctx, "/tmp")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.RunInSession(ctx, sid, sandgate.Command{Command: "cd /etc && export X=kept"}, sandgate.Handlers{}); err != nil {
			t.Fatal(err)
		}
		res, err = a.RunInSession(ctx, sid, sandgate.Command{Command: "echo $PWD $X"}, sandgate.Handlers{})
		if err != nil || res.Stdout != "/etc kept\n" {
			t.Fatalf("session = %+v, %v", res, err)
		}
		if err := a.DeleteSession(ctx, sid); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("code", func(t *testing.T) {
		// Kernels ship in the code-interpreter image only.
		ci := sdkCreate(t, ctx, c, sandgate.CreateRequest{Image: &sandgate.Image{URI: strings.Replace(baseImage, "/base:", "/code-interpreter:", 1)}})
		a, err := c.Agent(ctx, ci.ID)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := a.CreateCodeContext(ctx, "python", "")
		if err != nil || cc.ID == "" {
			t.Fatalf("context = %+v, %v", cc, err)
		}
		if _, err := a.RunCode(ctx, cc.ID, "", "x = 41", sandgate.Handlers{}); err != nil {
			t.Fatal(err)
		}
		res, err := a.RunCode(ctx, cc.ID, "", "print('p'); x + 1", sandgate.Handlers{})
		if err != nil || res.Stdout != "p\n" || len(res.Results) != 1 || res.Results[0]["text"] != "42" {
			t.Fatalf("run code = %+v, %v", res, err)
		}
		res, err = a.RunCode(ctx, cc.ID, "", "1/0", sandgate.Handlers{})
		if err != nil || res.Error == nil || res.Error.Name != "ZeroDivisionError" || res.ExitCode == 0 {
			t.Fatalf("raise = %+v, %v", res, err)
		}
		list, err := a.ListCodeContexts(ctx, "python")
		if err != nil || len(list) == 0 {
			t.Fatalf("contexts = %+v, %v", list, err)
		}
		if err := a.DeleteCodeContext(ctx, cc.ID); err != nil {
			t.Fatal(err)
		}
		// A language the image has no kernel for names the ones it has.
		var noKernel *sandgate.Error
		if _, err := a.CreateCodeContext(ctx, "java", ""); !errors.As(err, &noKernel) || noKernel.Code != "NOT_SUPPORTED" ||
			!strings.Contains(noKernel.Message, `"java"`) || !strings.Contains(noKernel.Message, "bash, python") {
			t.Fatalf("java context: %v, want NOT_SUPPORTED naming the image's languages", err)
		}
		// No interrupt target remains: the agent answers with a typed error.
		var apiErr *sandgate.Error
		if err := a.InterruptCode(ctx, cc.ID); !errors.As(err, &apiErr) || apiErr.Code == "" {
			t.Fatalf("interrupt a deleted context: %v, want a server error", err)
		}
	})

	t.Run("files", func(t *testing.T) {
		big := make([]byte, 3<<20+17)
		_, _ = rand.Read(big)
		if err := a.Upload(ctx, "/tmp/sdk/deep/big.bin", bytes.NewReader(big), 0o600); err != nil {
			t.Fatalf("upload: %v", err)
		}
		body, size, err := a.Download(ctx, "/tmp/sdk/deep/big.bin")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(body)
		body.Close()
		if !bytes.Equal(got, big) || size != int64(len(big)) {
			t.Fatalf("download: %d bytes (size %d), want the %d uploaded", len(got), size, len(big))
		}
		tail, _, err := a.DownloadRange(ctx, "/tmp/sdk/deep/big.bin", int64(len(big)-17))
		if err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(tail)
		tail.Close()
		if !bytes.Equal(rest, big[len(big)-17:]) {
			t.Fatalf("range: %d bytes", len(rest))
		}
		info, err := a.Stat(ctx, "/tmp/sdk/deep/big.bin")
		if fi := info["/tmp/sdk/deep/big.bin"]; err != nil || fi.Size != int64(len(big)) || fi.Mode.Perm() != 0o600 || fi.Type != "file" {
			t.Fatalf("stat = %+v, %v", info, err)
		}
		if err := a.WriteFile(ctx, "/tmp/sdk/a.txt", []byte("hello world, hello"), 0); err != nil {
			t.Fatal(err)
		}
		counts, err := a.Replace(ctx, map[string]sandgate.Replacement{"/tmp/sdk/a.txt": {Old: "hello", New: "bye"}})
		if err != nil || counts["/tmp/sdk/a.txt"] != 2 {
			t.Fatalf("replace = %v, %v", counts, err)
		}
		if data, err := a.ReadFile(ctx, "/tmp/sdk/a.txt"); err != nil || string(data) != "bye world, bye" {
			t.Fatalf("read = %q, %v", data, err)
		}
		if err := a.Move(ctx, "/tmp/sdk/a.txt", "/tmp/sdk/b.txt"); err != nil {
			t.Fatal(err)
		}
		if err := a.Chmod(ctx, "/tmp/sdk/b.txt", 0o640); err != nil {
			t.Fatal(err)
		}
		if err := a.Mkdir(ctx, "/tmp/sdk/empty/dir", 0); err != nil {
			t.Fatal(err)
		}
		entries, err := a.ListDir(ctx, "/tmp/sdk", 1)
		names := map[string]string{}
		for _, fi := range entries {
			names[filepath.Base(fi.Path)] = fi.Type
		}
		if err != nil || names["b.txt"] != "file" || names["deep"] != "directory" || names["empty"] != "directory" {
			t.Fatalf("list = %v, %v", names, err)
		}
		found, err := a.Search(ctx, "/tmp/sdk", "**/*.txt")
		if err != nil || len(found) != 1 || found[0].Path != "/tmp/sdk/b.txt" || found[0].Mode.Perm() != 0o640 {
			t.Fatalf("search = %+v, %v", found, err)
		}
		if err := a.Remove(ctx, "/tmp/sdk/b.txt"); err != nil {
			t.Fatal(err)
		}
		if err := a.RemoveAll(ctx, "/tmp/sdk"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.ReadFile(ctx, "/tmp/sdk/deep/big.bin"); err == nil {
			t.Fatal("a removed file still downloads")
		}
	})

	t.Run("pty", func(t *testing.T) {
		term, err := a.OpenPTY(ctx, sandgate.PTYRequest{Command: "/bin/sh", Cols: 100, Rows: 30})
		if err != nil {
			t.Fatal(err)
		}
		defer a.DeletePTY(context.Background(), term.ID)
		if err := term.Resize(120, 40); err != nil {
			t.Fatal(err)
		}
		if _, err := term.Write([]byte("stty size; echo pty-$((6*7)); exit 5\n")); err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(term)
		if !strings.Contains(string(out), "40 120") || !strings.Contains(string(out), "pty-42") {
			t.Fatalf("terminal printed %q", out)
		}
		if code, ok := term.ExitCode(); !ok || code != 5 {
			t.Fatalf("exit code = %d, %v; want 5", code, ok)
		}
		term.Close()

		sleeper, err := a.OpenPTY(ctx, sandgate.PTYRequest{Command: "sleep 300"})
		if err != nil {
			t.Fatal(err)
		}
		defer a.DeletePTY(context.Background(), sleeper.ID)
		if err := sleeper.Signal("SIGKILL"); err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, sleeper)
		if code, ok := sleeper.ExitCode(); !ok || code == 0 {
			t.Fatalf("killed terminal: exit code %d, %v; want a non-zero one", code, ok)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		m, err := a.Metrics(ctx)
		if err != nil || m.CPUCount <= 0 || m.MemTotalMiB <= 0 {
			t.Fatalf("metrics = %+v, %v", m, err)
		}
	})

	t.Run("egress", func(t *testing.T) {
		eg, err := c.Egress(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		st, err := eg.Get(ctx)
		if err != nil || st.Policy == nil || st.Policy.DefaultAction != "deny" || len(st.Policy.Egress) != 1 {
			t.Fatalf("egress = %+v, %v", st, err)
		}
		if err := eg.Patch(ctx, []sandgate.EgressRule{{Action: "allow", Target: "*.example.org"}}); err != nil {
			t.Fatal(err)
		}
		if st, _ = eg.Get(ctx); st == nil || len(st.Policy.Egress) != 2 || st.Policy.Egress[0].Target != "*.example.org" {
			t.Fatalf("after patch: %+v", st)
		}
		if err := eg.Remove(ctx, []string{"example.com"}); err != nil {
			t.Fatal(err)
		}
		if st, _ = eg.Get(ctx); st == nil || len(st.Policy.Egress) != 1 {
			t.Fatalf("after remove: %+v", st)
		}
		if err := eg.Replace(ctx, sandgate.NetworkPolicy{DefaultAction: "deny"}); err != nil {
			t.Fatal(err)
		}
		if st, _ = eg.Get(ctx); st == nil || st.Policy == nil || st.Policy.DefaultAction != "deny" || len(st.Policy.Egress) != 0 {
			t.Fatalf("after replace: %+v", st)
		}
		// The egress API answers errors in plain text; they still come back typed.
		err = eg.Replace(ctx, sandgate.NetworkPolicy{DefaultAction: "sometimes"})
		var apiErr *sandgate.Error
		if !errors.As(err, &apiErr) || apiErr.Status != 400 || apiErr.Code == "" || apiErr.Message == "" {
			t.Fatalf("invalid egress policy: %#v, want a typed 400", err)
		}
	})
}

// TestGoSDKAdmin drives the pool, batch, tenant, key, policy, plugin and event calls of
// the Go SDK.
func TestGoSDKAdmin(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := sdkClient(t, g, e.APIKey)
	tmpl := sandgate.CreateRequest{Image: &sandgate.Image{URI: baseImage}, Entrypoint: []string{"tail", "-f", "/dev/null"}}

	t.Run("pools and batches", func(t *testing.T) {
		p, err := c.CreatePool(ctx, sandgate.PoolRequest{Name: "sdk-pool", Template: tmpl, CapacitySpec: sandgate.Capacity{BufferMin: 1, BufferMax: 2, PoolMin: 0, PoolMax: 4}})
		if err != nil || p.Name != "sdk-pool" {
			t.Fatalf("create pool = %+v, %v", p, err)
		}
		defer c.DeletePool(context.Background(), "sdk-pool")
		if _, err := c.CreatePool(ctx, sandgate.PoolRequest{Name: "sdk-pool", Template: tmpl, CapacitySpec: p.CapacitySpec}); err == nil {
			t.Fatal("a second pool of the same name was created")
		}
		p, err = c.UpdatePool(ctx, sandgate.PoolRequest{Name: "sdk-pool", Template: tmpl, CapacitySpec: sandgate.Capacity{BufferMin: 2, BufferMax: 3, PoolMax: 4}})
		if err != nil || p.CapacitySpec.BufferMin != 2 {
			t.Fatalf("update pool = %+v, %v", p, err)
		}
		waitFor(t, 3*time.Minute, func() bool {
			p, err := c.GetPool(ctx, "sdk-pool")
			return err == nil && p.Status.Available >= 2
		}, "pool warm")
		pools, err := c.ListPools(ctx)
		if err != nil || len(pools) != 1 {
			t.Fatalf("list pools = %+v, %v", pools, err)
		}
		b, err := c.CreateBatch(ctx, sandgate.BatchRequest{Count: 3, PoolRef: "sdk-pool", Metadata: map[string]string{"batch": "sdk"}})
		if err != nil || b.ID == "" || b.Count != 3 {
			t.Fatalf("create batch = %+v, %v", b, err)
		}
		looks := 0
		done, err := c.WaitBatch(ctx, b.ID, func(*sandgate.Batch) { looks++ })
		if err != nil || done.Summary.Running != 3 || len(done.Members) != 3 || looks == 0 {
			t.Fatalf("wait batch = %+v, %v (%d looks)", done, err, looks)
		}
		if got, err := c.GetBatch(ctx, b.ID); err != nil || got.ID != b.ID {
			t.Fatalf("get batch = %+v, %v", got, err)
		}
		if err := c.DeleteBatch(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		if err := c.DeletePool(ctx, "sdk-pool"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetPool(ctx, "sdk-pool"); err == nil {
			t.Fatal("deleted pool still answers")
		}
	})

	t.Run("tenants and keys", func(t *testing.T) {
		tn, err := c.CreateTenant(ctx, sandgate.TenantRequest{Name: "sdk", Quotas: &sandgate.Quotas{MaxConcurrent: 2}})
		if err != nil || tn.ID == "" {
			t.Fatalf("create tenant = %+v, %v", tn, err)
		}
		if got, err := c.GetTenant(ctx, tn.ID); err != nil || got.Quotas.MaxConcurrent != 2 {
			t.Fatalf("get tenant = %+v, %v", got, err)
		}
		if got, err := c.UpdateTenant(ctx, tn.ID, sandgate.TenantRequest{Quotas: &sandgate.Quotas{MaxConcurrent: 3}}); err != nil || got.Quotas.MaxConcurrent != 3 {
			t.Fatalf("update tenant = %+v, %v", got, err)
		}
		if list, err := c.ListTenants(ctx); err != nil || len(list) == 0 {
			t.Fatalf("list tenants = %+v, %v", list, err)
		}
		k, err := c.CreateKey(ctx, tn.ID, sandgate.RoleViewer)
		if err != nil || k.Key == "" || k.Role != sandgate.RoleViewer {
			t.Fatalf("create key = %+v, %v", k, err)
		}
		keys, err := c.ListKeys(ctx, tn.ID)
		if err != nil || len(keys) != 1 || keys[0].Key != "" {
			t.Fatalf("list keys = %+v, %v", keys, err)
		}
		viewer := sdkClient(t, g, k.Key)
		if w, err := viewer.Whoami(ctx); err != nil || w.Tenant != tn.ID || w.Role != sandgate.RoleViewer {
			t.Fatalf("viewer whoami = %+v, %v", w, err)
		}
		if _, err := viewer.CreateSandbox(ctx, tmpl); !errors.Is(err, sandgate.ErrDenied) {
			t.Fatalf("viewer create: %v, want ErrDenied", err)
		}
		if err := c.RevokeKey(ctx, tn.ID, k.ID); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, func() bool {
			_, err := viewer.Whoami(ctx)
			return errors.Is(err, sandgate.ErrInvalidAPIKey)
		}, "revoked key refused")
	})

	t.Run("policy", func(t *testing.T) {
		p, err := c.GetPolicy(ctx)
		if err != nil || p.Version == "" || len(p.Modules) == 0 {
			t.Fatalf("get policy = %+v, %v", p, err)
		}
		in := map[string]any{"principal": map[string]any{"kind": "api_key", "id": "k", "tenant": "t1", "role": "viewer"}, "tenant": "t1",
			"action": "sandbox.create", "resource": map[string]any{"kind": "sandbox", "tenant": "t1"}, "request": map[string]any{"method": "POST", "path": "/v1/sandboxes"}}
		res, err := c.EvalPolicy(ctx, "access", in, nil)
		if err != nil || !bytes.Contains(res, []byte("POLICY::DENIED")) {
			t.Fatalf("eval = %s, %v", res, err)
		}
		rep, err := c.TestPolicy(ctx, nil)
		if err != nil || len(rep) == 0 {
			t.Fatalf("test = %s, %v", rep, err)
		}
		pushed, err := c.PushPolicy(ctx, map[string]string{"sdk_extra.rego": "package sandgate.sdkextra\n\nmarker := true\n"})
		if err != nil || !strings.Contains(strings.Join(pushed.Overrides, ","), "sdk_extra.rego") {
			t.Fatalf("push = %+v, %v", pushed, err)
		}
		if _, err := c.PushPolicy(ctx, map[string]string{"sdk_extra.rego": "package"}); err == nil {
			t.Fatal("a module that does not compile was accepted")
		}
		reset, err := c.ResetPolicy(ctx, "sdk_extra.rego")
		if err != nil || strings.Contains(strings.Join(reset.Overrides, ","), "sdk_extra.rego") {
			t.Fatalf("reset = %+v, %v", reset, err)
		}
	})

	t.Run("plugins", func(t *testing.T) {
		wasm := buildNoopPlugin(t)
		pl, err := c.PushPlugin(ctx, "sdk-noop", wasm, sandgate.PluginConfig{Hooks: []string{"on_event"}})
		if err != nil || pl.Name != "sdk-noop" || pl.Hash == "" {
			t.Fatalf("push plugin = %+v, %v", pl, err)
		}
		if list, err := c.ListPlugins(ctx); err != nil || len(list) != 1 {
			t.Fatalf("list plugins = %+v, %v", list, err)
		}
		if got, err := c.GetPlugin(ctx, "sdk-noop"); err != nil || got.Hash != pl.Hash {
			t.Fatalf("get plugin = %+v, %v", got, err)
		}
		if _, err := c.PushPlugin(ctx, "sdk-bad", []byte("not wasm"), sandgate.PluginConfig{Hooks: []string{"on_event"}}); err == nil {
			t.Fatal("a module that is not WebAssembly was accepted")
		}
		if err := c.DeletePlugin(ctx, "sdk-noop"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("events", func(t *testing.T) {
		fctx, stop := context.WithCancel(ctx)
		defer stop()
		got := make(chan sandgate.Event, 16)
		go func() {
			for ev, err := range c.FollowEvents(fctx, sandgate.EventQuery{Types: []string{"sandbox.created"}}) {
				if err != nil {
					close(got)
					return
				}
				got <- ev
			}
			close(got)
		}()
		// The stream is subscribed once it answered; create until an event arrives.
		sb := sdkCreate(t, ctx, c, sandgate.CreateRequest{})
		select {
		case ev := <-got:
			if ev.Type != "sandbox.created" || ev.SandboxID == "" {
				t.Fatalf("followed event = %+v", ev)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("no sandbox.created event on the followed stream")
		}
		page, err := c.ListEvents(ctx, sandgate.EventQuery{Sandbox: sb.ID, Newest: true, Limit: 50})
		if err != nil || len(page.Items) == 0 {
			t.Fatalf("list events = %+v, %v", page, err)
		}
		for _, ev := range page.Items {
			if ev.SandboxID != sb.ID {
				t.Fatalf("event of another sandbox: %+v", ev)
			}
		}
	})
}

// buildNoopPlugin compiles plugins/examples/noop for wasip1.
func buildNoopPlugin(t testing.TB) []byte { return buildPlugin(t, "./plugins/examples/noop") }
