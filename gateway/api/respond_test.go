package api

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sandgate/sandgate/gateway"
)

// TestEveryKindHasAStatus pins the one map from the core's error kinds to HTTP statuses:
// every kind has its own status, and only KindInternal (or a kind the map lacks) is a 500.
func TestEveryKindHasAStatus(t *testing.T) {
	want := map[gateway.Kind]int{
		gateway.KindInvalid: 400, gateway.KindUnauthenticated: 401, gateway.KindForbidden: 403,
		gateway.KindNotFound: 404, gateway.KindMethodNotAllowed: 405, gateway.KindConflict: 409,
		gateway.KindTooLarge: 413, gateway.KindUnsupportedMedia: 415, gateway.KindUnprocessable: 422,
		gateway.KindQuota: 429, gateway.KindInternal: 500, gateway.KindUnsupported: 501,
		gateway.KindUpstream: 502, gateway.KindUnavailable: 503, gateway.KindTimeout: 504,
	}
	if len(gateway.Kinds) != len(want) {
		t.Errorf("gateway.Kinds has %d kinds, this table %d: add the new kind here and to statusOf", len(gateway.Kinds), len(want))
	}
	seen := map[int]gateway.Kind{}
	for _, k := range gateway.Kinds {
		got := statusOf(k)
		if w, ok := want[k]; !ok || got != w {
			t.Errorf("statusOf(%s) = %d, want %d", k, got, w)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%s and %s both answer %d", k, other, got)
		}
		seen[got] = k
	}
	if got := statusOf("no such kind"); got != 500 {
		t.Errorf("statusOf(unknown) = %d, want 500", got)
	}
}

// TestErrorStatusesByArea: a representative refusal of each area of the core, asked over
// HTTP of a real Service (real redis-server, in-process runtime), answers the status and
// code it answered when the core still chose statuses itself. The SDKs and the e2e tests
// match on these.
func TestErrorStatusesByArea(t *testing.T) {
	srv, _ := startTestAPI(t, nil)
	admin := map[string]string{"OPEN-SANDBOX-API-KEY": "admin-key"}
	// A viewer key of a tenant of its own, for the policy's denials.
	code, body := call(t, "POST", srv.URL+"/v1/tenants", map[string]any{"name": "errs"}, admin)
	if code != 201 && code != 200 {
		t.Fatalf("create tenant: %d %s", code, body)
	}
	var tenant struct{ ID string }
	_ = json.Unmarshal(body, &tenant)
	code, body = call(t, "POST", srv.URL+"/v1/tenants/"+tenant.ID+"/keys", map[string]any{"role": "viewer"}, admin)
	if code != 201 && code != 200 {
		t.Fatalf("create key: %d %s", code, body)
	}
	var key struct{ Key string }
	_ = json.Unmarshal(body, &key)
	viewer := map[string]string{"OPEN-SANDBOX-API-KEY": key.Key}
	code, body = call(t, "POST", srv.URL+"/v1/pools", map[string]any{"name": "p1",
		"template":     map[string]any{"image": map[string]string{"uri": "sandgate/base:test"}, "entrypoint": []string{"sleep", "600"}},
		"capacitySpec": map[string]int{"bufferMin": 0, "bufferMax": 0, "poolMin": 0, "poolMax": 1}}, admin)
	if code != 201 && code != 200 {
		t.Fatalf("create pool: %d %s", code, body)
	}

	tests := []struct {
		name, method, path string
		body               any
		headers            map[string]string
		status             int
		code               string
	}{
		{"authenticate: no key", "GET", "/v1/sandboxes", nil, nil, 401, gateway.CodeMissingAPIKey},
		{"authenticate: unknown key", "GET", "/v1/sandboxes", nil, map[string]string{"OPEN-SANDBOX-API-KEY": "nope"}, 401, gateway.CodeInvalidAPIKey},
		{"authorize: a viewer creates", "POST", "/v1/sandboxes", map[string]any{"image": map[string]string{"uri": "x"}}, viewer, 403, "POLICY::DENIED"},
		{"routes: unknown route", "GET", "/v1/nothing-here", nil, admin, 404, gateway.CodeRouteNotFound},
		{"routes: wrong method", "PATCH", "/v1/sandboxes", nil, admin, 405, gateway.CodeMethodNotAllowed},
		{"input: malformed JSON", "POST", "/v1/sandboxes", json.RawMessage(`{"image":`), admin, 400, gateway.CodeInvalidParameter},
		{"input: body too large", "POST", "/v1/sandboxes", map[string]string{"pad": strings.Repeat("x", 2<<20)}, admin, 413, gateway.CodeInvalidParameter},
		{"validate: metadata", "POST", "/v1/sandboxes", map[string]any{"image": map[string]string{"uri": "sandgate/base:test"},
			"entrypoint": []string{"sleep", "1"}, "timeout": 60, "metadata": map[string]string{"bad key!": "v"}}, admin, 400, gateway.CodeInvalidMetadata},
		{"sandboxes: not found", "GET", "/v1/sandboxes/no-such-sandbox", nil, admin, 404, gateway.CodeNotFound},
		{"sandboxes: pause a missing one", "POST", "/v1/sandboxes/no-such-sandbox/pause", nil, admin, 404, gateway.CodeNotFound},
		{"pools: not found", "GET", "/v1/pools/nope", nil, admin, 404, gateway.CodePoolNotFound},
		{"pools: invalid", "POST", "/v1/pools", map[string]any{"name": "BAD NAME"}, admin, 400, gateway.CodePoolInvalid},
		{"pools: exists", "POST", "/v1/pools", map[string]any{"name": "p1",
			"template":     map[string]any{"image": map[string]string{"uri": "sandgate/base:test"}, "entrypoint": []string{"sleep", "600"}},
			"capacitySpec": map[string]int{"bufferMin": 0, "bufferMax": 0, "poolMin": 0, "poolMax": 1}}, admin, 409, gateway.CodePoolExists},
		{"pools: a template's networkPolicy of the wrong shape", "POST", "/v1/pools", map[string]any{"name": "p2",
			"template":     map[string]any{"image": map[string]string{"uri": "sandgate/base:test"}, "entrypoint": []string{"sleep", "600"}, "networkPolicy": []any{nil, nil}},
			"capacitySpec": map[string]int{"bufferMin": 0, "bufferMax": 0, "poolMin": 0, "poolMax": 1}}, admin, 400, gateway.CodeInvalidParameter},
		{"claim: an unknown pool", "POST", "/v1/sandboxes", map[string]any{"image": map[string]string{"uri": "sandgate/base:test"},
			"timeout": 60, "extensions": map[string]string{"poolRef": "nope"}}, admin, 404, gateway.CodePoolNotFound},
		{"batches: not found", "GET", "/v1/batches/nope", nil, admin, 404, gateway.CodeBatchNotFound},
		{"snapshots: not found", "GET", "/v1/snapshots/nope", nil, admin, 404, gateway.CodeSnapshotNotFound},
		{"tenants: not found", "GET", "/v1/tenants/nope", nil, admin, 404, gateway.CodeTenantNotFound},
		{"tenants: invalid role", "POST", "/v1/tenants/" + tenant.ID + "/keys", map[string]any{"role": "king"}, admin, 400, gateway.CodeTenantInvalid},
		{"plugins: no plugin host", "GET", "/v1/plugins", nil, admin, 503, gateway.CodePluginsDisabled},
		{"policy: invalid Rego", "PUT", "/v1/policy", map[string]any{"modules": map[string]string{"access.rego": "package sandgate.access\n this is not rego"}}, admin, 400, gateway.CodePolicyInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := call(t, tt.method, srv.URL+tt.path, tt.body, tt.headers)
			var e errorBody
			_ = json.Unmarshal(body, &e)
			if code != tt.status || e.Code != tt.code || e.Message == "" {
				t.Errorf("%s %s = %d %s, want %d %s with a message", tt.method, tt.path, code, body, tt.status, tt.code)
			}
			if listed, ok := documentedStatuses(t, tt.method, tt.path); ok && !slices.Contains(listed, strconv.Itoa(tt.status)) {
				t.Errorf("openapi.json lists %v for %s %s, not %d", listed, tt.method, tt.path, tt.status)
			}
		})
	}
}

// TestServerErrorsAreLogged: a 5xx is logged at error level through the module's logger
// (zap, as Caddy hands it over), with the request id and the internal cause; a 4xx is the
// caller's mistake and is not; no credential reaches the log.
func TestServerErrorsAreLogged(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	srv, redis := startTestAPI(t, slog.New(zapslog.NewHandler(core)))
	admin := map[string]string{"OPEN-SANDBOX-API-KEY": "admin-key"}
	with := func(id string) map[string]string {
		return map[string]string{"OPEN-SANDBOX-API-KEY": "admin-key", "X-Request-ID": id}
	}
	if code, _ := call(t, "GET", srv.URL+"/v1/sandboxes/nope", nil, with("req-client-mistake")); code != 404 {
		t.Fatalf("GET a missing sandbox = %d, want 404", code)
	}
	if code, _ := call(t, "GET", srv.URL+"/v1/plugins", nil, with("req-no-plugins")); code != 503 {
		t.Fatalf("GET /v1/plugins = %d, want 503", code)
	}
	// Redis gone: a real fault, whose cause (the dial error) must reach the log.
	if code, _ := call(t, "GET", srv.URL+"/v1/tenants", nil, admin); code != 200 {
		t.Fatalf("GET /v1/tenants = %d, want 200", code)
	}
	redis.Stop()
	code, body := call(t, "GET", srv.URL+"/v1/tenants", nil, with("req-redis-gone"))
	if code != 503 || !strings.Contains(string(body), gateway.CodeStoreUnavailable) {
		t.Fatalf("GET /v1/tenants without Redis = %d %s, want 503 %s", code, body, gateway.CodeStoreUnavailable)
	}

	byID := map[string]observer.LoggedEntry{}
	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, "admin-key") {
				t.Errorf("log %q: field %s holds the API key: %q", e.Message, k, s)
			}
		}
		if id, ok := e.ContextMap()["request_id"].(string); ok {
			byID[id] = e
		}
	}
	if e, ok := byID["req-client-mistake"]; ok {
		t.Errorf("a 404 was logged: %q %v", e.Message, e.ContextMap())
	}
	for id, code := range map[string]string{"req-no-plugins": gateway.CodePluginsDisabled, "req-redis-gone": gateway.CodeStoreUnavailable} {
		e, ok := byID[id]
		if !ok {
			t.Errorf("the 5xx of request %s was not logged with its id; logged: %v", id, logs.All())
			continue
		}
		fields := e.ContextMap()
		if e.Level != zap.ErrorLevel || fields["code"] != code || fields["err"] == nil || fields["err"] == "" {
			t.Errorf("request %s logged as %s %q %v, want an error with code %s and its cause", id, e.Level, e.Message, fields, code)
		}
	}
	if cause, _ := byID["req-redis-gone"].ContextMap()["err"].(string); !strings.Contains(cause, "connect") && !strings.Contains(cause, "refused") && !strings.Contains(cause, "EOF") {
		t.Errorf("the store's 503 is logged without its cause: %q", cause)
	}
}

// TestMethodNotAllowedSaysWhatIs: a 405 carries Allow with the path's methods (GET
// brings HEAD), on a plain path and on one beside a wildcard route.
func TestMethodNotAllowedSaysWhatIs(t *testing.T) {
	srv, _ := startTestAPI(t, nil)
	for _, tt := range []struct{ method, path, allow string }{
		{"PATCH", "/v1/sandboxes", "GET, HEAD, POST"},
		{"DELETE", "/sandboxes", "GET, HEAD, POST"},
		{"DELETE", "/v1/sandboxes/watch", "GET, HEAD"},
	} {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
		req.Header.Set("OPEN-SANDBOX-API-KEY", "admin-key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != tt.allow {
			t.Errorf("%s %s = %d, Allow %q; want 405, Allow %q", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Allow"), tt.allow)
		}
	}
}

// TestListStateFilterIsStrict: a state filter naming no state of the list is refused
// with the states it may name, not answered with an empty list; any case and the
// comma-separated form are accepted.
func TestListStateFilterIsStrict(t *testing.T) {
	srv, _ := startTestAPI(t, nil)
	admin := map[string]string{"OPEN-SANDBOX-API-KEY": "admin-key"}
	for _, tt := range []struct {
		path   string
		status int
	}{
		{"/v1/sandboxes?state=Bogus", 400},
		{"/v1/sandboxes?state=running,PAUSED&state=Failed", 200},
		{"/v1/snapshots?state=Running", 400},
		{"/v1/snapshots?state=ready", 200},
	} {
		code, body := call(t, "GET", srv.URL+tt.path, nil, admin)
		var e errorBody
		_ = json.Unmarshal(body, &e)
		if code != tt.status || (code == 400 && (e.Code != gateway.CodeInvalidParameter || !strings.Contains(e.Message, "want one of"))) {
			t.Errorf("GET %s = %d %s, want %d", tt.path, code, body, tt.status)
		}
	}
}

// TestAnswersHoldNoNulls: what a client reads back has no null where the document
// promises a value: a pool's template leaves out what it does not set.
func TestAnswersHoldNoNulls(t *testing.T) {
	srv, _ := startTestAPI(t, nil)
	admin := map[string]string{"OPEN-SANDBOX-API-KEY": "admin-key"}
	// A template's raw fields sent as null are answered as absent.
	if code, body := call(t, "POST", srv.URL+"/v1/pools", map[string]any{"name": "bare",
		"template": map[string]any{"image": map[string]string{"uri": "sandgate/base:test"}, "entrypoint": []string{"sleep", "600"},
			"volumes": nil, "networkPolicy": nil, "credentialProxy": nil},
		"capacitySpec": map[string]int{"bufferMin": 0, "bufferMax": 0, "poolMin": 0, "poolMax": 1}}, admin); code != 201 && code != 200 {
		t.Fatalf("create pool: %d %s", code, body)
	}
	for _, path := range []string{"/v1/pools", "/v1/pools/bare", "/v1/sandboxes", "/v1/snapshots", "/v1/policy"} {
		code, body := call(t, "GET", srv.URL+path, nil, admin)
		var v any
		if err := json.Unmarshal(body, &v); code != 200 || err != nil {
			t.Errorf("GET %s = %d %s", path, code, body)
			continue
		}
		if nulls := nullsIn(v, ""); len(nulls) > 0 {
			t.Errorf("GET %s holds nulls at %v: %s", path, nulls, body)
		}
	}
	code, body := call(t, "DELETE", srv.URL+"/v1/policy/overrides", nil, admin)
	var v any
	if err := json.Unmarshal(body, &v); code != 200 || err != nil {
		t.Fatalf("DELETE /v1/policy/overrides = %d %s", code, body)
	}
	if nulls := nullsIn(v, ""); len(nulls) > 0 {
		t.Errorf("DELETE /v1/policy/overrides holds nulls at %v", nulls)
	}
}

// nullsIn lists the JSON pointers of every null inside v.
func nullsIn(v any, at string) []string {
	switch v := v.(type) {
	case nil:
		return []string{at}
	case map[string]any:
		var out []string
		for k, e := range v {
			out = append(out, nullsIn(e, at+"/"+k)...)
		}
		return out
	case []any:
		var out []string
		for i, e := range v {
			out = append(out, nullsIn(e, fmt.Sprintf("%s/%d", at, i))...)
		}
		return out
	}
	return nil
}
