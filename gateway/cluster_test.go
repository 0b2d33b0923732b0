package gateway

import (
	"strings"
	"testing"
)

func TestCheckClusterID(t *testing.T) {
	for _, tt := range []struct {
		id string
		ok bool
	}{
		{"", true}, {"prod-eu.1", true}, {"a", true},
		{"-lead", false}, {"trail-", false}, {"has space", false}, {"a/b", false},
		{strings.Repeat("x", 64), false}, {strings.Repeat("x", 63), true},
	} {
		if err := CheckClusterID(tt.id); (err == nil) != tt.ok {
			t.Errorf("CheckClusterID(%q) = %v, want ok=%t", tt.id, err, tt.ok)
		}
	}
}
