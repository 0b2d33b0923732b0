package api

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

// TestRouteShapes pins what the routes built from the shared shapes (handlers.go) answer:
// the success status of each kind (201/202 for a create, 200 for a read or an update,
// 202 for a pause, 204 for a delete, with no body), {"items": […]} for a whole list, and a
// {code, message} 4xx that changes nothing for a bad body, path value or page.
func TestRouteShapes(t *testing.T) {
	srv := newTestAPI(t)
	admin := map[string]string{"OPEN-SANDBOX-API-KEY": "admin-key"}
	status, body := call(t, "POST", srv.URL+"/v1/sandboxes", map[string]any{
		"image": map[string]string{"uri": "sandgate/base:test"}, "entrypoint": []string{"sleep", "600"}, "timeout": 600,
		"metadata": map[string]string{"team": "a"},
	}, admin)
	var created struct{ ID string }
	if err := json.Unmarshal(body, &created); status != http.StatusAccepted || err != nil || created.ID == "" {
		t.Fatalf("create: %d %s", status, body)
	}
	sb := srv.URL + "/v1/sandboxes/" + created.ID
	testenv.WaitFor(t, 60*time.Second, func() bool {
		_, body := call(t, "GET", sb, nil, admin)
		var got struct{ Status struct{ State string } }
		return json.Unmarshal(body, &got) == nil && got.Status.State == "Running"
	}, "the sandbox running")

	tests := []struct {
		name, method, path string
		body               any
		wantStatus         int
		// wantKey is a key the JSON answer must hold; "" wants an empty body.
		wantKey string
	}{
		{"get names the sandbox", "GET", sb, nil, http.StatusOK, "id"},
		{"list is a page", "GET", "/v1/sandboxes?pageSize=1&state=Running,Pending", nil, http.StatusOK, "items"},
		{"list page out of range", "GET", "/v1/sandboxes?page=0", nil, http.StatusBadRequest, "code"},
		{"list pageSize out of range", "GET", "/v1/sandboxes?pageSize=201", nil, http.StatusBadRequest, "code"},
		{"metadata patch", "PATCH", sb + "/metadata", map[string]any{"owner": "b"}, http.StatusOK, "metadata"},
		{"metadata patch of the wrong type", "PATCH", sb + "/metadata", []string{"owner"}, http.StatusBadRequest, "code"},
		{"metadata patch of an unknown sandbox", "PATCH", "/v1/sandboxes/00000000-0000-4000-8000-000000000000/metadata", map[string]any{"x": "y"}, http.StatusNotFound, "code"},
		{"pause", "POST", sb + "/pause", nil, http.StatusAccepted, ""},
		{"resume", "POST", sb + "/resume", nil, http.StatusAccepted, ""},
		{"whole list", "GET", "/v1/pools", nil, http.StatusOK, "items"},
		{"get of an unknown pool", "GET", "/v1/pools/nope", nil, http.StatusNotFound, "code"},
		{"create with a bad body", "POST", "/v1/pools", map[string]any{"size": "ten"}, http.StatusBadRequest, "code"},
		{"snapshot list page out of range", "GET", "/v1/snapshots?page=0", nil, http.StatusBadRequest, "code"},
		{"snapshot list", "GET", "/v1/snapshots?sandboxId=" + created.ID, nil, http.StatusOK, "items"},
		{"audit limit out of range", "GET", "/v1/audit?limit=0", nil, http.StatusBadRequest, "code"},
		{"delete of an unknown batch", "DELETE", "/v1/batches/00000000-0000-4000-8000-000000000000", nil, http.StatusNotFound, "code"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := tt.path
			if url[0] == '/' {
				url = srv.URL + url
			}
			status, body := call(t, tt.method, url, tt.body, admin)
			if status != tt.wantStatus {
				t.Fatalf("%s %s = %d %s, want %d", tt.method, tt.path, status, body, tt.wantStatus)
			}
			if tt.wantKey == "" {
				if len(body) != 0 {
					t.Fatalf("%s %s answered a body %s, want none", tt.method, tt.path, body)
				}
				return
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(body, &got); err != nil || got[tt.wantKey] == nil {
				t.Fatalf("%s %s = %s, want a JSON object with %q", tt.method, tt.path, body, tt.wantKey)
			}
		})
	}

	// The bad patch changed nothing; the good one did.
	_, body = call(t, "GET", sb, nil, admin)
	var got struct{ Metadata map[string]string }
	if err := json.Unmarshal(body, &got); err != nil || got.Metadata["owner"] != "b" || got.Metadata["team"] != "a" || len(got.Metadata) != 2 {
		t.Fatalf("metadata after the patches = %s", body)
	}
	if status, body = call(t, "DELETE", sb, nil, admin); status != http.StatusNoContent || len(body) != 0 {
		t.Fatalf("delete = %d %s, want 204 and no body", status, body)
	}
	if status, _ = call(t, "GET", sb, nil, admin); status != http.StatusNotFound {
		t.Fatalf("get after delete = %d, want 404", status)
	}
}
