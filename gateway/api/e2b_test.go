package api

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/test/coredeps"
)

// e2bFixture is a gateway with the E2B door at /e2b over the in-process runtime, and
// two tenants' keys besides the platform admin's.
type e2bFixture struct {
	URL     string
	Admin   map[string]string // the platform admin key, as E2B sends a key
	TenantA map[string]string
	TenantB map[string]string
	inspect func(id string) string // a sandbox's address
	// tenantA and tenantB are the two tenants' ids; store is the core's store.
	tenantA, tenantB string
	store            *store.Store
}

func startE2BFixture(t *testing.T) *e2bFixture {
	t.Helper()
	return startE2BFixtureWith(t, gateway.Config{})
}

// startE2BFixtureWith is startE2BFixture with a core configured by cfg.
func startE2BFixtureWith(t *testing.T, cfg gateway.Config) *e2bFixture {
	t.Helper()
	d := coredeps.Start(t)
	svc := gateway.New(cfg, d.Store, d.Runtime, d.Policy, d.Log)
	svc.SetAdminKey("admin-key")
	svc.Start(context.Background())
	t.Cleanup(svc.Stop)
	srv := httptest.NewServer(New(svc, Options{Logger: d.Log, E2B: E2BOptions{
		Prefix:           "/e2b",
		Templates:        map[string]string{"other": "sandgate/other:test", "warm": "pool:warm"},
		DefaultTemplates: map[string]string{"base": "sandgate/base:test", "other": "sandgate/replaced:test"},
	}}))
	t.Cleanup(srv.Close)
	f := &e2bFixture{URL: srv.URL, Admin: map[string]string{"X-API-Key": "admin-key"}, store: d.Store}
	var keyA, keyB string
	f.tenantA, keyA = newTenantAndKey(t, srv.URL, "e2b-a")
	f.tenantB, keyB = newTenantAndKey(t, srv.URL, "e2b-b")
	f.TenantA = map[string]string{"X-API-Key": keyA}
	f.TenantB = map[string]string{"X-API-Key": keyB}
	f.inspect = func(id string) string {
		inst, err := d.Runtime.Inspect(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return inst.Address
	}
	return f
}

// newTenantKey makes a tenant and a tenant-admin key of it, through the OpenSandbox door.
func newTenantKey(t *testing.T, base, name string) string {
	t.Helper()
	_, key := newTenantAndKey(t, base, name)
	return key
}

// newTenantAndKey is newTenantKey that also answers the tenant's id.
func newTenantAndKey(t *testing.T, base, name string) (id, key string) {
	t.Helper()
	admin := map[string]string{"OPEN-SANDBOX-API-KEY": "admin-key"}
	status, body := call(t, "POST", base+"/v1/tenants", map[string]any{"name": name}, admin)
	var tenant struct{ ID string }
	if json.Unmarshal(body, &tenant); status != http.StatusCreated || tenant.ID == "" {
		t.Fatalf("tenant: %d %s", status, body)
	}
	return tenant.ID, newKey(t, base, tenant.ID, "tenant-admin")
}

// newKey issues a key of role in tenant, through the OpenSandbox door.
func newKey(t *testing.T, base, tenant, role string) string {
	t.Helper()
	status, body := call(t, "POST", base+"/v1/tenants/"+tenant+"/keys", map[string]any{"role": role}, map[string]string{"OPEN-SANDBOX-API-KEY": "admin-key"})
	var key struct{ Key string }
	if json.Unmarshal(body, &key); status != http.StatusCreated || key.Key == "" {
		t.Fatalf("key: %d %s", status, body)
	}
	return key.Key
}

// e2bCreated is the part of E2B's Sandbox the tests read.
type e2bCreated struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
}

// create makes a sandbox through the door with key, and deletes it at the end.
func (f *e2bFixture) create(t *testing.T, key map[string]string, body map[string]any) e2bCreated {
	t.Helper()
	if body == nil {
		body = map[string]any{"templateID": "base"}
	}
	status, out := call(t, "POST", f.URL+"/e2b/v2/sandboxes", body, key)
	var sb e2bCreated
	if err := json.Unmarshal(out, &sb); status != http.StatusCreated || err != nil || sb.SandboxID == "" {
		t.Fatalf("create: %d %s", status, out)
	}
	t.Cleanup(func() { call(t, "DELETE", f.URL+"/e2b/sandboxes/"+sb.SandboxID, nil, f.Admin) })
	return sb
}

// wantE2BError checks an answer is E2B's error shape with status.
func wantE2BError(t *testing.T, what string, status int, body []byte, want int) {
	t.Helper()
	var e struct {
		Code    *int    `json:"code"`
		Message *string `json:"message"`
	}
	if status != want || json.Unmarshal(body, &e) != nil || e.Code == nil || *e.Code != want || e.Message == nil || *e.Message == "" {
		t.Errorf("%s: %d %s, want %d in E2B's {code, message}", what, status, body, want)
	}
}

// TestE2BControlAPI: every control route of the door, as E2B's SDKs call it, over the
// core's lifecycle: create (201 with the tokens, E2B's defaults), get, list with its
// filters and pages, timeout (which may shorten), pause (409 twice), connect (201 when
// it resumes, 200 when running), resume (409 when running), delete.
func TestE2BControlAPI(t *testing.T) {
	f := startE2BFixture(t)
	a := f.create(t, f.TenantA, map[string]any{"templateID": "base", "metadata": map[string]string{"team": "red", "run": "1"}, "envVars": map[string]string{"GREETING": "hi"}})
	if a.TemplateID != "base" || a.ClientID == "" || a.EnvdVersion != e2bEnvdVersion || a.EnvdAccessToken == "" || a.TrafficAccessToken == nil || *a.TrafficAccessToken == "" || *a.TrafficAccessToken == a.EnvdAccessToken {
		t.Fatalf("create answered %+v", a)
	}
	b := f.create(t, f.TenantA, map[string]any{"templateID": "base", "metadata": map[string]string{"team": "blue"}, "timeout": 600})
	if b.EnvdAccessToken == a.EnvdAccessToken {
		t.Fatal("two sandboxes got the same envd token")
	}

	status, body := call(t, "GET", f.URL+"/e2b/sandboxes/"+a.SandboxID, nil, f.TenantA)
	var detail struct {
		SandboxID, TemplateID, State, EnvdAccessToken string
		StartedAt, EndAt                              time.Time
		Metadata                                      map[string]string
		AllowInternetAccess                           *bool
	}
	if err := json.Unmarshal(body, &detail); status != 200 || err != nil {
		t.Fatalf("get: %d %s", status, body)
	}
	if !strings.Contains(string(body), `"lifecycle":{"onTimeout":"kill"`) {
		t.Errorf("the lifecycle of a sandbox without autoPause: %s", body)
	}
	if detail.SandboxID != a.SandboxID || detail.State != "running" || detail.EnvdAccessToken != a.EnvdAccessToken ||
		detail.AllowInternetAccess == nil || !*detail.AllowInternetAccess {
		t.Fatalf("get answered %s", body)
	}
	if diff := cmp.Diff(map[string]string{"team": "red", "run": "1"}, detail.Metadata); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	if life := detail.EndAt.Sub(detail.StartedAt); life < 295*time.Second || life > 305*time.Second {
		t.Errorf("a create without timeout lives %s, want E2B's 300s", life)
	}

	list := func(query string) ([]string, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", f.URL+"/e2b/v2/sandboxes?"+query, nil)
		req.Header.Set("X-API-Key", f.TenantA["X-API-Key"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var items []struct{ SandboxID, State string }
		if err := json.Unmarshal(data, &items); resp.StatusCode != 200 || err != nil {
			t.Fatalf("list %q: %d %s", query, resp.StatusCode, data)
		}
		var ids []string
		for _, it := range items {
			ids = append(ids, it.SandboxID)
		}
		return ids, resp.Header.Get("X-Next-Token")
	}
	// The SDKs quote the filter's keys and values, then URL-encode it again.
	redFilter := url.Values{"metadata": {url.Values{"team": {"red"}}.Encode()}}.Encode()
	if ids, _ := list(redFilter); !cmp.Equal(ids, []string{a.SandboxID}) {
		t.Errorf("list by metadata team=red: %v, want [%s]", ids, a.SandboxID)
	}
	if ids, _ := list(""); len(ids) != 2 {
		t.Errorf("list: %v, want both", ids)
	}
	newest, _ := list("")
	oldest, _ := list("order=asc")
	if len(newest) != 2 || !cmp.Equal(oldest, []string{newest[1], newest[0]}) {
		t.Errorf("list oldest first: %v, newest first: %v", oldest, newest)
	}
	if ids, _ := list("template=base"); len(ids) != 2 {
		t.Errorf("list of template base: %v", ids)
	}
	if ids, _ := list("template=other"); len(ids) != 0 {
		t.Errorf("list of template other: %v", ids)
	}
	if ids, _ := list(url.Values{"startedAfter": {time.Now().Add(time.Hour).Format(time.RFC3339)}}.Encode()); len(ids) != 0 {
		t.Errorf("list of sandboxes started in an hour: %v", ids)
	}
	first, next := list("limit=1")
	if len(first) != 1 || next == "" {
		t.Fatalf("first page of 1: %v, next token %q", first, next)
	}
	second, last := list("limit=1&nextToken=" + next)
	if len(second) != 1 || second[0] == first[0] || last != "" {
		t.Errorf("second page: %v (first %v), next token %q", second, first, last)
	}

	// envVars are the sandbox's environment: a command through the OpenSandbox door sees them.
	osKey := map[string]string{"OPEN-SANDBOX-API-KEY": f.TenantA["X-API-Key"]}
	status, body = call(t, "GET", f.URL+"/v1/sandboxes/"+a.SandboxID+"/endpoints/44772", nil, osKey)
	var ep struct {
		Endpoint string
		Headers  map[string]string
	}
	if err := json.Unmarshal(body, &ep); status != 200 || err != nil {
		t.Fatalf("endpoint: %d %s", status, body)
	}
	_, path, _ := strings.Cut(ep.Endpoint, "/")
	status, body = call(t, "POST", f.URL+"/"+path+"/command", map[string]string{"command": "echo greeting=$GREETING"}, ep.Headers)
	if status != 200 || !strings.Contains(string(body), "greeting=hi") {
		t.Errorf("envVars in the sandbox: %d %s", status, body)
	}

	status, body = call(t, "GET", f.URL+"/e2b/sandboxes/"+a.SandboxID+"/metrics?start=0", nil, f.TenantA)
	var metrics []map[string]any
	if err := json.Unmarshal(body, &metrics); status != 200 || err != nil {
		t.Errorf("metrics: %d %s", status, body)
	}

	status, body = call(t, "POST", f.URL+"/e2b/sandboxes/"+b.SandboxID+"/timeout", map[string]any{"timeout": 90}, f.TenantA)
	if status != http.StatusNoContent {
		t.Fatalf("timeout: %d %s", status, body)
	}
	_, body = call(t, "GET", f.URL+"/e2b/sandboxes/"+b.SandboxID, nil, f.TenantA)
	_ = json.Unmarshal(body, &detail)
	if left := time.Until(detail.EndAt); left > 95*time.Second || left < 60*time.Second {
		t.Errorf("after a timeout of 90s the sandbox ends in %s (it had 600s)", left)
	}

	if status, body = call(t, "POST", f.URL+"/e2b/sandboxes/"+a.SandboxID+"/pause", nil, f.TenantA); status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", status, body)
	}
	status, body = call(t, "POST", f.URL+"/e2b/sandboxes/"+a.SandboxID+"/pause", nil, f.TenantA)
	wantE2BError(t, "second pause", status, body, http.StatusConflict)
	if ids, _ := list("state=paused"); !cmp.Equal(ids, []string{a.SandboxID}) {
		t.Errorf("list of paused: %v", ids)
	}
	if ids, _ := list("state=running"); !cmp.Equal(ids, []string{b.SandboxID}) {
		t.Errorf("list of running: %v", ids)
	}
	status, body = call(t, "POST", f.URL+"/e2b/v2/sandboxes/"+a.SandboxID+"/connect", map[string]any{"timeout": 300}, f.TenantA)
	var conn e2bCreated
	if json.Unmarshal(body, &conn); status != http.StatusCreated || conn.EnvdAccessToken != a.EnvdAccessToken {
		t.Fatalf("connect to a paused sandbox: %d %s", status, body)
	}
	if status, body = call(t, "POST", f.URL+"/e2b/sandboxes/"+a.SandboxID+"/connect", map[string]any{}, f.TenantA); status != http.StatusOK {
		t.Fatalf("connect to a running sandbox: %d %s", status, body)
	}
	status, body = call(t, "POST", f.URL+"/e2b/sandboxes/"+a.SandboxID+"/resume", map[string]any{}, f.TenantA)
	wantE2BError(t, "resume of a running sandbox", status, body, http.StatusConflict)
	call(t, "POST", f.URL+"/e2b/sandboxes/"+a.SandboxID+"/pause", nil, f.TenantA)
	if status, body = call(t, "POST", f.URL+"/e2b/sandboxes/"+a.SandboxID+"/resume", map[string]any{"timeout": 120}, f.TenantA); status != http.StatusCreated {
		t.Fatalf("resume of a paused sandbox: %d %s", status, body)
	}

	if status, body = call(t, "DELETE", f.URL+"/e2b/sandboxes/"+a.SandboxID, nil, f.TenantA); status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", status, body)
	}
	status, body = call(t, "GET", f.URL+"/e2b/sandboxes/"+a.SandboxID, nil, f.TenantA)
	wantE2BError(t, "get after delete", status, body, http.StatusNotFound)
	status, body = call(t, "DELETE", f.URL+"/e2b/sandboxes/"+a.SandboxID, nil, f.TenantA)
	wantE2BError(t, "second delete", status, body, http.StatusNotFound)

	// The OpenSandbox door sees the same sandbox.
	if status, body = call(t, "GET", f.URL+"/v1/sandboxes/"+b.SandboxID, nil, map[string]string{"OPEN-SANDBOX-API-KEY": f.TenantA["X-API-Key"]}); status != 200 {
		t.Errorf("the OpenSandbox door does not see the E2B door's sandbox: %d %s", status, body)
	}
}

// TestE2BTemplates: a template alias names its configured image, which replaces a
// default of the same alias; "base" is its default; an unknown one is E2B's 404 (in
// TestE2BBadInput).
func TestE2BTemplates(t *testing.T) {
	f := startE2BFixture(t)
	sb := f.create(t, f.TenantA, map[string]any{"templateID": "other"})
	_, body := call(t, "GET", f.URL+"/v1/sandboxes/"+sb.SandboxID, nil, f.Admin)
	var v struct{ Image struct{ URI string } }
	if json.Unmarshal(body, &v); v.Image.URI != "sandgate/other:test" || sb.TemplateID != "other" {
		t.Errorf("template other: image %q, templateID %q", v.Image.URI, sb.TemplateID)
	}
	base := f.create(t, f.TenantA, nil)
	_, body = call(t, "GET", f.URL+"/v1/sandboxes/"+base.SandboxID, nil, f.Admin)
	if json.Unmarshal(body, &v); v.Image.URI != "sandgate/base:test" {
		t.Errorf("template base: image %q", v.Image.URI)
	}
}

// TestE2BPoolTemplate: a template that names a pool creates from the caller's pool of
// that name (a claim, or its template cold when it is empty); another tenant, without
// such a pool, gets a 404.
func TestE2BPoolTemplate(t *testing.T) {
	f := startE2BFixture(t)
	status, body := call(t, "POST", f.URL+"/v1/pools", map[string]any{"name": "warm",
		"template":     map[string]any{"image": map[string]string{"uri": "sandgate/pooled:test"}, "entrypoint": []string{"sleep", "600"}},
		"capacitySpec": map[string]int{"bufferMin": 1, "bufferMax": 1, "poolMin": 0, "poolMax": 2}}, f.TenantA)
	if status != http.StatusCreated {
		t.Fatalf("pool: %d %s", status, body)
	}
	t.Cleanup(func() { call(t, "DELETE", f.URL+"/v1/pools/warm", nil, f.TenantA) })
	sb := f.create(t, f.TenantA, map[string]any{"templateID": "warm", "metadata": map[string]string{"via": "pool"}})
	_, body = call(t, "GET", f.URL+"/v1/sandboxes/"+sb.SandboxID, nil, f.Admin)
	var v struct {
		Image    struct{ URI string }
		Metadata map[string]string
	}
	if json.Unmarshal(body, &v); v.Image.URI != "sandgate/pooled:test" || v.Metadata["via"] != "pool" || sb.TemplateID != "warm" {
		t.Errorf("a create of the pool's template: %s (templateID %q)", body, sb.TemplateID)
	}
	// The list names the template the create named, as the get does.
	status, body = call(t, "GET", f.URL+"/e2b/v2/sandboxes", nil, f.TenantA)
	var listed []struct{ SandboxID, TemplateID string }
	if err := json.Unmarshal(body, &listed); status != http.StatusOK || err != nil {
		t.Fatalf("list: %d %s", status, body)
	}
	found := false
	for _, it := range listed {
		if it.SandboxID == sb.SandboxID {
			found = true
			if it.TemplateID != "warm" {
				t.Errorf("listed with templateID %q, want the pool's \"warm\" as the get answers", it.TemplateID)
			}
		}
	}
	if !found {
		t.Errorf("the sandbox is not listed: %s", body)
	}
	status, body = call(t, "POST", f.URL+"/e2b/v2/sandboxes", map[string]any{"templateID": "warm"}, f.TenantB)
	wantE2BError(t, "tenant B's create of tenant A's pool", status, body, http.StatusNotFound)
}

// TestE2BBadInput: every client mistake is an E2B-shaped 4xx, never a 500.
func TestE2BBadInput(t *testing.T) {
	f := startE2BFixture(t)
	sb := f.create(t, f.TenantA, nil)
	item := f.URL + "/e2b/sandboxes/" + sb.SandboxID
	cases := []struct {
		name, method, url string
		body              any
		want              int
	}{
		{"no template", "POST", f.URL + "/e2b/v2/sandboxes", map[string]any{}, 400},
		{"unknown template", "POST", f.URL + "/e2b/v2/sandboxes", map[string]any{"templateID": "nope"}, 404},
		{"timeout of the wrong type", "POST", f.URL + "/e2b/v2/sandboxes", map[string]any{"templateID": "base", "timeout": "long"}, 400},
		{"negative timeout", "POST", f.URL + "/e2b/sandboxes", map[string]any{"templateID": "base", "timeout": -1}, 400},
		{"timeout below the operator's minimum", "POST", f.URL + "/e2b/v2/sandboxes", map[string]any{"templateID": "base", "timeout": 1}, 400},
		{"metadata of the wrong type", "POST", f.URL + "/e2b/v2/sandboxes", map[string]any{"templateID": "base", "metadata": []int{1}}, 400},
		{"bad metadata key", "POST", f.URL + "/e2b/v2/sandboxes", map[string]any{"templateID": "base", "metadata": map[string]string{"": "x"}}, 400},
		{"malformed JSON", "POST", f.URL + "/e2b/v2/sandboxes", json.RawMessage(`{"templateID":`), 400},
		{"empty body", "POST", f.URL + "/e2b/v2/sandboxes", nil, 400},
		{"limit 0", "GET", f.URL + "/e2b/v2/sandboxes?limit=0", nil, 400},
		{"limit too large", "GET", f.URL + "/e2b/v2/sandboxes?limit=1000", nil, 400},
		{"unknown state", "GET", f.URL + "/e2b/v2/sandboxes?state=gone", nil, 400},
		{"forged next token", "GET", f.URL + "/e2b/v2/sandboxes?nextToken=abc", nil, 400},
		{"unknown order", "GET", f.URL + "/e2b/v2/sandboxes?order=sideways", nil, 400},
		{"startedAfter that is no time", "GET", f.URL + "/e2b/v2/sandboxes?startedAfter=yesterday", nil, 400},
		{"bad metadata filter", "GET", f.URL + "/e2b/v2/sandboxes?metadata=%3D1", nil, 400},
		{"timeout without a value", "POST", item + "/timeout", map[string]any{}, 400},
		{"timeout of zero", "POST", item + "/timeout", map[string]any{"timeout": 0}, 400},
		{"timeout beyond the maximum", "POST", item + "/timeout", map[string]any{"timeout": 1 << 30}, 400},
		{"connect with a bad body", "POST", item + "/connect", json.RawMessage(`[1]`), 400},
		{"metrics from a bad start", "GET", item + "/metrics?start=yesterday", nil, 400},
		{"network of the wrong shape", "PUT", item + "/network", map[string]any{"allowOut": "pypi.org"}, 400},
		{"network without a body", "PUT", item + "/network", nil, 400},
		{"fork of no copies", "POST", item + "/fork", map[string]any{"count": 0}, 400},
		{"snapshot with a bad body", "POST", item + "/snapshots", map[string]any{"name": 7}, 400},
		{"snapshots by a bad limit", "GET", f.URL + "/e2b/snapshots?limit=-1", nil, 400},
		{"delete of a template that is no snapshot", "DELETE", f.URL + "/e2b/templates/base", nil, 404},
		{"unknown sandbox", "GET", f.URL + "/e2b/sandboxes/not-a-sandbox", nil, 404},
		{"unknown route", "GET", f.URL + "/e2b/templates", nil, 404},
		{"snapshots on a runtime without them", "POST", item + "/snapshots", map[string]any{}, 400},
		{"wrong method", "PUT", item, nil, 405},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			status, body := call(t, tt.method, tt.url, tt.body, f.TenantA)
			wantE2BError(t, tt.name, status, body, tt.want)
		})
	}
}

// TestE2BAuth: the control API wants a valid key in X-API-Key (E2B's header); another
// tenant's key finds none of the sandbox's routes, as if it did not exist.
func TestE2BAuth(t *testing.T) {
	f := startE2BFixture(t)
	a := f.create(t, f.TenantA, map[string]any{"templateID": "base", "metadata": map[string]string{"owner": "a"}})
	item := f.URL + "/e2b/sandboxes/" + a.SandboxID
	for _, tt := range []struct {
		name string
		key  map[string]string
		want int
	}{
		{"no key", nil, 401},
		{"wrong key", map[string]string{"X-API-Key": "sg_not-a-key"}, 401},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body := call(t, "POST", f.URL+"/e2b/v2/sandboxes", map[string]any{"templateID": "base"}, tt.key)
			wantE2BError(t, "create", status, body, tt.want)
			status, body = call(t, "GET", item, nil, tt.key)
			wantE2BError(t, "get", status, body, tt.want)
			status, body = call(t, "GET", f.URL+"/e2b/v2/sandboxes", nil, tt.key)
			wantE2BError(t, "list", status, body, tt.want)
		})
	}
	probes := []struct{ name, method, url string }{
		{"get", "GET", item},
		{"metrics", "GET", item + "/metrics"},
		{"timeout", "POST", item + "/timeout"},
		{"pause", "POST", item + "/pause"},
		{"resume", "POST", item + "/resume"},
		{"connect", "POST", item + "/connect"},
		{"connect v2", "POST", f.URL + "/e2b/v2/sandboxes/" + a.SandboxID + "/connect"},
		{"network", "PUT", item + "/network"},
		{"snapshot", "POST", item + "/snapshots"},
		{"fork", "POST", item + "/fork"},
		{"delete", "DELETE", item},
	}
	for _, p := range probes {
		t.Run("tenant B "+p.name, func(t *testing.T) {
			status, body := call(t, p.method, p.url, map[string]any{"timeout": 300}, f.TenantB)
			wantE2BError(t, p.name, status, body, http.StatusNotFound)
		})
	}
	// A viewer of tenant A reads, as Rego's access policy lets it, and changes nothing.
	_, body := call(t, "GET", f.URL+"/v1/whoami", nil, map[string]string{"OPEN-SANDBOX-API-KEY": f.TenantA["X-API-Key"]})
	var who struct{ Tenant string }
	if err := json.Unmarshal(body, &who); err != nil || who.Tenant == "" {
		t.Fatalf("whoami: %s", body)
	}
	viewer := map[string]string{"X-API-Key": newKey(t, f.URL, who.Tenant, "viewer")}
	if status, body := call(t, "GET", item, nil, viewer); status != 200 {
		t.Errorf("a viewer's get: %d %s", status, body)
	}
	for _, p := range []struct{ method, url string }{{"POST", f.URL + "/e2b/v2/sandboxes"}, {"POST", item + "/pause"}, {"DELETE", item}} {
		status, body := call(t, p.method, p.url, map[string]any{"templateID": "base"}, viewer)
		wantE2BError(t, "a viewer's "+p.method+" "+p.url, status, body, http.StatusForbidden)
	}

	status, body := call(t, "GET", f.URL+"/e2b/v2/sandboxes", nil, f.TenantB)
	if status != 200 || strings.Contains(string(body), a.SandboxID) {
		t.Errorf("tenant B's list: %d %s", status, body)
	}
	status, body = call(t, "GET", item, nil, f.TenantA)
	if status != 200 || !strings.Contains(string(body), `"running"`) {
		t.Errorf("after tenant B's probes the sandbox is %d %s", status, body)
	}
}

// TestE2BHeaderRouting: calls naming a sandbox in E2b-Sandbox-Id reach envd and the
// code interpreter (the agent, under /envd and /e2b-code) with the envd token and its
// other ports with the traffic token;
// both are checked at the gateway and never forwarded. A token of one sandbox opens
// no other, whichever tenant holds it; the agent's and the enforcer's own ports are
// not reachable this way; a sandbox that is gone or paused answers E2B's 502.
func TestE2BHeaderRouting(t *testing.T) {
	f := startE2BFixture(t)
	a := f.create(t, f.TenantA, nil)
	other := f.create(t, f.TenantA, nil)
	b := f.create(t, f.TenantB, nil)
	const port = 8000
	startUpstreamProcess(t, net.JoinHostPort(f.inspect(a.SandboxID), strconv.Itoa(port)))

	callIn := func(id string, port int, path string, hdr map[string]string) (int, []byte) {
		t.Helper()
		h := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": strconv.Itoa(port)}
		for k, v := range hdr {
			h[k] = v
		}
		return call(t, "GET", f.URL+path, nil, h)
	}

	status, body := callIn(a.SandboxID, port, "/headers?x=1", map[string]string{"E2B-Traffic-Access-Token": *a.TrafficAccessToken})
	var echo struct {
		Path    string
		Headers map[string][]string
	}
	if err := json.Unmarshal(body, &echo); status != 200 || err != nil || echo.Path != "/headers?x=1" {
		t.Fatalf("the sandbox's port with its traffic token: %d %s", status, body)
	}
	for _, h := range []string{"E2b-Sandbox-Id", "E2b-Sandbox-Port", "E2b-Traffic-Access-Token", "X-Access-Token"} {
		if _, ok := echo.Headers[h]; ok {
			t.Errorf("the sandbox received %s", h)
		}
	}
	if status, body = callIn(a.SandboxID, port, "/headers", map[string]string{"X-Access-Token": a.EnvdAccessToken}); status != 200 {
		t.Errorf("the sandbox's port with its envd token (as the code interpreter SDK sends it): %d %s", status, body)
	}
	// envd: the agent's, under /envd, after the gateway's signed call passed the agent's
	// authentication.
	if status, body = callIn(a.SandboxID, e2bEnvdPort, "/health", map[string]string{"X-Access-Token": a.EnvdAccessToken}); status != http.StatusNoContent {
		t.Errorf("envd's health with its token: %d %s, want envd's 204", status, body)
	}

	// The code interpreter: the agent's E2B code-interpreter API, with the envd token.
	status, body = callIn(a.SandboxID, e2bCodeInterpreterPort, "/health", map[string]string{"X-Access-Token": a.EnvdAccessToken})
	if status != http.StatusOK || !strings.Contains(string(body), "OK") {
		t.Errorf("the code interpreter's health with the envd token: %d %s", status, body)
	}
	status, body = callIn(a.SandboxID, e2bCodeInterpreterPort, "/health", map[string]string{"E2B-Traffic-Access-Token": *a.TrafficAccessToken})
	if status != http.StatusOK {
		t.Errorf("the code interpreter's health with the traffic token (as its SDKs send it for contexts): %d %s", status, body)
	}

	refusals := []struct {
		name string
		id   string
		port int
		hdr  map[string]string
		want int
	}{
		{"envd without a token", a.SandboxID, e2bEnvdPort, nil, 401},
		{"envd with a forged token", a.SandboxID, e2bEnvdPort, map[string]string{"X-Access-Token": "forged"}, 403},
		{"envd with the traffic token", a.SandboxID, e2bEnvdPort, map[string]string{"X-Access-Token": *a.TrafficAccessToken}, 403},
		{"envd with another sandbox's token", a.SandboxID, e2bEnvdPort, map[string]string{"X-Access-Token": other.EnvdAccessToken}, 403},
		{"envd with tenant B's token", a.SandboxID, e2bEnvdPort, map[string]string{"X-Access-Token": b.EnvdAccessToken}, 403},
		{"envd with tenant B's API key", a.SandboxID, e2bEnvdPort, map[string]string{"X-API-Key": f.TenantB["X-API-Key"]}, 401},
		{"tenant B's token for its own id in another's request", b.SandboxID, e2bEnvdPort, map[string]string{"X-Access-Token": a.EnvdAccessToken}, 403},
		{"code interpreter without a token", a.SandboxID, e2bCodeInterpreterPort, nil, 401},
		{"code interpreter with another sandbox's traffic token", a.SandboxID, e2bCodeInterpreterPort, map[string]string{"E2B-Traffic-Access-Token": *other.TrafficAccessToken}, 403},
		{"code interpreter with another sandbox's token", a.SandboxID, e2bCodeInterpreterPort, map[string]string{"X-Access-Token": other.EnvdAccessToken}, 403},
		{"port without a token", a.SandboxID, port, nil, 401},
		{"port with another sandbox's traffic token", a.SandboxID, port, map[string]string{"E2B-Traffic-Access-Token": *other.TrafficAccessToken}, 403},
		{"port with tenant B's traffic token", a.SandboxID, port, map[string]string{"E2B-Traffic-Access-Token": *b.TrafficAccessToken}, 403},
		{"port with tenant B's envd token", a.SandboxID, port, map[string]string{"X-Access-Token": b.EnvdAccessToken}, 403},
		{"the agent's own port", a.SandboxID, 44772, map[string]string{"X-Access-Token": a.EnvdAccessToken, "E2B-Traffic-Access-Token": *a.TrafficAccessToken}, 403},
		{"the enforcer's port", a.SandboxID, 18080, map[string]string{"X-Access-Token": a.EnvdAccessToken, "E2B-Traffic-Access-Token": *a.TrafficAccessToken}, 403},
		{"an unknown sandbox", "00000000-0000-4000-8000-000000000000", e2bEnvdPort, map[string]string{"X-Access-Token": a.EnvdAccessToken}, 502},
		{"an id that is no sandbox's", "../v1/tenants", e2bEnvdPort, map[string]string{"X-Access-Token": a.EnvdAccessToken}, 502},
		{"a port that is no port", a.SandboxID, 0, map[string]string{"X-Access-Token": a.EnvdAccessToken}, 400},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			status, body := callIn(tt.id, tt.port, "/headers", tt.hdr)
			wantE2BError(t, tt.name, status, body, tt.want)
			if tt.want == 502 && !strings.Contains(string(body), "was not found") {
				t.Errorf("%s: %s does not say the sandbox was not found", tt.name, body)
			}
		})
	}

	// A sandbox whose ports are public (a tenant-admin's create): its own ports answer
	// anyone, never envd nor the code interpreter.
	pub := f.create(t, f.TenantA, map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": true}})
	if pub.TrafficAccessToken != nil {
		t.Errorf("a public sandbox's traffic token is %q, want null as E2B answers", *pub.TrafficAccessToken)
	}
	startUpstreamProcess(t, net.JoinHostPort(f.inspect(pub.SandboxID), strconv.Itoa(port)))
	if status, body = callIn(pub.SandboxID, port, "/headers", nil); status != 200 {
		t.Errorf("a public sandbox's port without a token: %d %s", status, body)
	}
	for _, p := range []int{e2bEnvdPort, e2bCodeInterpreterPort} {
		status, body = callIn(pub.SandboxID, p, "/health", nil)
		wantE2BError(t, "a public sandbox's port "+strconv.Itoa(p)+" without a token", status, body, http.StatusUnauthorized)
	}

	// A header-routed call goes before any path route.
	status, body = call(t, "GET", f.URL+"/v1/sandboxes", nil, map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": strconv.Itoa(port),
		"E2B-Traffic-Access-Token": *a.TrafficAccessToken, "OPEN-SANDBOX-API-KEY": "admin-key"})
	if json.Unmarshal(body, &echo); status != 200 || echo.Path != "/v1/sandboxes" {
		t.Errorf("a header-routed call to /v1/sandboxes: %d %s, want the sandbox's answer", status, body)
	}
	if _, ok := echo.Headers["Open-Sandbox-Api-Key"]; ok {
		t.Error("the sandbox received the API key")
	}

	call(t, "POST", f.URL+"/e2b/sandboxes/"+a.SandboxID+"/pause", nil, f.TenantA)
	// The proxy routes from its record cache, which learns of the pause within a moment.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		status, body = callIn(a.SandboxID, e2bEnvdPort, "/health", map[string]string{"X-Access-Token": a.EnvdAccessToken})
		if status == http.StatusBadGateway || time.Now().After(deadline) {
			break
		}
	}
	wantE2BError(t, "a paused sandbox", status, body, http.StatusBadGateway)
	if !strings.Contains(string(body), "was not found") {
		t.Errorf("a paused sandbox: %s", body)
	}
	call(t, "DELETE", f.URL+"/e2b/sandboxes/"+a.SandboxID, nil, f.TenantA)
	status, body = callIn(a.SandboxID, e2bEnvdPort, "/health", map[string]string{"X-Access-Token": a.EnvdAccessToken})
	wantE2BError(t, "a deleted sandbox", status, body, http.StatusBadGateway)
	if !strings.Contains(string(body), "was not found") {
		t.Errorf("a deleted sandbox: %s", body)
	}
}

// TestE2BEgressPolicy: E2B's network settings as the egress policy the core judges.
func TestE2BEgressPolicy(t *testing.T) {
	no, yes := false, true
	cases := []struct {
		name     string
		internet *bool
		network  *e2bNetwork
		want     map[string]any
	}{
		{"nothing asked", nil, nil, nil},
		{"internet on", &yes, nil, nil},
		{"internet off", &no, nil, map[string]any{"defaultAction": "deny", "egress": []map[string]string{}}},
		{"allow one, deny all", nil, &e2bNetwork{AllowOut: []string{"pypi.org"}, DenyOut: []string{e2bAllTraffic}},
			map[string]any{"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": "pypi.org"}}}},
		{"deny one", nil, &e2bNetwork{DenyOut: []string{"10.0.0.0/8"}},
			map[string]any{"defaultAction": "allow", "egress": []map[string]string{{"action": "deny", "target": "10.0.0.0/8"}}}},
		{"internet off with an allow", &no, &e2bNetwork{AllowOut: []string{"1.1.1.1"}},
			map[string]any{"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": "1.1.1.1"}}}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := e2bEgressPolicy(tt.internet, tt.network)
			if !ok {
				got = nil
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestE2BTemplatesSetting: the e2b_templates setting's items.
func TestE2BTemplatesSetting(t *testing.T) {
	got, err := E2BTemplates([]string{"base=sandgate/base:1", "py = pool:python"})
	if err != nil || !cmp.Equal(got, map[string]string{"base": "sandgate/base:1", "py": "pool:python"}) {
		t.Errorf("E2BTemplates = %v, %v", got, err)
	}
	for _, bad := range [][]string{{"base"}, {"=img"}, {"a=pool:"}, {"a=x", "a=y"}} {
		if _, err := E2BTemplates(bad); err == nil {
			t.Errorf("E2BTemplates(%q) accepted", bad)
		}
	}
}

// TestE2BTokensRotate: rotating a sandbox's access secret (the OpenSandbox door's
// access/rotate) revokes both of its E2B tokens; its info answers the new envd token.
func TestE2BTokensRotate(t *testing.T) {
	f := startE2BFixture(t)
	sb := f.create(t, f.TenantA, nil)
	envd := func(token string) int {
		status, _ := call(t, "GET", f.URL+"/health", nil, map[string]string{"E2b-Sandbox-Id": sb.SandboxID,
			"E2b-Sandbox-Port": strconv.Itoa(e2bCodeInterpreterPort), "X-Access-Token": token})
		return status
	}
	if got := envd(sb.EnvdAccessToken); got != http.StatusOK {
		t.Fatalf("before the rotation: %d", got)
	}
	if status, body := call(t, "POST", f.URL+"/v1/sandboxes/"+sb.SandboxID+"/access/rotate", nil, map[string]string{"OPEN-SANDBOX-API-KEY": f.TenantA["X-API-Key"]}); status != http.StatusNoContent {
		t.Fatalf("rotate: %d %s", status, body)
	}
	if got := envd(sb.EnvdAccessToken); got != http.StatusForbidden {
		t.Errorf("the envd token from before the rotation: %d, want 403", got)
	}
	_, body := call(t, "GET", f.URL+"/e2b/sandboxes/"+sb.SandboxID, nil, f.TenantA)
	var detail struct{ EnvdAccessToken string }
	if json.Unmarshal(body, &detail); detail.EnvdAccessToken == "" || detail.EnvdAccessToken == sb.EnvdAccessToken {
		t.Fatalf("the info after the rotation: %s", body)
	}
	if got := envd(detail.EnvdAccessToken); got != http.StatusOK {
		t.Errorf("the new envd token: %d", got)
	}
}

// TestE2BAgentCallsAudited: a process started through envd and a cell run by the code
// interpreter, through the door, are command.started events of the sandbox, as the
// OpenSandbox door's commands are.
func TestE2BAgentCallsAudited(t *testing.T) {
	f := startE2BFixture(t)
	sb := f.create(t, f.TenantA, nil)
	hdr := func(port int) map[string]string {
		return map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": strconv.Itoa(port), "X-Access-Token": sb.EnvdAccessToken}
	}
	// envd's Start is a Connect server stream: one enveloped JSON message.
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "echo through-envd"}}})
	envelope := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(envelope[1:5], uint32(len(msg)))
	req, _ := http.NewRequest("POST", f.URL+"/process.Process/Start", bytes.NewReader(envelope))
	for k, v := range hdr(e2bEnvdPort) {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(out), "through-envd") && !strings.Contains(string(out), "dGhyb3VnaC1lbnZk") {
		t.Errorf("envd Start through the door: %d %s", resp.StatusCode, out)
	}
	call(t, "POST", f.URL+"/execute", map[string]any{"code": "print('through-the-interpreter')"}, hdr(e2bCodeInterpreterPort))

	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, body := call(t, "GET", f.URL+"/v1/sandboxes/"+sb.SandboxID+"/diagnostics/events?scope=all", nil, f.Admin)
		envd := strings.Contains(string(body), "/bin/sh -c echo through-envd")
		cell := strings.Contains(string(body), "through-the-interpreter")
		if envd && cell {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox's events name the envd process %v and the cell %v: %s", envd, cell, body)
		}
	}
}

// TestE2BPauseKeeps: as in E2B, a paused sandbox is kept (for the operator's longest
// lifetime) and a connect gives it a timeout again; with autoPause its timeout pauses
// it instead of removing it.
func TestE2BPauseKeeps(t *testing.T) {
	f := startE2BFixtureWith(t, gateway.Config{ReapInterval: 20 * time.Millisecond, MinTimeout: time.Second, MaxTimeout: time.Hour})
	type detail struct {
		State     string
		EndAt     time.Time
		Lifecycle struct{ OnTimeout string }
	}
	get := func(id string) detail {
		t.Helper()
		status, body := call(t, "GET", f.URL+"/e2b/sandboxes/"+id, nil, f.TenantA)
		var d detail
		if err := json.Unmarshal(body, &d); status != 200 || err != nil {
			t.Fatalf("get: %d %s", status, body)
		}
		return d
	}
	near := func(what string, got time.Time, want time.Duration) {
		t.Helper()
		if left := time.Until(got); left < want-10*time.Second || left > want+time.Second {
			t.Errorf("%s: ends in %s, want about %s", what, left, want)
		}
	}

	sb := f.create(t, f.TenantA, map[string]any{"templateID": "base", "timeout": 120})
	call(t, "POST", f.URL+"/e2b/sandboxes/"+sb.SandboxID+"/pause", nil, f.TenantA)
	near("a paused sandbox", get(sb.SandboxID).EndAt, time.Hour)
	if status, body := call(t, "POST", f.URL+"/e2b/v2/sandboxes/"+sb.SandboxID+"/connect", map[string]any{"timeout": 200}, f.TenantA); status != http.StatusCreated {
		t.Fatalf("connect: %d %s", status, body)
	}
	near("a resumed sandbox", get(sb.SandboxID).EndAt, 200*time.Second)

	auto := f.create(t, f.TenantA, map[string]any{"templateID": "base", "timeout": 1, "autoPause": true})
	if d := get(auto.SandboxID); d.Lifecycle.OnTimeout != "pause" {
		t.Errorf("the lifecycle of an autoPause sandbox: %+v", d)
	}
	for deadline := time.Now().Add(5 * time.Second); get(auto.SandboxID).State != "paused"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("an autoPause sandbox is not paused at its timeout")
		}
	}
	near("a sandbox paused at its timeout", get(auto.SandboxID).EndAt, time.Hour)
	if status, body := call(t, "POST", f.URL+"/e2b/sandboxes/"+auto.SandboxID+"/connect", map[string]any{"timeout": 60}, f.TenantA); status != http.StatusCreated {
		t.Fatalf("connect to a sandbox paused at its timeout: %d %s", status, body)
	}
	if d := get(auto.SandboxID); d.State != "running" {
		t.Errorf("after the connect: %+v", d)
	}
}

// TestE2BAutoResume: a sandbox created with autoResume, paused, is resumed by a call
// into it that its token opens (and given a timeout again); a call without its token
// resumes nothing.
func TestE2BAutoResume(t *testing.T) {
	f := startE2BFixture(t)
	sb := f.create(t, f.TenantA, map[string]any{"templateID": "base", "autoResume": map[string]bool{"enabled": true}})
	state := func() string {
		_, body := call(t, "GET", f.URL+"/e2b/sandboxes/"+sb.SandboxID, nil, f.TenantA)
		var d struct {
			State     string
			Lifecycle struct{ AutoResume bool }
		}
		_ = json.Unmarshal(body, &d)
		if !d.Lifecycle.AutoResume {
			t.Errorf("the lifecycle does not say autoResume: %s", body)
		}
		return d.State
	}
	if status, body := call(t, "POST", f.URL+"/e2b/sandboxes/"+sb.SandboxID+"/pause", nil, f.TenantA); status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", status, body)
	}
	health := func(token string) (int, []byte) {
		return call(t, "GET", f.URL+"/health", nil, map[string]string{"E2b-Sandbox-Id": sb.SandboxID,
			"E2b-Sandbox-Port": strconv.Itoa(e2bEnvdPort), "X-Access-Token": token})
	}
	status, body := health("forged")
	wantE2BError(t, "a paused sandbox's envd with a forged token", status, body, http.StatusForbidden)
	if got := state(); got != "paused" {
		t.Fatalf("a refused call resumed the sandbox: %s", got)
	}
	if status, body := health(sb.EnvdAccessToken); status != http.StatusNoContent {
		t.Fatalf("a call into the paused sandbox: %d %s, want envd's 204", status, body)
	}
	if got := state(); got != "running" {
		t.Errorf("after the call the sandbox is %s", got)
	}
}

// TestE2BCreateRefusesWhatItCannotHonour: a create asking what the door cannot give
// (an MCP gateway, workload identities, envd without a token, a pause that drops the
// memory) or mounting a volume where it must not is refused with a 400 in E2B's shape
// that names the field, before any sandbox exists; what the door honours as asked
// (secure true, autoPauseMemory true) is accepted.
func TestE2BCreateRefusesWhatItCannotHonour(t *testing.T) {
	f := startE2BFixture(t)
	mount := func(mounts ...map[string]any) map[string]any {
		return map[string]any{"templateID": "base", "volumeMounts": mounts}
	}
	at := func(name, path string) map[string]any { return map[string]any{"name": name, "path": path} }
	cases := []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"mcp", map[string]any{"templateID": "base", "mcp": map[string]any{"github": map[string]any{"token": "x"}}}, "mcp"},
		{"iam", map[string]any{"templateID": "base", "iam": map[string]any{"workloadTokens": []any{}}}, "iam"},
		{"secure false", map[string]any{"templateID": "base", "secure": false}, "secure"},
		{"autoPauseMemory false", map[string]any{"templateID": "base", "autoPause": true, "autoPauseMemory": false}, "autoPauseMemory"},
		{"relative mount path", mount(at("data", "mnt/data")), "volumeMounts[0].path"},
		{"mount path with ..", mount(at("data", "/mnt/../etc")), "volumeMounts[0].path"},
		{"mount path with .", mount(at("data", "/mnt/./data")), "volumeMounts[0].path"},
		{"mount over the programs", mount(at("data", "/usr/local/bin")), "volumeMounts[0].path"},
		{"mount over the agent", mount(at("data", "/.sandgate")), "volumeMounts[0].path"},
		{"mount inside the agent", mount(at("data", "/.sandgate/x")), "volumeMounts[0].path"},
		{"mount over the root", mount(at("data", "/")), "volumeMounts[0].path"},
		{"mount over the user's home", mount(at("data", "/home/user/")), "volumeMounts[0].path"},
		{"mount over /etc", mount(at("data", "/etc")), "volumeMounts[0].path"},
		{"two volumes at one path", mount(at("a", "/mnt/x"), at("b", "/mnt/x/")), "volumeMounts[1].path"},
		{"volume name that is none", mount(at("Bad_Name", "/mnt/x")), "volumeMounts[0].name"},
		{"empty volume name", mount(at("", "/mnt/x")), "volumeMounts[0].name"},
		{"volumes on a pool's template", map[string]any{"templateID": "warm", "volumeMounts": []any{at("data", "/mnt/data")}}, "volumeMounts"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			status, body := call(t, "POST", f.URL+"/e2b/v2/sandboxes", tt.body, f.TenantA)
			wantE2BError(t, tt.name, status, body, http.StatusBadRequest)
			if !strings.Contains(string(body), tt.field) {
				t.Errorf("%s: %s does not name %s", tt.name, body, tt.field)
			}
		})
	}
	status, body := call(t, "GET", f.URL+"/e2b/v2/sandboxes", nil, f.TenantA)
	if status != http.StatusOK || strings.TrimSpace(string(body)) != "[]" {
		t.Errorf("after the refusals the tenant has sandboxes: %d %s", status, body)
	}
	for _, honoured := range []map[string]any{
		{"templateID": "base", "secure": true},
		{"templateID": "base", "autoPause": true, "autoPauseMemory": true},
		{"templateID": "base", "mcp": nil, "iam": nil},
	} {
		f.create(t, f.TenantA, honoured)
	}
}

// TestE2BVolumeRoutes: the volume routes answer in E2B's shape, under the keys' roles
// (a viewer lists but makes and removes nothing), and on a runtime that keeps no named
// volumes apart from sandboxes (the in-process one) every volume call, a create's
// volumeMounts included, is refused as such (501), never dropped.
func TestE2BVolumeRoutes(t *testing.T) {
	f := startE2BFixture(t)
	status, body := call(t, "POST", f.URL+"/v1/tenants", map[string]any{"name": "e2b-viewers"}, map[string]string{"OPEN-SANDBOX-API-KEY": "admin-key"})
	var tenant struct{ ID string }
	if json.Unmarshal(body, &tenant); status != http.StatusCreated || tenant.ID == "" {
		t.Fatalf("tenant: %d %s", status, body)
	}
	viewer := map[string]string{"X-API-Key": newKey(t, f.URL, tenant.ID, "viewer")}
	cases := []struct {
		name, method, url string
		key               map[string]string
		body              any
		want              int
	}{
		{"create", "POST", "/e2b/volumes", f.TenantA, map[string]any{"name": "data"}, http.StatusNotImplemented},
		{"create of a bad name", "POST", "/e2b/volumes", f.TenantA, map[string]any{"name": "../data"}, http.StatusBadRequest},
		{"create without a body", "POST", "/e2b/volumes", f.TenantA, nil, http.StatusBadRequest},
		{"list", "GET", "/e2b/volumes", f.TenantA, nil, http.StatusNotImplemented},
		{"get", "GET", "/e2b/volumes/data", f.TenantA, nil, http.StatusNotImplemented},
		{"get of a name no volume has", "GET", "/e2b/volumes/Not_A_Name", f.TenantA, nil, http.StatusNotFound},
		{"delete", "DELETE", "/e2b/volumes/data", f.TenantA, nil, http.StatusNotImplemented},
		{"create by a viewer", "POST", "/e2b/volumes", viewer, map[string]any{"name": "data"}, http.StatusForbidden},
		{"delete by a viewer", "DELETE", "/e2b/volumes/data", viewer, nil, http.StatusForbidden},
		{"list by a viewer", "GET", "/e2b/volumes", viewer, nil, http.StatusNotImplemented},
		{"without a key", "GET", "/e2b/volumes", nil, nil, http.StatusUnauthorized},
		{"wrong method", "PUT", "/e2b/volumes/data", f.TenantA, nil, http.StatusMethodNotAllowed},
		{"a create mounting a volume", "POST", "/e2b/v2/sandboxes", f.TenantA, map[string]any{"templateID": "base", "volumeMounts": []any{map[string]any{"name": "data", "path": "/mnt/data"}}}, http.StatusNotImplemented},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			status, body := call(t, tt.method, f.URL+tt.url, tt.body, tt.key)
			wantE2BError(t, tt.name, status, body, tt.want)
		})
	}
}

// TestE2BSnapshotNamesPerTenant: E2B's namespaced names (namespace/alias:tag) resolve
// only among the caller's tenant's snapshots. Two tenants' Ready snapshots of one name
// are written to the store as the snapshot feature writes them (the in-process runtime
// makes no images); each tenant lists, and is refused, only by its own names: another
// tenant's namespace, its full snapshot id and a name only it has are nobody's to list,
// create from or delete, and a snapshot may not be named into another namespace.
func TestE2BSnapshotNamesPerTenant(t *testing.T) {
	f := startE2BFixture(t)
	ctx := context.Background()
	now := time.Now().UTC()
	put := func(id, tenant, name string) {
		snap := &store.Snapshot{ID: id, Tenant: tenant, SandboxID: "00000000-0000-4000-8000-000000000000", Name: name,
			State: gateway.SnapshotReady, CreatedAt: now, LastTransitionAt: now, Image: "sandgate-snapshot/test:" + id}
		if err := f.store.PutSnapshot(ctx, snap); err != nil {
			t.Fatal(err)
		}
	}
	const snapA, snapB, onlyA = "0a000000-0000-4000-8000-000000000001", "0b000000-0000-4000-8000-000000000002", "0a000000-0000-4000-8000-000000000003"
	put(snapA, f.tenantA, "shared:default")
	put(snapB, f.tenantB, "shared:default")
	put(onlyA, f.tenantA, "only-a:v1")
	nsA, nsB := f.tenantA, f.tenantB

	listed := func(key map[string]string, name string) []string {
		t.Helper()
		status, body := call(t, "GET", f.URL+"/e2b/snapshots?name="+url.QueryEscape(name), nil, key)
		var items []struct {
			SnapshotID string   `json:"snapshotID"`
			Names      []string `json:"names"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &items) != nil {
			t.Fatalf("list %q: %d %s", name, status, body)
		}
		var ids []string
		for _, it := range items {
			ids = append(ids, it.SnapshotID+" "+strings.Join(it.Names, ","))
		}
		return ids
	}
	for _, tt := range []struct {
		name  string
		key   map[string]string
		query string
		want  []string
	}{
		{"A's name", f.TenantA, "shared", []string{nsA + "/shared:default " + nsA + "/shared"}},
		{"B's name", f.TenantB, "shared", []string{nsB + "/shared:default " + nsB + "/shared"}},
		{"A's full id, by A", f.TenantA, nsA + "/shared:default", []string{nsA + "/shared:default " + nsA + "/shared"}},
		{"A's full id, by B", f.TenantB, nsA + "/shared:default", nil},
		{"A's namespace, by B", f.TenantB, nsA + "/shared", nil},
		{"A's core id, by B", f.TenantB, snapA, nil},
		{"a name only A has, by B", f.TenantB, "only-a", nil},
		{"a name only A has, by A", f.TenantA, "only-a", []string{nsA + "/only-a:v1 " + nsA + "/only-a"}},
	} {
		if got := listed(tt.key, tt.query); !cmp.Equal(got, tt.want) {
			t.Errorf("%s: listed %q, want %q", tt.name, got, tt.want)
		}
	}

	status, body := call(t, "DELETE", f.URL+"/e2b/templates/"+url.PathEscape(snapA+":default"), nil, f.TenantB)
	wantE2BError(t, "B's delete of A's core id", status, body, http.StatusNotFound)
	for _, template := range []string{nsA + "/shared:default", nsA + "/shared", "only-a:v1", nsA + "/only-a:v1"} {
		status, body := call(t, "POST", f.URL+"/e2b/v2/sandboxes", map[string]any{"templateID": template}, f.TenantB)
		wantE2BError(t, "B's create from "+template, status, body, http.StatusNotFound)
		status, body = call(t, "DELETE", f.URL+"/e2b/templates/"+url.PathEscape(template), nil, f.TenantB)
		wantE2BError(t, "B's delete of "+template, status, body, http.StatusNotFound)
	}
	if got := listed(f.TenantA, "shared"); len(got) != 1 {
		t.Errorf("A's snapshot after B's deletes: %q", got)
	}

	sb := f.create(t, f.TenantB, nil)
	status, body = call(t, "POST", f.URL+"/e2b/sandboxes/"+sb.SandboxID+"/snapshots", map[string]any{"name": nsA + "/mine"}, f.TenantB)
	wantE2BError(t, "a snapshot named into A's namespace", status, body, http.StatusBadRequest)
	if !strings.Contains(string(body), "namespace") {
		t.Errorf("a snapshot named into A's namespace: %s, want the namespace named as the reason", body)
	}
}
