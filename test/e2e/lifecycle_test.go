package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The spine suite runs twice: against a real redis-server and with the embedded store.
func TestLifecycleWithRedis(t *testing.T)     { lifecycleSuite(t, startRedis(t)) }
func TestLifecycleEmbeddedStore(t *testing.T) { lifecycleSuite(t, nil) }

func lifecycleSuite(t *testing.T, redis *redisServer) {
	e := newEnv(t, redis)
	g := e.startGateway()

	id := g.createSandbox(map[string]any{
		"metadata":       map[string]string{"team": "alpha", "purpose": "e2e"},
		"env":            map[string]string{"GREETING": "hello from env"},
		"resourceLimits": map[string]string{"cpu": "500m", "memory": "256Mi"},
		"timeout":        600,
	})
	other := g.createSandbox(map[string]any{"metadata": map[string]string{"team": "beta"}})

	t.Run("get", func(t *testing.T) {
		r := g.do("GET", "/v1/sandboxes/"+id, nil)
		if r.Status != 200 {
			t.Fatalf("get: %d %s", r.Status, r.Body)
		}
		m := r.JSON(t)
		if m["image"].(map[string]any)["uri"] != baseImage || m["status"].(map[string]any)["state"] != "Running" {
			t.Fatalf("get: %s", r.Body)
		}
		if m["metadata"].(map[string]any)["team"] != "alpha" || m["expiresAt"] == nil {
			t.Fatalf("get: metadata or expiry missing: %s", r.Body)
		}
		// The same routes answer without the /v1 prefix.
		if r := g.do("GET", "/sandboxes/"+id, nil); r.Status != 200 {
			t.Fatalf("get without /v1: %d", r.Status)
		}
	})

	t.Run("limits applied to the container", func(t *testing.T) {
		out, err := exec.Command("docker", "inspect", "-f", "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}} {{index .Config.Labels \"sandgate.io/id\"}} {{len .NetworkSettings.Ports}}", "sandgate-"+id).CombinedOutput()
		if err != nil {
			t.Fatalf("docker inspect: %v %s", err, out)
		}
		want := fmt.Sprintf("500000000 %d %s 0", 256<<20, id)
		if strings.TrimSpace(string(out)) != want {
			t.Fatalf("container limits/labels/ports = %q, want %q", strings.TrimSpace(string(out)), want)
		}
	})

	t.Run("commands through the endpoint", func(t *testing.T) {
		a := g.agent(id)
		evs := a.run("echo hello; echo \"$GREETING\"")
		if len(evs) == 0 || evs[0].Type != "init" || evs[0].Text == "" {
			t.Fatalf("first event should be init with a command id: %+v", evs)
		}
		if got := stdoutOf(evs); got != "hello\nhello from env" {
			t.Fatalf("stdout = %q", got)
		}
		if last := lastEvent(evs); last.Type != "execution_complete" {
			t.Fatalf("last event = %+v, want execution_complete", last)
		}
		evs = a.run("echo oops >&2; exit 3")
		last := lastEvent(evs)
		if last.Type != "error" || last.Error == nil || last.Error.Evalue != "3" || last.Error.Ename != "CommandExecError" {
			t.Fatalf("failing command: last event %+v", last)
		}
	})

	t.Run("agent refuses a wrong or missing token", func(t *testing.T) {
		a := g.agent(id)
		for name, hdr := range map[string]string{"wrong": "nope", "missing": ""} {
			req, _ := http.NewRequest("GET", a.base+"/ping", nil)
			if hdr != "" {
				req.Header.Set("X-EXECD-ACCESS-TOKEN", hdr)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 401 && resp.StatusCode != 403 {
				t.Errorf("%s token: status %d, want 401/403", name, resp.StatusCode)
			}
		}
		// Another sandbox's token does not open this one.
		b := g.agent(other)
		req, _ := http.NewRequest("GET", a.base+"/ping", nil)
		for k, v := range b.headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Errorf("neighbour's token: status %d, want 403", resp.StatusCode)
		}
	})

	t.Run("upload and download 1 MiB byte-exact", func(t *testing.T) {
		a := g.agent(id)
		data := make([]byte, 1<<20)
		for i := range data {
			data[i] = byte(rand.IntN(256))
		}
		uploadFile(t, a, "/tmp/e2e dir/blob.bin", data)
		resp := a.request("GET", "/files/download?path="+url.QueryEscape("/tmp/e2e dir/blob.bin"), nil, "")
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || sha256.Sum256(got) != sha256.Sum256(data) {
			t.Fatalf("download: status %d, %d bytes, hash differs", resp.StatusCode, len(got))
		}
		req, _ := http.NewRequest("GET", a.base+"/files/download?path="+url.QueryEscape("/tmp/e2e dir/blob.bin"), nil)
		for k, v := range a.headers {
			req.Header.Set(k, v)
		}
		req.Header.Set("Range", "bytes=100-199")
		rresp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		part, _ := io.ReadAll(rresp.Body)
		rresp.Body.Close()
		if rresp.StatusCode != 206 || !bytes.Equal(part, data[100:200]) {
			t.Fatalf("range download: status %d, %d bytes", rresp.StatusCode, len(part))
		}
		info := a.request("GET", "/files/info?path="+url.QueryEscape("/tmp/e2e dir/blob.bin"), nil, "")
		var infos map[string]struct {
			Size int64  `json:"size"`
			Type string `json:"type"`
		}
		_ = json.NewDecoder(info.Body).Decode(&infos)
		info.Body.Close()
		if fi := infos["/tmp/e2e dir/blob.bin"]; fi.Size != 1<<20 {
			t.Fatalf("files/info: %+v", infos)
		}
		list := a.request("GET", "/directories/list?path="+url.QueryEscape("/tmp/e2e dir"), nil, "")
		body, _ := io.ReadAll(list.Body)
		list.Body.Close()
		if list.StatusCode != 200 || !strings.Contains(string(body), "blob.bin") {
			t.Fatalf("directories/list: %d %s", list.StatusCode, body)
		}
	})

	t.Run("list filters and pages", func(t *testing.T) {
		r := g.do("GET", "/v1/sandboxes?metadata="+url.QueryEscape("team=alpha"), nil)
		m := r.JSON(t)
		items := m["items"].([]any)
		if len(items) != 1 || items[0].(map[string]any)["id"] != id {
			t.Fatalf("metadata filter: %s", r.Body)
		}
		r = g.do("GET", "/v1/sandboxes?state=running&state=Paused&pageSize=1&page=1", nil)
		m = r.JSON(t)
		p := m["pagination"].(map[string]any)
		if len(m["items"].([]any)) != 1 || p["totalItems"].(float64) != 2 || p["hasNextPage"] != true {
			t.Fatalf("state filter + paging: %s", r.Body)
		}
		// Newest first.
		if m["items"].([]any)[0].(map[string]any)["id"] != other {
			t.Fatalf("list is not newest first: %s", r.Body)
		}
		expectError(t, g.do("GET", "/v1/sandboxes?metadata=%25zz", nil), 400, "SANDBOX::INVALID_PARAMETER")
		expectError(t, g.do("GET", "/v1/sandboxes?pageSize=500", nil), 400, "SANDBOX::INVALID_PARAMETER")
	})

	t.Run("metadata merge patch", func(t *testing.T) {
		r := g.do("PATCH", "/v1/sandboxes/"+other+"/metadata", `{"team":null,"owner":"e2e"}`)
		if r.Status != 200 {
			t.Fatalf("patch: %d %s", r.Status, r.Body)
		}
		md := r.JSON(t)["metadata"].(map[string]any)
		if _, ok := md["team"]; ok || md["owner"] != "e2e" {
			t.Fatalf("patch result: %s", r.Body)
		}
		expectError(t, g.do("PATCH", "/v1/sandboxes/"+other+"/metadata", `{"sandgate.io/x":"y"}`), 400, "SANDBOX::INVALID_METADATA_LABEL")
	})

	t.Run("renew", func(t *testing.T) {
		want := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
		r := g.do("POST", "/v1/sandboxes/"+id+"/renew-expiration", map[string]string{"expiresAt": want.Format(time.RFC3339)})
		if r.Status != 200 {
			t.Fatalf("renew: %d %s", r.Status, r.Body)
		}
		got, _ := time.Parse(time.RFC3339, r.JSON(t)["expiresAt"].(string))
		if !got.Equal(want) {
			t.Fatalf("renew: expiresAt %v, want %v", got, want)
		}
		expectError(t, g.do("POST", "/v1/sandboxes/"+id+"/renew-expiration", map[string]string{"expiresAt": "2001-01-01T00:00:00Z"}), 400, "SANDBOX::INVALID_EXPIRATION")
	})

	t.Run("pause and resume", func(t *testing.T) {
		if r := g.do("POST", "/v1/sandboxes/"+other+"/pause", nil); r.Status != 202 {
			t.Fatalf("pause: %d %s", r.Status, r.Body)
		}
		expectError(t, g.do("POST", "/v1/sandboxes/"+other+"/pause", nil), 409, "SANDBOX::NOT_RUNNING")
		expectError(t, g.do("GET", "/sandboxes/"+other+"/proxy/44772/ping", nil), 503, "SANDBOX::NOT_RUNNING")
		if r := g.do("POST", "/v1/sandboxes/"+other+"/resume", nil); r.Status != 202 {
			t.Fatalf("resume: %d %s", r.Status, r.Body)
		}
		expectError(t, g.do("POST", "/v1/sandboxes/"+other+"/resume", nil), 409, "SANDBOX::NOT_PAUSED")
		if evs := g.agent(other).run("echo back"); stdoutOf(evs) != "back" {
			t.Fatalf("after resume: %+v", evs)
		}
	})

	t.Run("expiry removes the container", func(t *testing.T) {
		short := g.createSandbox(map[string]any{"timeout": 2})
		r := g.do("GET", "/v1/sandboxes/"+short, nil)
		exp, _ := time.Parse(time.RFC3339Nano, r.JSON(t)["expiresAt"].(string))
		waitFor(t, time.Until(exp)+10*time.Second, func() bool {
			return exec.Command("docker", "inspect", "sandgate-"+short).Run() != nil
		}, "the expired sandbox's container to go")
		if late := time.Since(exp); late > 4*time.Second {
			t.Errorf("container removed %s after expiresAt, want about 2 s", late)
		}
		// The record goes once the runtime's Delete has returned (the workload's
		// container goes first; its enforcer, its namespace holder and its volumes with
		// it, before the record): moments after the container, never before it.
		waitFor(t, 5*time.Second, func() bool { return g.do("GET", "/v1/sandboxes/"+short, nil).Status == 404 }, "the expired sandbox's record to go")
		expectError(t, g.do("GET", "/v1/sandboxes/"+short, nil), 404, "SANDBOX::NOT_FOUND")
	})

	t.Run("gateway restart keeps running sandboxes reachable", func(t *testing.T) {
		g.Stop()
		g = e.startGateway()
		r := g.do("GET", "/v1/sandboxes/"+id, nil)
		if r.Status != 200 || r.JSON(t)["status"].(map[string]any)["state"] != "Running" {
			t.Fatalf("after restart: %d %s", r.Status, r.Body)
		}
		if evs := g.agent(id).run("cat '/tmp/e2e dir/blob.bin' | wc -c"); stdoutOf(evs) != "1048576" {
			t.Fatalf("after restart: %+v", evs)
		}
		if redis == nil {
			// Rebuilt from labels: metadata survives even though the store was in memory.
			if md := r.JSON(t)["metadata"].(map[string]any); md["team"] != "alpha" {
				t.Fatalf("adopted record lost its metadata: %s", r.Body)
			}
		}
	})

	t.Run("delete", func(t *testing.T) {
		for _, sid := range []string{id, other} {
			if r := g.do("DELETE", "/v1/sandboxes/"+sid, nil); r.Status != 204 {
				t.Fatalf("delete: %d %s", r.Status, r.Body)
			}
			expectError(t, g.do("GET", "/v1/sandboxes/"+sid, nil), 404, "SANDBOX::NOT_FOUND")
			expectError(t, g.do("DELETE", "/v1/sandboxes/"+sid, nil), 404, "SANDBOX::NOT_FOUND")
		}
		if left := e.containers(); len(left) != 0 {
			t.Fatalf("containers left behind: %v", left)
		}
	})
}

// uploadFile sends one file with the agent's multipart upload.
func uploadFile(t testing.TB, a *agent, path string, data []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	meta, _ := json.Marshal(map[string]any{"path": path, "mode": 644})
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
	h.Set("Content-Type", "application/json")
	pw, _ := mw.CreatePart(h)
	pw.Write(meta)
	fw, _ := mw.CreateFormFile("file", "blob")
	fw.Write(data)
	mw.Close()
	resp := a.request("POST", "/files/upload", &buf, mw.FormDataContentType())
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
}
