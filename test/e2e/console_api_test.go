package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// The gateway API the web console is built on: sessions, the live list, the policy API.

// console is a browser-like client of one gateway: a session cookie instead of an API key.
type console struct {
	g      *gateway
	cookie string
	csrf   string
}

// signIn exchanges key for a console session on g and checks the cookie's attributes.
func signIn(t *testing.T, g *gateway, key string) (*console, map[string]any) {
	t.Helper()
	r := g.do("POST", "/v1/session", map[string]string{"apiKey": key}, "OPEN-SANDBOX-API-KEY", "")
	if r.Status != 200 {
		t.Fatalf("sign in: %d %s", r.Status, r.Body)
	}
	var cookie *http.Cookie
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		if c.Name == "sandgate_session" {
			cookie = c
		}
	}
	if cookie == nil || cookie.Value == "" {
		t.Fatalf("sign in set no sandgate_session cookie: %v", r.Header.Values("Set-Cookie"))
	}
	raw := r.Header.Get("Set-Cookie")
	for _, attr := range []string{"HttpOnly", "SameSite=Strict", "Path=/v1"} {
		if !strings.Contains(raw, attr) {
			t.Errorf("Set-Cookie %q lacks %s", raw, attr)
		}
	}
	if strings.Contains(raw, "Secure") {
		t.Errorf("Set-Cookie %q is Secure over plain HTTP", raw)
	}
	body := r.JSON(t)
	return &console{g: g, cookie: cookie.Value, csrf: body["csrfToken"].(string)}, body
}

// on returns the same session used against another gateway (replica).
func (c *console) on(g *gateway) *console { return &console{g: g, cookie: c.cookie, csrf: c.csrf} }

// do sends a request with the session cookie only, and for a change the Origin of the
// console as a browser does; withCSRF adds the session's token.
func (c *console) do(method, path string, body any, withCSRF bool, headers ...string) response {
	c.g.t.Helper()
	h := []string{"OPEN-SANDBOX-API-KEY", "", "Cookie", "sandgate_session=" + c.cookie}
	if method != "GET" && method != "HEAD" {
		h = append(h, "Origin", "http://"+c.g.Addr)
	}
	h = append(h, headers...)
	if withCSRF {
		h = append(h, "X-CSRF-Token", c.csrf)
	}
	return c.g.do(method, path, body, h...)
}

func TestConsoleAPISession(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g1, g2 := e.startGateway(), e.startGateway()
	tenant := g1.createTenant("console", nil)
	memberID, memberKey := g1.issueKey(tenant, "member")
	_, viewerKey := g1.issueKey(tenant, "viewer")

	t.Run("bad key", func(t *testing.T) {
		r := g1.do("POST", "/v1/session", map[string]string{"apiKey": "sg_not-a-key"}, "OPEN-SANDBOX-API-KEY", "")
		expectError(t, r, 401, "INVALID_API_KEY")
		if r.Header.Get("Set-Cookie") != "" {
			t.Errorf("a refused sign-in set a cookie: %s", r.Header.Get("Set-Cookie"))
		}
		expectError(t, g1.do("POST", "/v1/session", map[string]string{}, "OPEN-SANDBOX-API-KEY", ""), 401, "MISSING_API_KEY")
		// A form of another site cannot sign anyone in: JSON only.
		expectError(t, g1.do("POST", "/v1/session", `{"apiKey":"`+e.APIKey+`"}`, "OPEN-SANDBOX-API-KEY", "", "Content-Type", "text/plain"), 415, "SANDBOX::INVALID_PARAMETER")
		expectError(t, g1.do("GET", "/v1/session", nil, "OPEN-SANDBOX-API-KEY", ""), 401, "SESSION::INVALID")
		expectError(t, g1.do("GET", "/v1/sandboxes", nil, "OPEN-SANDBOX-API-KEY", "", "Cookie", "sandgate_session=forged"), 401, "SESSION::INVALID")
	})

	member, body := signIn(t, g1, memberKey)
	if body["tenant"] != tenant || body["role"] != "member" || body["keyId"] != memberID {
		t.Fatalf("session body = %v", body)
	}
	exp, err := time.Parse(time.RFC3339, body["expiresAt"].(string))
	if err != nil || exp.Before(time.Now().Add(11*time.Hour)) || exp.After(time.Now().Add(13*time.Hour)) {
		t.Fatalf("expiresAt = %v (%v), want about 12 h from now", body["expiresAt"], err)
	}
	can := body["can"].(map[string]any)
	if can["sandbox.delete"] != true || can["policy.write"] != false || can["key.create"] != false {
		t.Fatalf("member can = %v", can)
	}

	// The session is in Redis: the other replica knows it.
	m2 := member.on(g2)
	r := m2.do("GET", "/v1/session", nil, false)
	if r.Status != 200 || r.JSON(t)["csrfToken"] != member.csrf || r.JSON(t)["keyId"] != memberID {
		t.Fatalf("GET /v1/session on the other gateway: %d %s", r.Status, r.Body)
	}
	who := m2.do("GET", "/v1/whoami", nil, false)
	if who.Status != 200 || who.JSON(t)["role"] != "member" || who.JSON(t)["can"].(map[string]any)["sandbox.create"] != true {
		t.Fatalf("whoami by cookie: %d %s", who.Status, who.Body)
	}

	// Changes need the CSRF token; reads do not.
	create := map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}, "timeout": 600}
	expectError(t, m2.do("POST", "/v1/sandboxes", create, false), 403, "CSRF_TOKEN_INVALID")
	expectError(t, m2.do("POST", "/v1/sandboxes", create, false, "X-CSRF-Token", "wrong"), 403, "CSRF_TOKEN_INVALID")
	r = m2.do("POST", "/v1/sandboxes", create, true)
	if r.Status != 202 {
		t.Fatalf("create by cookie: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	if r := member.do("GET", "/v1/sandboxes/"+id, nil, false); r.Status != 200 {
		t.Fatalf("get by cookie: %d %s", r.Status, r.Body)
	}

	// A viewer's session sees, and may not change or reach into, the sandbox.
	viewer, vbody := signIn(t, g2, viewerKey)
	if vc := vbody["can"].(map[string]any); vc["sandbox.delete"] != false || vc["sandbox.list"] != true {
		t.Fatalf("viewer can = %v", vc)
	}
	if r := viewer.do("GET", "/v1/sandboxes/"+id, nil, false); r.Status != 200 {
		t.Fatalf("viewer get: %d %s", r.Status, r.Body)
	}
	expectError(t, viewer.do("DELETE", "/v1/sandboxes/"+id, nil, true), 403, "POLICY::DENIED")
	expectError(t, viewer.do("GET", "/v1/console/sandboxes/"+id+"/ports/44772/ping", nil, false), 403, "ACCESS::DENIED")

	t.Run("the session is refused from any other origin", func(t *testing.T) {
		for name, hdr := range map[string][]string{
			"another site":         {"Origin", "http://evil.example"},
			"an opaque origin":     {"Origin", "null"},
			"a preview host":       {"Origin", "http://" + id + "-8000.preview.localhost"},
			"cross-site by header": {"Sec-Fetch-Site", "cross-site"},
			"same-site by header":  {"Sec-Fetch-Site", "same-site"},
		} {
			t.Run(name, func(t *testing.T) {
				expectError(t, member.do("GET", "/v1/session", nil, false, hdr...), 403, "ACCESS::ORIGIN_REFUSED")
				expectError(t, member.do("GET", "/v1/sandboxes", nil, false, hdr...), 403, "ACCESS::ORIGIN_REFUSED")
				expectError(t, member.do("POST", "/v1/sandboxes", create, true, hdr...), 403, "ACCESS::ORIGIN_REFUSED")
			})
		}
		// A change without any Origin is not a browser's same-origin request either.
		expectError(t, member.do("POST", "/v1/sandboxes", create, true, "Origin", ""), 403, "ACCESS::ORIGIN_REFUSED")
		// What a browser's own page sends passes.
		if r := member.do("GET", "/v1/sandboxes/"+id, nil, false, "Origin", "http://"+g1.Addr, "Sec-Fetch-Site", "same-origin"); r.Status != 200 {
			t.Fatalf("same-origin read: %d %s", r.Status, r.Body)
		}
	})

	t.Run("the session is no credential on the preview routes", func(t *testing.T) {
		for _, p := range []string{"/v1/sandboxes/" + id + "/proxy/44772/ping", "/sandboxes/" + id + "/proxy/44772/ping"} {
			expectError(t, member.do("GET", p, nil, false, "Origin", "http://"+g1.Addr), 401, "MISSING_API_KEY")
			expectError(t, member.do("POST", strings.TrimSuffix(p, "ping")+"command", map[string]any{"command": "true"}, true), 401, "MISSING_API_KEY")
		}
		// Nor does the console's route reach a preview port.
		expectError(t, member.do("GET", fmt.Sprintf("/v1/console/sandboxes/%s/ports/%d/", id, previewPort), nil, false), 400, "SANDBOX::INVALID_PARAMETER")
	})

	t.Run("agent through the proxy", func(t *testing.T) {
		agentPath := "/v1/console/sandboxes/" + id + "/ports/44772"
		r := member.do("GET", agentPath+"/ping", nil, false)
		if r.Status != 200 {
			t.Fatalf("ping by cookie: %d %s", r.Status, r.Body)
		}
		if csp := r.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox") || strings.Contains(csp, "allow-same-origin") {
			t.Fatalf("the console route's answer is not confined to an opaque origin: CSP %q", csp)
		}
		cmd := map[string]any{"command": "echo console-$((6*7))"}
		expectError(t, member.do("POST", agentPath+"/command", cmd, false), 403, "CSRF_TOKEN_INVALID")
		r = member.do("POST", agentPath+"/command", cmd, true)
		if r.Status != 200 {
			t.Fatalf("command by cookie: %d %s", r.Status, r.Body)
		}
		out := stdoutOf(readEvents(t, strings.NewReader(string(r.Body))))
		if !strings.Contains(out, "console-42") {
			t.Fatalf("command output %q lacks console-42", out)
		}

		// A file written through the agent and read back: the upload a console does.
		if r := member.do("GET", agentPath+"/metrics", nil, false); r.Status != 200 || !strings.Contains(string(r.Body), "mem_total_mib") {
			t.Fatalf("metrics by cookie: %d %s", r.Status, r.Body)
		}

		// The PTY WebSocket: the Origin must be this host.
		pty := member.do("POST", agentPath+"/pty", map[string]any{}, true)
		if pty.Status != 200 && pty.Status != 201 {
			t.Fatalf("open pty: %d %s", pty.Status, pty.Body)
		}
		sid := pty.JSON(t)["session_id"].(string)
		wsURL := "ws://" + g1.Addr + agentPath + "/pty/" + sid + "/ws"
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, origin := range []string{"", "http://evil.example", "null"} {
			h := http.Header{"Cookie": {"sandgate_session=" + member.cookie}}
			if origin != "" {
				h.Set("Origin", origin)
			}
			_, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: h})
			if err == nil || resp == nil || resp.StatusCode != 403 {
				t.Fatalf("WebSocket with Origin %q: err %v, response %v; want 403", origin, err, resp)
			}
		}
		h := http.Header{"Cookie": {"sandgate_session=" + member.cookie}, "Origin": {"http://" + g1.Addr}}
		conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: h})
		if err != nil {
			t.Fatalf("WebSocket with the console's Origin: %v", err)
		}
		defer conn.Close(websocket.StatusNormalClosure, "")
		if err := conn.Write(ctx, websocket.MessageBinary, append([]byte{0}, "echo pty-$((7*6))\n"...)); err != nil {
			t.Fatal(err)
		}
		var seen strings.Builder
		for !strings.Contains(seen.String(), "pty-42") {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				t.Fatalf("read pty (seen %q): %v", seen.String(), err)
			}
			if typ == websocket.MessageBinary && len(data) > 0 {
				switch data[0] {
				case 1, 2:
					seen.Write(data[1:])
				case 3:
					if len(data) > 9 {
						seen.Write(data[9:])
					}
				}
			}
		}
	})

	t.Run("the sandbox never sees the session", func(t *testing.T) {
		startPreviewServer(t, g1.asKey(memberKey), id)
		_, hdr, _ := g1.endpoint(id, previewPort, "")
		r := member.do("GET", fmt.Sprintf("/v1/sandboxes/%s/proxy/%d/headers", id, previewPort), nil, true,
			"Cookie", "sandgate_session="+member.cookie+"; app=kept", "X-Sandgate-Access-Token", hdr["X-Sandgate-Access-Token"])
		if r.Status != 200 {
			t.Fatalf("preview with the access header: %d %s", r.Status, r.Body)
		}
		var got struct {
			Headers map[string]string `json:"headers"`
		}
		if err := json.Unmarshal(r.Body, &got); err != nil {
			t.Fatal(err)
		}
		for k, v := range got.Headers {
			if strings.Contains(v, member.cookie) || strings.Contains(v, member.csrf) || strings.EqualFold(k, "X-CSRF-Token") {
				t.Fatalf("the sandbox saw the session in %s: %s", k, v)
			}
		}
		if got.Headers["Cookie"] != "app=kept" {
			t.Fatalf("the sandbox's own cookie did not pass: %v", got.Headers)
		}
	})

	t.Run("egress policy edited through the proxy", func(t *testing.T) {
		path := "/v1/console/sandboxes/" + id + "/ports/18080/policy"
		type rule struct{ Action, Target string }
		read := func() (string, []rule) {
			t.Helper()
			r := member.do("GET", path, nil, false)
			var body struct {
				Policy struct {
					DefaultAction string `json:"defaultAction"`
					Egress        []rule `json:"egress"`
				} `json:"policy"`
			}
			if r.Status != 200 || json.Unmarshal(r.Body, &body) != nil {
				t.Fatalf("egress policy by cookie: %d %s", r.Status, r.Body)
			}
			return body.Policy.DefaultAction, body.Policy.Egress
		}
		def, rules := read()
		edited := map[string]any{"defaultAction": def, "egress": append(append([]rule{}, rules...), rule{"deny", "blocked.example.com"})}
		expectError(t, member.do("PUT", path, edited, false), 403, "CSRF_TOKEN_INVALID")
		for range 2 { // sending back what was read, twice, changes nothing more
			if r := member.do("PUT", path, edited, true); r.Status != 200 {
				t.Fatalf("PUT egress by cookie: %d %s", r.Status, r.Body)
			}
			_, now := read()
			if len(now) != len(rules)+1 || now[len(now)-1] != (rule{"deny", "blocked.example.com"}) {
				t.Fatalf("egress rules after the edit = %v, before %v", now, rules)
			}
		}
		// The audit trail names the session's key.
		r := g1.asKey(memberKey).do("GET", "/v1/events?sandbox="+id+"&type=sandbox.egress.updated", nil)
		if r.Status != 200 || !strings.Contains(string(r.Body), `"key":"`+memberID+`"`) {
			t.Fatalf("egress events do not name the session's key %s: %d %s", memberID, r.Status, r.Body)
		}
	})

	t.Run("revoking the key ends its sessions", func(t *testing.T) {
		revokedID, revokedKey := g1.issueKey(tenant, "member")
		s, _ := signIn(t, g1, revokedKey)
		if r := s.do("GET", "/v1/sandboxes", nil, false); r.Status != 200 {
			t.Fatalf("list before revoke: %d %s", r.Status, r.Body)
		}
		if r := g1.do("DELETE", "/v1/tenants/"+tenant+"/keys/"+revokedID, nil); r.Status != 204 {
			t.Fatalf("revoke: %d %s", r.Status, r.Body)
		}
		expectError(t, s.on(g2).do("GET", "/v1/session", nil, false), 401, "SESSION::INVALID")
		expectError(t, s.do("GET", "/v1/sandboxes", nil, false), 401, "SESSION::INVALID")
		expectError(t, s.do("GET", "/v1/console/sandboxes/"+id+"/ports/44772/ping", nil, false), 401, "SESSION::INVALID")
	})

	t.Run("sign out", func(t *testing.T) {
		expectError(t, member.do("DELETE", "/v1/session", nil, false), 403, "CSRF_TOKEN_INVALID")
		r := member.do("DELETE", "/v1/session", nil, true)
		if r.Status != 204 {
			t.Fatalf("sign out: %d %s", r.Status, r.Body)
		}
		if sc := r.Header.Get("Set-Cookie"); !strings.Contains(sc, "sandgate_session=") || !strings.Contains(sc, "Max-Age=0") {
			t.Errorf("sign out did not clear the cookie: %q", sc)
		}
		expectError(t, m2.do("GET", "/v1/session", nil, false), 401, "SESSION::INVALID")
		expectError(t, m2.do("GET", "/v1/sandboxes", nil, false), 401, "SESSION::INVALID")
		// The key itself still works.
		if r := g1.asKey(memberKey).do("GET", "/v1/sandboxes/"+id, nil); r.Status != 200 {
			t.Fatalf("key after sign out: %d %s", r.Status, r.Body)
		}
	})

	t.Run("platform admin key", func(t *testing.T) {
		admin, body := signIn(t, g1, e.APIKey)
		if body["role"] != "admin" || body["keyId"] != "admin" || body["can"].(map[string]any)["policy.write"] != true {
			t.Fatalf("admin session = %v", body)
		}
		if r := admin.on(g2).do("GET", "/v1/tenants", nil, false); r.Status != 200 {
			t.Fatalf("admin lists tenants by cookie: %d %s", r.Status, r.Body)
		}
		// A replica with another platform key does not honour the old key's session.
		g3 := e.startGateway("SANDGATE_API_KEY=k-other-" + randomHex(6))
		expectError(t, admin.on(g3).do("GET", "/v1/tenants", nil, false), 401, "SESSION::INVALID")
	})
}

// sseEvent is one server-sent event.
type sseEvent struct {
	Name string
	Data string
}

// openWatch starts GET path as an event stream and returns its events as they come.
func openWatch(t *testing.T, g *gateway, path string, headers ...string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+g.Addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("OPEN-SANDBOX-API-KEY", g.APIKey)
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body.Close()
		t.Fatalf("watch: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan sseEvent, 256)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Name != "" {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.Name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.Data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return out
}

// nextEvent waits for the next event that satisfies match, failing on a timeout.
func nextEvent(t *testing.T, events <-chan sseEvent, what string, match func(sseEvent) bool) sseEvent {
	t.Helper()
	timeout := time.After(90 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended while waiting for %s", what)
			}
			if match(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s within 90 s", what)
		}
	}
}

// sandboxEvent decodes a "sandbox" event's data.
func sandboxEvent(t *testing.T, ev sseEvent) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
		t.Fatalf("event data %q: %v", ev.Data, err)
	}
	return m
}

func TestConsoleAPIWatch(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g1, g2 := e.startGateway(), e.startGateway()
	tenant := g1.createTenant("watchers", nil)
	_, key := g1.issueKey(tenant, "member")
	_, otherKey := g1.issueKey(g1.createTenant("others", nil), "member")
	m1, m2 := g1.asKey(key), g2.asKey(key)

	before := m1.createSandbox(map[string]any{"metadata": map[string]string{"app": "console"}, "timeout": 600})
	m1.createSandbox(map[string]any{"metadata": map[string]string{"app": "else"}, "timeout": 600})

	// Watch on g2 (with a console session), change things on g1.
	sess, _ := signIn(t, g2, key)
	events := openWatch(t, g2, "/v1/sandboxes/watch?state=Pending,Running&metadata=app%3Dconsole",
		"OPEN-SANDBOX-API-KEY", "", "Cookie", "sandgate_session="+sess.cookie)
	first := nextEvent(t, events, "the first event", func(sseEvent) bool { return true })
	if first.Name != "sandbox" || sandboxEvent(t, first)["id"] != before {
		t.Fatalf("first event = %+v, want the existing sandbox %s", first, before)
	}
	if ev := nextEvent(t, events, "ready", func(sseEvent) bool { return true }); ev.Name != "ready" || ev.Data != "{}" {
		t.Fatalf("second event = %+v, want ready {}", ev)
	}

	// Another tenant's sandbox and a non-matching one never show.
	g1.asKey(otherKey).createSandbox(map[string]any{"metadata": map[string]string{"app": "console"}, "timeout": 600})
	m1.createSandbox(map[string]any{"metadata": map[string]string{"app": "else"}, "timeout": 600})

	created := m1.createSandbox(map[string]any{"metadata": map[string]string{"app": "console"}, "timeout": 600})
	ev := nextEvent(t, events, "the new sandbox Running", func(ev sseEvent) bool {
		if ev.Name != "sandbox" {
			t.Fatalf("unexpected event %+v", ev)
		}
		m := sandboxEvent(t, ev)
		if m["id"] != created {
			t.Fatalf("event for a sandbox that does not match the filter or tenant: %s", ev.Data)
		}
		return m["status"].(map[string]any)["state"] == "Running"
	})
	// Same JSON as GET /v1/sandboxes/{id}.
	var fromGet, fromEvent map[string]any
	_ = json.Unmarshal(m2.do("GET", "/v1/sandboxes/"+created, nil).Body, &fromGet)
	_ = json.Unmarshal([]byte(ev.Data), &fromEvent)
	if fromGet["id"] != fromEvent["id"] || fromGet["createdAt"] != fromEvent["createdAt"] || fromGet["image"].(map[string]any)["uri"] != fromEvent["image"].(map[string]any)["uri"] {
		t.Fatalf("event %s differs from GET %v", ev.Data, fromGet)
	}

	// Metadata change (still matching) and renew.
	if r := m1.do("PATCH", "/v1/sandboxes/"+created+"/metadata", map[string]any{"note": "hello"}); r.Status != 200 {
		t.Fatalf("patch: %d %s", r.Status, r.Body)
	}
	nextEvent(t, events, "the metadata change", func(ev sseEvent) bool {
		md, _ := sandboxEvent(t, ev)["metadata"].(map[string]any)
		return ev.Name == "sandbox" && md["note"] == "hello"
	})
	renewTo := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	if r := m1.do("POST", "/v1/sandboxes/"+created+"/renew-expiration", map[string]any{"expiresAt": renewTo.Format(time.RFC3339)}); r.Status != 200 {
		t.Fatalf("renew: %d %s", r.Status, r.Body)
	}
	nextEvent(t, events, "the renewal", func(ev sseEvent) bool {
		exp, _ := time.Parse(time.RFC3339, sandboxEvent(t, ev)["expiresAt"].(string))
		return ev.Name == "sandbox" && exp.Equal(renewTo)
	})

	// Leaving the filter (metadata) and deletion both read as deleted.
	if r := m1.do("PATCH", "/v1/sandboxes/"+before+"/metadata", map[string]any{"app": "moved"}); r.Status != 200 {
		t.Fatalf("patch: %d %s", r.Status, r.Body)
	}
	nextEvent(t, events, "deleted for the sandbox that left the filter", func(ev sseEvent) bool {
		return ev.Name == "deleted" && ev.Data == `{"id":"`+before+`"}`
	})
	if r := m1.do("DELETE", "/v1/sandboxes/"+created, nil); r.Status != 204 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	nextEvent(t, events, "deleted", func(ev sseEvent) bool {
		return ev.Name == "deleted" && ev.Data == `{"id":"`+created+`"}`
	})

	// A batch's members name their source when read back, not only in the create answer.
	m1.createPool("console", 1, 1, 0, 2, nil)
	m1.waitAvailable("console", 1, 60*time.Second)
	for _, tc := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"count": 1, "poolRef": "console"}, "pool"},
		{map[string]any{"count": 1, "template": map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}, "timeout": 600}}, "cold"},
	} {
		r := m1.do("POST", "/v1/batches", tc.body)
		if r.Status != 202 {
			t.Fatalf("batch: %d %s", r.Status, r.Body)
		}
		bid := r.JSON(t)["id"].(string)
		var b struct {
			Members []struct{ ID, Source string } `json:"members"`
		}
		waitFor(t, 60*time.Second, func() bool {
			r = m2.do("GET", "/v1/batches/"+bid, nil)
			return json.Unmarshal(r.Body, &b) == nil && len(b.Members) == 1 && b.Members[0].Source != "" && strings.Contains(string(r.Body), `"running":1`)
		}, "the batch member running")
		if b.Members[0].Source != tc.want {
			t.Fatalf("GET batch: source %q, want %q: %s", b.Members[0].Source, tc.want, r.Body)
		}
	}

	// Filters are checked like the list's; the route is the list's action.
	expectError(t, m1.do("GET", "/v1/sandboxes/watch?metadata=%3Dx", nil), 400, "SANDBOX::INVALID_PARAMETER")
	expectError(t, g1.do("GET", "/v1/sandboxes/watch", nil, "OPEN-SANDBOX-API-KEY", ""), 401, "MISSING_API_KEY")
	expectError(t, m1.do("DELETE", "/v1/sandboxes/watch", nil), 405, "METHOD_NOT_ALLOWED")
}

func TestConsoleAPIPolicy(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g1, g2 := e.startGateway(), e.startGateway()
	tenant := g1.createTenant("authors", nil)
	_, memberKey := g1.issueKey(tenant, "member")
	_, tadminKey := g1.issueKey(tenant, "tenant-admin")
	admin, _ := signIn(t, g1, e.APIKey)

	r := admin.do("GET", "/v1/policy", nil, false)
	if r.Status != 200 {
		t.Fatalf("GET /v1/policy: %d %s", r.Status, r.Body)
	}
	var st struct {
		Version string `json:"version"`
		Modules []struct {
			Name, Package, Origin, Source string
		} `json:"modules"`
		Tests []struct{ Name, Source string } `json:"tests"`
		Data  map[string]any                  `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &st); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range st.Modules {
		if m.Name == "admission.rego" && m.Package == "sandgate.admission" && m.Origin == "default" && strings.Contains(m.Source, "package sandgate.admission") {
			found = true
		}
	}
	if !found || st.Version == "" || len(st.Tests) == 0 {
		t.Fatalf("policy body lacks admission.rego, a version or tests: %s", r.Body)
	}

	// Only a platform admin reads or changes the policy.
	for _, key := range []string{memberKey, tadminKey} {
		expectError(t, g1.asKey(key).do("GET", "/v1/policy", nil), 403, "POLICY::DENIED")
		expectError(t, g1.asKey(key).do("PUT", "/v1/policy", map[string]any{"modules": map[string]string{"x.rego": "package x"}}), 403, "POLICY::DENIED")
		expectError(t, g1.asKey(key).do("POST", "/v1/policy/eval", map[string]any{"decision": "access", "input": map[string]any{}}), 403, "POLICY::DENIED")
	}
	expectError(t, admin.do("PUT", "/v1/policy", map[string]any{"modules": map[string]string{"x.rego": "package x"}}, false), 403, "CSRF_TOKEN_INVALID")

	// Validate: errors located for an editor; nothing is saved.
	broken := "package sandgate.admission\n\ndeny contains msg if {\n\tinput.request.image ==\n}\n"
	r = admin.do("POST", "/v1/policy/validate", map[string]any{"modules": map[string]string{"console.rego": broken}}, true)
	var val struct {
		OK     bool `json:"ok"`
		Errors []struct {
			Module   string
			Row, Col int
			Message  string
		} `json:"errors"`
	}
	if r.Status != 200 || json.Unmarshal(r.Body, &val) != nil || val.OK || len(val.Errors) == 0 || val.Errors[0].Module != "console.rego" || val.Errors[0].Row < 3 {
		t.Fatalf("validate broken: %d %s", r.Status, r.Body)
	}
	forbid := `package sandgate.admission

deny contains {"code": "ADMISSION::IMAGE_FORBIDDEN", "message": msg} if {
	contains(input.request.image, "forbidden")
	msg := sprintf("image %s is forbidden by the console test policy", [input.request.image])
}
`
	r = admin.do("POST", "/v1/policy/validate", map[string]any{"modules": map[string]string{"console.rego": forbid}}, true)
	if r.Status != 200 || r.JSON(t)["ok"] != true {
		t.Fatalf("validate good: %d %s", r.Status, r.Body)
	}

	// PUT that does not compile: 400 POLICY_INVALID, version unchanged.
	r = admin.do("PUT", "/v1/policy", map[string]any{"modules": map[string]string{"console.rego": broken}}, true)
	expectError(t, r, 400, "POLICY_INVALID")
	if !strings.Contains(r.JSON(t)["message"].(string), "console.rego:") {
		t.Fatalf("POLICY_INVALID message lacks the location: %s", r.Body)
	}
	if v := admin.do("GET", "/v1/policy", nil, false).JSON(t)["version"]; v != st.Version {
		t.Fatalf("version %v after a refused PUT, want %s", v, st.Version)
	}

	// Playground with the unsaved module: the decision and OPA's explanation.
	in := map[string]any{"tenant": map[string]any{"id": tenant, "quotas": map[string]any{}}, "usage": map[string]any{"sandboxes": 0},
		"request": map[string]any{"image": "registry.local/forbidden:1", "cpuMillis": 0, "memoryBytes": 0}}
	r = admin.do("POST", "/v1/policy/eval", map[string]any{"decision": "admission", "input": in, "modules": map[string]string{"console.rego": forbid}}, true)
	if r.Status != 200 {
		t.Fatalf("eval: %d %s", r.Status, r.Body)
	}
	var ev struct {
		Query       string   `json:"query"`
		Result      []any    `json:"result"`
		Explanation []string `json:"explanation"`
	}
	if err := json.Unmarshal(r.Body, &ev); err != nil || ev.Query != "data.sandgate.admission.deny" || len(ev.Result) != 1 || len(ev.Explanation) < 5 {
		t.Fatalf("eval answer: %v %s", err, r.Body)
	}
	if !strings.Contains(string(r.Body), "forbidden by the console test policy") || !strings.Contains(strings.Join(ev.Explanation, "\n"), "Enter data.sandgate.admission.deny") {
		t.Fatalf("eval result or explanation: %s", r.Body)
	}
	// Without the unsaved module the policy in force admits the image.
	r = admin.do("POST", "/v1/policy/eval", map[string]any{"decision": "data.sandgate.admission.deny", "input": in}, true)
	if r.Status != 200 || strings.Contains(string(r.Body), "forbidden by") {
		t.Fatalf("eval without the module: %d %s", r.Status, r.Body)
	}
	expectError(t, admin.do("POST", "/v1/policy/eval", map[string]any{"decision": "nonsense", "input": in}, true), 400, "SANDBOX::INVALID_PARAMETER")
	expectError(t, admin.do("POST", "/v1/policy/eval", `{"decision":"access","input":{`, true), 400, "SANDBOX::INVALID_PARAMETER")

	// Tests: the shipped ones pass; an unsaved failing one is reported.
	r = admin.do("POST", "/v1/policy/test", map[string]any{}, true)
	var rep struct {
		Results []struct {
			Package, Name, Error string
			Pass                 bool
		} `json:"results"`
		Pass, Fail int
	}
	if r.Status != 200 || json.Unmarshal(r.Body, &rep) != nil || rep.Pass < 10 || rep.Fail != 0 || len(rep.Results) != rep.Pass {
		t.Fatalf("policy tests: %d pass %d fail %d results %d; %s", r.Status, rep.Pass, rep.Fail, len(rep.Results), r.Body[max(0, len(r.Body)-300):])
	}
	failing := "package sandgate.console_test\n\nimport data.sandgate.admission\n\ntest_console_denies if {\n\tcount(admission.deny) > 0 with input as {\"request\": {\"image\": \"forbidden\"}, \"tenant\": {\"quotas\": {}}, \"usage\": {}}\n}\n"
	r = admin.do("POST", "/v1/policy/test", map[string]any{"modules": map[string]string{"console_test.rego": failing}}, true)
	if r.Status != 200 || json.Unmarshal(r.Body, &rep) != nil || rep.Fail != 1 {
		t.Fatalf("failing test not reported: %d %.2000s", r.Status, r.Body)
	}
	r = admin.do("POST", "/v1/policy/test", map[string]any{"modules": map[string]string{"console_test.rego": failing, "console.rego": forbid}}, true)
	if r.Status != 200 || json.Unmarshal(r.Body, &rep) != nil || rep.Fail != 0 {
		t.Fatalf("the test with its module should pass: %d %.2000s", r.Status, r.Body)
	}

	// PUT: in force at once on this gateway and, through Redis, on the other.
	r = admin.do("PUT", "/v1/policy", map[string]any{"modules": map[string]string{"console.rego": forbid}}, true)
	if r.Status != 200 {
		t.Fatalf("PUT policy: %d %s", r.Status, r.Body)
	}
	newVersion := r.JSON(t)["version"].(string)
	if newVersion == st.Version || !strings.Contains(string(r.Body), `"console.rego"`) {
		t.Fatalf("PUT answer: %s", r.Body)
	}
	create := func(g *gateway, image string) response {
		return g.asKey(memberKey).do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": image}, "entrypoint": []string{"tail", "-f", "/dev/null"}, "timeout": 600})
	}
	for _, g := range []*gateway{g1, g2} {
		var r response
		waitFor(t, 10*time.Second, func() bool {
			r = create(g, "registry.local/forbidden:1")
			return r.Status == 403
		}, "the new policy on gateway "+g.Addr)
		expectError(t, r, 403, "ADMISSION::IMAGE_FORBIDDEN")
		if msg := r.JSON(t)["message"]; msg != "image registry.local/forbidden:1 is forbidden by the console test policy" {
			t.Fatalf("refusal message = %q", msg)
		}
	}
	g2.asKey(memberKey).createSandbox(map[string]any{"timeout": 600})

	// A gateway started later applies the stored policy at start.
	g3 := e.startGateway()
	expectError(t, create(g3, "registry.local/forbidden:2"), 403, "ADMISSION::IMAGE_FORBIDDEN")

	// Restore the files' policy everywhere.
	expectError(t, admin.do("DELETE", "/v1/policy/overrides?module=nope.rego", nil, true), 404, "SANDBOX::NOT_FOUND")
	r = admin.do("DELETE", "/v1/policy/overrides", nil, true)
	if r.Status != 200 || strings.Contains(string(r.Body), "console.rego") {
		t.Fatalf("reset: %d %.500s", r.Status, r.Body)
	}
	for _, g := range []*gateway{g1, g2, g3} {
		waitFor(t, 10*time.Second, func() bool {
			return create(g, "registry.local/forbidden:1").Status != 403
		}, "the files' policy back on gateway "+g.Addr)
		// Admitted, then refused by the runtime: the image does not exist.
		expectError(t, create(g, "registry.local/forbidden:1"), 400, "SANDBOX::IMAGE_NOT_FOUND")
	}
}

func TestConsoleAPIEvents(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g1, g2 := e.startGateway(), e.startGateway()
	tenant := g1.createTenant("eventful", nil)
	_, key := g1.issueKey(tenant, "member")
	_, otherKey := g1.issueKey(g1.createTenant("nosy", nil), "member")
	m1 := g1.asKey(key)

	// Follow on g2 with a console session; act on g1.
	sess, _ := signIn(t, g2, key)
	live := openWatch(t, g2, "/v1/events/stream?type=sandbox.,command.started", "OPEN-SANDBOX-API-KEY", "", "Cookie", "sandgate_session="+sess.cookie)
	id := m1.createSandbox(map[string]any{"timeout": 600})
	m1.agent(id).run("echo audited")
	if r := m1.do("DELETE", "/v1/sandboxes/"+id, nil); r.Status != 204 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	var firstID string
	for _, want := range []string{"sandbox.created", "command.started", "sandbox.deleted"} {
		ev := nextEvent(t, live, want, func(ev sseEvent) bool {
			if ev.Name != "event" {
				t.Fatalf("unexpected SSE event %+v", ev)
			}
			m := sandboxEvent(t, ev)
			if typ := m["type"].(string); !strings.HasPrefix(typ, "sandbox.") && typ != "command.started" {
				t.Fatalf("the type filter let %s through", typ)
			}
			return m["type"] == want && m["sandboxId"] == id
		})
		m := sandboxEvent(t, ev)
		if m["tenant"] != tenant || m["id"] == "" {
			t.Fatalf("event %s", ev.Data)
		}
		if want == "command.started" && m["data"].(map[string]any)["command"] != "echo audited" {
			t.Fatalf("command.started data: %s", ev.Data)
		}
		if firstID == "" {
			firstID = m["id"].(string)
		}
	}

	// The page API: newest first, filtered, paged.
	r := m1.do("GET", "/v1/events?sandbox="+id+"&order=newest&exclude=policy.,preview.", nil)
	var page struct {
		Items []struct {
			ID, Type, SandboxID string
		} `json:"items"`
		NextCursor string `json:"nextCursor"`
	}
	if r.Status != 200 || json.Unmarshal(r.Body, &page) != nil || len(page.Items) < 3 {
		t.Fatalf("events page: %d %s", r.Status, r.Body)
	}
	if page.Items[0].Type != "sandbox.deleted" || page.Items[len(page.Items)-1].Type != "sandbox.created" {
		t.Fatalf("not newest first: %s", r.Body)
	}
	for _, it := range page.Items {
		if it.SandboxID != id || strings.HasPrefix(it.Type, "policy.") || strings.HasPrefix(it.Type, "preview.") {
			t.Fatalf("filter let %+v through", it)
		}
	}
	r = m1.do("GET", "/v1/events?sandbox="+id+"&order=newest&exclude=policy.,preview.&limit=1", nil)
	if r.Status != 200 || json.Unmarshal(r.Body, &page) != nil || len(page.Items) != 1 || page.NextCursor == "" {
		t.Fatalf("limit=1: %d %s", r.Status, r.Body)
	}
	r = m1.do("GET", "/v1/events?sandbox="+id+"&order=newest&exclude=policy.,preview.&limit=1&cursor="+page.NextCursor, nil)
	if r.Status != 200 || json.Unmarshal(r.Body, &page) != nil || len(page.Items) != 1 || page.Items[0].Type == "sandbox.deleted" {
		t.Fatalf("second page: %d %s", r.Status, r.Body)
	}

	// Resuming after an event id replays what followed it.
	resumed := openWatch(t, g1, "/v1/events/stream?sandbox="+id+"&type=sandbox.deleted", "OPEN-SANDBOX-API-KEY", key, "Last-Event-ID", firstID)
	nextEvent(t, resumed, "the replayed sandbox.deleted", func(ev sseEvent) bool { return sandboxEvent(t, ev)["type"] == "sandbox.deleted" })

	// Tenants: another tenant's events look absent; the platform admin may name a tenant.
	expectError(t, g1.asKey(otherKey).do("GET", "/v1/events?tenant="+tenant, nil), 404, "POLICY::NOT_FOUND")
	if r := g1.do("GET", "/v1/events?tenant="+tenant+"&type=sandbox.created", nil); r.Status != 200 || !strings.Contains(string(r.Body), id) {
		t.Fatalf("admin reads the tenant's events: %d %.300s", r.Status, r.Body)
	}
	if r := g1.asKey(otherKey).do("GET", "/v1/events?type=sandbox.", nil); r.Status != 200 || strings.Contains(string(r.Body), id) {
		t.Fatalf("another tenant sees the sandbox's events: %d %.300s", r.Status, r.Body)
	}
	expectError(t, m1.do("GET", "/v1/events?cursor=bogus", nil), 400, "SANDBOX::INVALID_PARAMETER")
	expectError(t, m1.do("GET", "/v1/events?order=sideways", nil), 400, "SANDBOX::INVALID_PARAMETER")
}
