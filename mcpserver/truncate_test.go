package mcpserver

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		max     int
		cut     bool
		keepsUp string // a prefix the result keeps
	}{
		{"short", "hello", 10, false, "hello"},
		{"exact", "0123456789", 10, false, "0123456789"},
		{"long", strings.Repeat("a", 50) + strings.Repeat("b", 50), 20, true, "aaaaaaaaaa"},
		{"multibyte at the cut", strings.Repeat("é", 40), 21, true, "éééé"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, cut := truncate(tt.in, tt.max)
			if cut != tt.cut || !strings.HasPrefix(got, tt.keepsUp) || !utf8.ValidString(got) {
				t.Fatalf("truncate = %q, %v", got, cut)
			}
			if cut && (!strings.Contains(got, "bytes truncated]") || len(got) > tt.max+60) {
				t.Fatalf("truncate = %q: no marker or too long", got)
			}
		})
	}
}
