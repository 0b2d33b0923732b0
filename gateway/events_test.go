package gateway

import (
	"testing"

	"github.com/sandgate/sandgate/gateway/store"
)

func TestEventQueryMatches(t *testing.T) {
	created := store.Event{Type: "sandbox.created", SandboxID: "s1"}
	decision := store.Event{Type: "policy.decision"}
	tests := []struct {
		q    EventQuery
		ev   store.Event
		want bool
	}{
		{EventQuery{}, decision, true},
		{EventQuery{Sandbox: "s1"}, created, true},
		{EventQuery{Sandbox: "s2"}, created, false},
		{EventQuery{Sandbox: "s1"}, decision, false},
		{EventQuery{Types: []string{"sandbox."}}, created, true},
		{EventQuery{Types: []string{"command.", "sandbox.created"}}, created, true},
		{EventQuery{Types: []string{"sandbox.deleted"}}, created, false},
		{EventQuery{Exclude: []string{"policy."}}, decision, false},
		{EventQuery{Exclude: []string{"policy."}}, created, true},
		{EventQuery{Types: []string{"sandbox."}, Exclude: []string{"sandbox.created"}}, created, false},
	}
	for _, tt := range tests {
		if got := tt.q.Matches(tt.ev); got != tt.want {
			t.Errorf("%+v.Matches(%s) = %v, want %v", tt.q, tt.ev.Type, got, tt.want)
		}
	}
}
