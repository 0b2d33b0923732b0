package vaultproto

import (
	"testing"

	"github.com/sandgate/sandgate/sandbox-agent/strictjson"
)

// TestCreateLists: the gateway and the enforcer decode a create's body with strictjson
// into Create; null for a list is the empty list, an absent list stays nil (the
// enforcer refuses it), and the items are as strict as the body.
func TestCreateLists(t *testing.T) {
	for _, tt := range []struct {
		name                  string
		body                  string
		credentials, bindings int // -1: nil
		wantErr               bool
	}{
		{"both null", `{"credentials": null, "bindings": null}`, 0, 0, false},
		{"both empty", `{"credentials": [], "bindings": []}`, 0, 0, false},
		{"both absent", `{}`, -1, -1, false},
		{"one of each", `{"credentials": [{"name": "c", "source": {"value": "v"}}], "bindings": [{"name": "b", "match": {"hosts": ["a.test"]}, "auth": {"type": "bearer", "credential": "c"}}]}`, 1, 1, false},
		{"unknown field in an item", `{"credentials": [{"name": "c", "source": {"value": "v"}, "extra": 1}], "bindings": null}`, 0, 0, true},
		{"unknown field in a nested object", `{"credentials": null, "bindings": [{"name": "b", "match": {"hosts": ["a.test"], "extra": 1}, "auth": {"type": "bearer"}}]}`, 0, 0, true},
		{"not a list", `{"credentials": "c", "bindings": null}`, 0, 0, true},
		{"trailing data", `{"credentials": null, "bindings": null}]`, 0, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var c Create
			err := strictjson.Decode([]byte(tt.body), &c)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("decoded %+v, want an error", c)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			count := func(n int, isNil bool) int {
				if isNil {
					return -1
				}
				return n
			}
			if got := count(len(c.Credentials), c.Credentials == nil); got != tt.credentials {
				t.Errorf("credentials: %d (-1: nil), want %d", got, tt.credentials)
			}
			if got := count(len(c.Bindings), c.Bindings == nil); got != tt.bindings {
				t.Errorf("bindings: %d (-1: nil), want %d", got, tt.bindings)
			}
		})
	}
}
