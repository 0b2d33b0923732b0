package egress

import "testing"

func TestCheckPolicyInForce(t *testing.T) {
	answer := `{"status":"ok","mode":"enforcing","enforcementMode":"dns+nft","policy":{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"},{"action":"allow","target":"10.1.0.0/16"}]},"platformDeny":["evil.test"]}`
	tests := []struct {
		name, answer, sent string
		platformDeny       []string
		ok                 bool
	}{
		{"same", answer, `{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"},{"action":"allow","target":"10.1.0.0/16"}]}`, []string{"evil.test"}, true},
		{"same once normalized", answer, `{"egress":[{"action":"allow","target":"PyPI.org."},{"action":"allow","target":"10.1.2.3/16"}]}`, []string{"Evil.test."}, true},
		{"deny-all sent, allow-all in force", `{"policy":{"defaultAction":"allow","egress":[]}}`, `{"defaultAction":"deny"}`, nil, false},
		{"empty sent is deny-all", `{"policy":{"defaultAction":"deny","egress":[]}}`, ``, nil, true},
		{"a rule more", answer, `{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"}]}`, []string{"evil.test"}, false},
		{"rules reordered", answer, `{"defaultAction":"deny","egress":[{"action":"allow","target":"10.1.0.0/16"},{"action":"allow","target":"pypi.org"}]}`, []string{"evil.test"}, false},
		{"an action flipped", answer, `{"defaultAction":"deny","egress":[{"action":"deny","target":"pypi.org"},{"action":"allow","target":"10.1.0.0/16"}]}`, []string{"evil.test"}, false},
		{"platform deny missing", answer, `{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"},{"action":"allow","target":"10.1.0.0/16"}]}`, []string{"evil.test", "worse.test"}, false},
		{"answer not JSON", `enforcing`, `{"defaultAction":"deny"}`, nil, false},
		{"answer with an invalid rule", `{"policy":{"defaultAction":"deny","egress":[{"action":"maybe","target":"x.test"}]}}`, `{"defaultAction":"deny"}`, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckPolicyInForce([]byte(tt.answer), []byte(tt.sent), tt.platformDeny)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckPolicyInForce = %v, want ok %t", err, tt.ok)
			}
		})
	}
}
