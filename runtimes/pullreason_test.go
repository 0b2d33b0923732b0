package runtimes

import "testing"

func TestPullReason(t *testing.T) {
	tests := []struct {
		name   string
		code   int
		msg    string
		want   string
		denied bool
	}{
		{"unauthorized", 0, `Head "http://127.0.0.1:5000/v2/x/manifests/y": no basic auth credentials`, PullReasonUnauthorized, true},
		{"401", 401, "anything", PullReasonUnauthorized, true},
		{"unknown tag", 0, "manifest for 127.0.0.1:5000/x:y not found: manifest unknown: manifest unknown", PullReasonNotFound, true},
		{"pull access denied", 404, "pull access denied for nope, repository does not exist or may require 'docker login'", PullReasonNotFound, true},
		{"denied", 403, "denied: requested access to the resource is denied", PullReasonDenied, true},
		{"invalid name", 0, "invalid reference format", PullReasonInvalidName, true},
		{"platform", 0, "no matching manifest for linux/amd64 in the manifest list entries", PullReasonNoPlatform, true},
		{"refused", 0, `Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused`, PullReasonUnreachable, false},
		{"garbage body", 0, `error parsing HTTP 200 response body: invalid character '#' looking for beginning of value: "# HELP go_gc_duration_seconds"`, PullReasonBadAnswer, false},
		{"other", 0, "something else entirely: \x00secret", PullReasonBadAnswer, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, denied := PullReason(tt.code, tt.msg)
			if got != tt.want || denied != tt.denied {
				t.Fatalf("PullReason(%d, %q) = %q, %t; want %q, %t", tt.code, tt.msg, got, denied, tt.want, tt.denied)
			}
		})
	}
}
