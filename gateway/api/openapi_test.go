package api

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate/gateway"
)

// TestOpenAPIMatchesRoutes fails when a registered route is missing from the document or
// the document names a route the handler does not serve.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi version = %q, want 3.1.x", doc.OpenAPI)
	}
	anyMethods := []string{"delete", "get", "head", "options", "patch", "post", "put"}
	var served []string
	for _, rt := range (&Handler{}).routes() {
		path := strings.ReplaceAll(rt.path, "...}", "}")
		if rt.method == "" {
			for _, m := range anyMethods {
				served = append(served, m+" "+path)
			}
			continue
		}
		served = append(served, strings.ToLower(rt.method)+" "+path)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for m := range ops {
			if m == "parameters" || m == "summary" || m == "description" {
				continue
			}
			documented = append(documented, m+" "+path)
		}
	}
	sort.Strings(served)
	sort.Strings(documented)
	if diff := cmp.Diff(served, documented); diff != "" {
		t.Errorf("routes (-served +documented):\n%s", diff)
	}
}

// TestRoutesRegister builds the mux: conflicting patterns panic here, not at startup.
func TestRoutesRegister(t *testing.T) {
	if New(nil, Options{}) == nil {
		t.Fatal("New returned nil")
	}
}

func TestActionFor(t *testing.T) {
	tests := []struct{ method, path, want string }{
		{"POST", "/sandboxes", "sandbox.create"},
		{"GET", "/sandboxes", "sandbox.list"},
		{"GET", "/sandboxes/{id}", "sandbox.get"},
		{"POST", "/sandboxes/{id}/pause", "sandbox.update"},
		{"PATCH", "/sandboxes/{id}/metadata", "sandbox.update"},
		{"DELETE", "/batches/{id}", "batch.delete"},
		{"PUT", "/pools/{name}", "pool.update"},
		{"GET", "/tenants/{id}", "tenant.get"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			if got := actionFor(tt.method, tt.path); got != tt.want {
				t.Errorf("actionFor = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestOpenAPITellsThisGatewaysBounds: the document served names the create's timeout
// bounds this gateway enforces, not the defaults, when they are set otherwise.
func TestOpenAPITellsThisGatewaysBounds(t *testing.T) {
	doc := openAPIFor(gateway.Config{MinTimeout: 2 * time.Minute, MaxTimeout: time.Hour})
	var parsed map[string]any
	if err := json.Unmarshal(doc, &parsed); err != nil {
		t.Fatal(err)
	}
	timeout := walk(parsed, "components", "schemas", "CreateSandboxRequest", "properties", "timeout").(map[string]any)
	if timeout["minimum"] != float64(120) || timeout["maximum"] != float64(3600) {
		t.Errorf("timeout bounds %v..%v, want 120..3600", timeout["minimum"], timeout["maximum"])
	}
	if def := openAPIFor(gateway.Config{MinTimeout: time.Minute, MaxTimeout: 7 * 24 * time.Hour}); !bytes.Equal(def, openAPIDocument) {
		t.Error("with the default bounds the document is not the embedded one")
	}
}

// openAPIOperation is the part of an operation the status checks read.
type openAPIOperation struct {
	Responses   map[string]json.RawMessage `json:"responses"`
	RequestBody *struct {
		Content map[string]json.RawMessage `json:"content"`
	} `json:"requestBody"`
}

func openAPIOperations(t *testing.T) map[string]map[string]openAPIOperation {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	ops := map[string]map[string]openAPIOperation{}
	for path, byMethod := range doc.Paths {
		ops[path] = map[string]openAPIOperation{}
		for m, raw := range byMethod {
			var op openAPIOperation
			if json.Unmarshal(raw, &op) == nil && op.Responses != nil {
				ops[path][m] = op
			}
		}
	}
	return ops
}

// documentedStatuses returns the statuses the document lists for a request's method and
// concrete path (with or without /v1): the operation whose template matches with the
// fewest wildcards, as the mux prefers the most specific pattern. ok is false when no
// operation matches.
func documentedStatuses(t *testing.T, method, path string) (statuses []string, ok bool) {
	t.Helper()
	segs := strings.Split(strings.TrimPrefix(path, "/v1"), "/")
	best := -1
	for template, byMethod := range openAPIOperations(t) {
		op, has := byMethod[strings.ToLower(method)]
		tsegs := strings.Split(template, "/")
		if !has || len(tsegs) != len(segs) {
			continue
		}
		wild := 0
		for i := range segs {
			switch {
			case strings.HasPrefix(tsegs[i], "{") && segs[i] != "":
				wild++
			case tsegs[i] != segs[i]:
				wild = -1
			}
			if wild < 0 {
				break
			}
		}
		if wild >= 0 && (best < 0 || wild < best) {
			best, statuses, ok = wild, slices.Sorted(maps.Keys(op.Responses)), true
		}
	}
	return statuses, ok
}

// TestOpenAPIListsTheStatusesRoutesAnswer keeps each operation's responses honest in the
// ways routes share: a route behind a key answers 401 without one, 403 when the policy
// refuses and 503 when the store cannot look the key up; a route with a path parameter
// answers 404 for an unknown one; a route with a JSON body answers 400 for a malformed
// one and 413 for an oversized one (decodeJSON).
func TestOpenAPIListsTheStatusesRoutesAnswer(t *testing.T) {
	// Routes with a path parameter that never answer 404, and why.
	no404 := map[string]string{
		"PUT /plugins/{name}": "PUT installs the plugin under any name",
	}
	ops := openAPIOperations(t)
	for _, rt := range (&Handler{}).routes() {
		if rt.method == "" {
			continue // the proxy answers whatever the sandbox's server answers
		}
		name := rt.method + " " + rt.path
		t.Run(name, func(t *testing.T) {
			op, ok := ops[strings.ReplaceAll(rt.path, "...}", "}")][strings.ToLower(rt.method)]
			if !ok {
				t.Skip("not in the document: TestOpenAPIMatchesRoutes reports it")
			}
			var want []string
			if !rt.public && !rt.own {
				want = append(want, "401", "403", "503")
			}
			if _, exempt := no404[name]; strings.Contains(rt.path, "{") && !exempt {
				want = append(want, "404")
			}
			if op.RequestBody != nil && op.RequestBody.Content["application/json"] != nil {
				want = append(want, "400", "413")
			}
			for _, status := range want {
				if _, ok := op.Responses[status]; !ok {
					t.Errorf("openapi.json does not list %s for %s", status, name)
				}
			}
		})
	}
}
