package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	sandgate "github.com/sandgate/sandgate/client"
)

// bearer adds an API key to every request of the MCP client.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpHTTP connects the go-sdk's client to the gateway's /mcp with key.
func mcpHTTP(t *testing.T, ctx context.Context, g *gateway, key string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + g.Addr + "/mcp", HTTPClient: &http.Client{Transport: bearer{key}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// mcpStdio starts `sandgate mcp` with the login of `sandgate login` (in configHome) and
// connects the go-sdk's client to it.
func mcpStdio(t *testing.T, ctx context.Context, configHome string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "sandgate"), "mcp")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+configHome, "SANDGATE_URL=", "SANDGATE_API_KEY=")
	cmd.Stderr = os.Stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	s, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("start sandgate mcp: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// callTool calls a tool and decodes its structured output into out (may be nil);
// it returns the tool error text, "" on success.
func callTool(t *testing.T, ctx context.Context, s *mcp.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	if res.IsError {
		var texts []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				texts = append(texts, tc.Text)
			}
		}
		return strings.Join(texts, "\n")
	}
	if out != nil {
		data, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s: output %s: %v", name, data, err)
		}
	}
	return ""
}

// mustCall is callTool that fails the test on a tool error.
func mustCall(t *testing.T, ctx context.Context, s *mcp.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	if msg := callTool(t, ctx, s, name, args, out); msg != "" {
		t.Fatalf("%s: tool error: %s", name, msg)
	}
}

// exerciseMCP runs one agent's session: list the tools, create a sandbox, run a
// command, write and read a file, list it, get a preview URL, kill the sandbox.
func exerciseMCP(t *testing.T, ctx context.Context, s *mcp.ClientSession) string {
	tools, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 40 || tool.InputSchema == nil {
			t.Errorf("tool %s: description %q, schema %v", tool.Name, tool.Description, tool.InputSchema)
		}
	}
	slices.Sort(names)
	want := []string{"create_sandbox", "kill_sandbox", "list_files", "list_sandboxes", "preview_url", "read_file", "run_code", "run_command", "write_file"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools = %v, want %v", names, want)
	}
	schema, _ := json.Marshal(tools.Tools[slices.IndexFunc(tools.Tools, func(t *mcp.Tool) bool { return t.Name == "run_command" })].InputSchema)
	if !strings.Contains(string(schema), `"required":["sandbox_id","command"]`) {
		t.Errorf("run_command schema does not require sandbox_id and command: %s", schema)
	}

	var sb struct {
		SandboxID string `json:"sandbox_id"`
		State     string
	}
	mustCall(t, ctx, s, "create_sandbox", map[string]any{"image": baseImage, "timeout_seconds": 900, "metadata": map[string]string{"via": "mcp"}}, &sb)
	if sb.SandboxID == "" || sb.State != "Running" {
		t.Fatalf("create_sandbox = %+v", sb)
	}
	var cmd struct {
		ExitCode  int `json:"exit_code"`
		Stdout    string
		Stderr    string
		Truncated bool
	}
	mustCall(t, ctx, s, "run_command", map[string]any{"sandbox_id": sb.SandboxID, "command": "echo hi; echo oops >&2; pwd; exit 3", "cwd": "/tmp"}, &cmd)
	if cmd.ExitCode != 3 || cmd.Stdout != "hi\n/tmp\n" || cmd.Stderr != "oops\n" || cmd.Truncated {
		t.Fatalf("run_command = %+v", cmd)
	}
	mustCall(t, ctx, s, "run_command", map[string]any{"sandbox_id": sb.SandboxID, "command": "seq 1 100000"}, &cmd)
	if !cmd.Truncated || !strings.Contains(cmd.Stdout, "bytes truncated]") || !strings.HasPrefix(cmd.Stdout, "1\n2\n") || !strings.HasSuffix(cmd.Stdout, "99999\n100000\n") || len(cmd.Stdout) > 33<<10 {
		t.Fatalf("large output: truncated %v, %d bytes, head %.40q tail %q", cmd.Truncated, len(cmd.Stdout), cmd.Stdout, cmd.Stdout[max(0, len(cmd.Stdout)-40):])
	}

	var wrote struct {
		BytesWritten int `json:"bytes_written"`
	}
	content := "héllo from the model\n"
	mustCall(t, ctx, s, "write_file", map[string]any{"sandbox_id": sb.SandboxID, "path": "/tmp/mcp/notes.txt", "content": content}, &wrote)
	if wrote.BytesWritten != len(content) {
		t.Fatalf("write_file = %+v", wrote)
	}
	var read struct {
		Content, Encoding string
		Size              int64
		Truncated         bool
	}
	mustCall(t, ctx, s, "read_file", map[string]any{"sandbox_id": sb.SandboxID, "path": "/tmp/mcp/notes.txt"}, &read)
	if read.Content != content || read.Encoding != "utf-8" || read.Truncated || read.Size != int64(len(content)) {
		t.Fatalf("read_file = %+v", read)
	}
	mustCall(t, ctx, s, "read_file", map[string]any{"sandbox_id": sb.SandboxID, "path": "/tmp/mcp/notes.txt", "offset": 7, "max_bytes": 4}, &read)
	if read.Content != "from" || !read.Truncated {
		t.Fatalf("read_file part = %+v", read)
	}
	mustCall(t, ctx, s, "write_file", map[string]any{"sandbox_id": sb.SandboxID, "path": "/tmp/mcp/bin", "content": "AP8Q", "encoding": "base64"}, &wrote)
	mustCall(t, ctx, s, "read_file", map[string]any{"sandbox_id": sb.SandboxID, "path": "/tmp/mcp/bin"}, &read)
	if read.Content != "AP8Q" || read.Encoding != "base64" {
		t.Fatalf("read_file binary = %+v", read)
	}
	var files struct {
		Entries []struct {
			Path, Type string
			Size       int64
		}
	}
	mustCall(t, ctx, s, "list_files", map[string]any{"sandbox_id": sb.SandboxID, "path": "/tmp/mcp"}, &files)
	if len(files.Entries) != 2 || !slices.ContainsFunc(files.Entries, func(e struct {
		Path, Type string
		Size       int64
	}) bool {
		return e.Path == "/tmp/mcp/notes.txt" && e.Type == "file" && e.Size == int64(len(content))
	}) {
		t.Fatalf("list_files = %+v", files)
	}
	if msg := callTool(t, ctx, s, "read_file", map[string]any{"sandbox_id": sb.SandboxID, "path": "relative.txt"}, nil); !strings.Contains(msg, "absolute") {
		t.Fatalf("relative path: %q", msg)
	}

	var preview struct{ URL string }
	mustCall(t, ctx, s, "preview_url", map[string]any{"sandbox_id": sb.SandboxID, "port": 8000, "ttl_seconds": 600}, &preview)
	if !strings.HasPrefix(preview.URL, "http") || !strings.Contains(preview.URL, sb.SandboxID) {
		t.Fatalf("preview_url = %+v", preview)
	}
	var list struct {
		Sandboxes []struct {
			SandboxID string `json:"sandbox_id"`
		}
	}
	mustCall(t, ctx, s, "list_sandboxes", map[string]any{"state": "Running"}, &list)
	if !slices.ContainsFunc(list.Sandboxes, func(x struct {
		SandboxID string `json:"sandbox_id"`
	}) bool {
		return x.SandboxID == sb.SandboxID
	}) {
		t.Fatalf("list_sandboxes = %+v", list)
	}
	var killed struct{ Deleted bool }
	mustCall(t, ctx, s, "kill_sandbox", map[string]any{"sandbox_id": sb.SandboxID}, &killed)
	if !killed.Deleted {
		t.Fatalf("kill_sandbox = %+v", killed)
	}
	if msg := callTool(t, ctx, s, "run_command", map[string]any{"sandbox_id": sb.SandboxID, "command": "true"}, nil); !strings.Contains(msg, "SANDBOX::NOT_FOUND") {
		t.Fatalf("run_command in a killed sandbox: %q", msg)
	}
	return sb.SandboxID
}

// TestMCPHTTP drives the gateway's /mcp with the go-sdk's client: the whole tool set,
// policy (a viewer cannot create), authentication and the audit trail.
func TestMCPHTTP(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := sdkClient(t, g, e.APIKey)
	tn, err := admin.CreateTenant(ctx, sandgate.TenantRequest{Name: "mcp"})
	if err != nil {
		t.Fatal(err)
	}
	member, err := admin.CreateKey(ctx, tn.ID, sandgate.RoleMember)
	if err != nil {
		t.Fatal(err)
	}
	viewer, err := admin.CreateKey(ctx, tn.ID, sandgate.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}

	id := exerciseMCP(t, ctx, mcpHTTP(t, ctx, g, member.Key))

	t.Run("viewer cannot create", func(t *testing.T) {
		s := mcpHTTP(t, ctx, g, viewer.Key)
		if msg := callTool(t, ctx, s, "create_sandbox", map[string]any{"image": baseImage}, nil); !strings.Contains(msg, "POLICY::DENIED") {
			t.Fatalf("viewer create_sandbox: %q, want POLICY::DENIED", msg)
		}
		var list struct{ Sandboxes []any }
		mustCall(t, ctx, s, "list_sandboxes", nil, &list)
	})

	t.Run("authentication", func(t *testing.T) {
		for _, tt := range []struct{ name, key, code string }{{"no key", "", "MISSING_API_KEY"}, {"wrong key", "nope", "INVALID_API_KEY"}} {
			req, _ := http.NewRequest("POST", "http://"+g.Addr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tt.key != "" {
				req.Header.Set("Authorization", "Bearer "+tt.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body struct{ Code, Message string }
			json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != 401 || body.Code != tt.code || body.Message == "" {
				t.Errorf("%s: %d %+v, want 401 %s", tt.name, resp.StatusCode, body, tt.code)
			}
		}
	})

	t.Run("audit", func(t *testing.T) {
		waitFor(t, time.Minute, func() bool {
			page, err := admin.ListEvents(ctx, sandgate.EventQuery{Tenant: tn.ID, Types: []string{"mcp.tool.called"}, Limit: 200})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, ev := range page.Items {
				tool, _ := ev.Data["tool"].(string)
				if ev.Data["ok"] == true && (ev.SandboxID == id || tool == "list_sandboxes") {
					seen[tool] = true
				}
				if tool == "create_sandbox" && ev.Data["ok"] == false && ev.Data["code"] == "POLICY::DENIED" && ev.Data["keyId"] == viewer.ID {
					seen["denied create"] = true
				}
			}
			for _, want := range []string{"create_sandbox", "run_command", "write_file", "read_file", "list_files", "preview_url", "list_sandboxes", "kill_sandbox", "denied create"} {
				if !seen[want] {
					return false
				}
			}
			return true
		}, "an mcp.tool.called event for every call")
	})
}

// TestMCPStdio drives `sandgate mcp` with the go-sdk's client, logged in with
// `sandgate login`.
func TestMCPStdio(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := newCLIEnv(t)
	admin := sdkClient(t, g, e.APIKey)
	tn, err := admin.CreateTenant(ctx, sandgate.TenantRequest{Name: "mcp-stdio"})
	if err != nil {
		t.Fatal(err)
	}
	member, _ := admin.CreateKey(ctx, tn.ID, sandgate.RoleMember)
	viewer, _ := admin.CreateKey(ctx, tn.ID, sandgate.RoleViewer)

	if _, errOut, code := c.run(member.Key+"\n", "login", "--url", "http://"+g.Addr); code != 0 {
		t.Fatalf("login: %s", errOut)
	}
	exerciseMCP(t, ctx, mcpStdio(t, ctx, c.config))

	t.Run("viewer cannot create", func(t *testing.T) {
		vc := newCLIEnv(t)
		if _, errOut, code := vc.run(viewer.Key+"\n", "login", "--url", "http://"+g.Addr); code != 0 {
			t.Fatalf("login: %s", errOut)
		}
		s := mcpStdio(t, ctx, vc.config)
		if msg := callTool(t, ctx, s, "create_sandbox", map[string]any{"image": baseImage}, nil); !strings.Contains(msg, "POLICY::DENIED") {
			t.Fatalf("viewer create_sandbox: %q, want POLICY::DENIED", msg)
		}
	})
}
