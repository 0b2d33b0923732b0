package ptyhub

import (
	"strings"
	"testing"
)

func TestRing(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		writes   []string
		since    int64
		want     string
		wantOff  int64
	}{
		{"empty", 8, nil, 0, "", 0},
		{"all", 8, []string{"abc", "de"}, 0, "abcde", 0},
		{"from offset", 8, []string{"abc", "de"}, 3, "de", 3},
		{"offset past end", 8, []string{"abc"}, 10, "", 3},
		{"wrapped keeps the newest", 8, []string{"abcdef", "ghij"}, 0, "cdefghij", 2},
		{"wrapped from offset", 8, []string{"abcdef", "ghij"}, 5, "fghij", 5},
		{"write larger than capacity", 4, []string{"ab", "cdefghij"}, 0, "ghij", 6},
		{"many small writes", 5, strings.Split("abcdefghijklmnopq", ""), 0, "mnopq", 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRing(tt.capacity)
			for _, w := range tt.writes {
				r.Write([]byte(w))
			}
			got, off := r.Since(tt.since)
			if string(got) != tt.want || off != tt.wantOff {
				t.Fatalf("Since(%d) = %q@%d, want %q@%d", tt.since, got, off, tt.want, tt.wantOff)
			}
		})
	}
}
