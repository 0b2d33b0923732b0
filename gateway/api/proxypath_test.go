package api

import "testing"

func TestSplitProxyPath(t *testing.T) {
	const id = "3c63fa8e-57f2-454d-931d-46cb9f42c09c"
	tests := []struct {
		name, escaped, id, port string
		prefix, rest            string
		ok                      bool
	}{
		{"bare", "/sandboxes/" + id + "/proxy/8000", id, "8000", "/sandboxes/" + id + "/proxy/8000", "", true},
		{"rest", "/sandboxes/" + id + "/proxy/8000/a/b%2Fc", id, "8000", "/sandboxes/" + id + "/proxy/8000", "/a/b%2Fc", true},
		{"v1", "/v1/sandboxes/" + id + "/proxy/44772/ping", id, "44772", "/v1/sandboxes/" + id + "/proxy/44772", "/ping", true},
		{"escaped id", "/sandboxes/%33" + id[1:] + "/proxy/8000/x", id, "8000", "", "", false},
		{"escaped port", "/sandboxes/" + id + "/proxy/800%30/x", id, "8000", "", "", false},
		{"escaped literal", "/sandboxes/" + id + "/%70roxy/8000/x", id, "8000", "", "", false},
		{"too short", "/sandboxes/" + id, id, "8000", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix, rest, err := splitProxyPath(tt.escaped, tt.id, tt.port)
			if (err == nil) != tt.ok || prefix != tt.prefix || rest != tt.rest {
				t.Fatalf("splitProxyPath(%q) = %q, %q, %v", tt.escaped, prefix, rest, err)
			}
		})
	}
}
