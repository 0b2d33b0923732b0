package api

import (
	"bytes"
	"encoding/json"
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
