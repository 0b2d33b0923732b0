package listing

import (
	"testing"
	"time"
)

func TestPageOf(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name          string
		n, page, size int
		first, count  int // first is the age rank of the page's first item (0 = newest)
		pages         int
		next          bool
	}{
		{"first page", 5, 1, 2, 0, 2, 3, true},
		{"last page, partial", 5, 3, 2, 4, 1, 3, false},
		{"past the end", 5, 9, 2, 0, 0, 3, false},
		{"empty", 0, 1, 10, 0, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items := make([]time.Time, tt.n)
			for i := range items {
				items[i] = base.Add(time.Duration(i) * time.Minute) // oldest first
			}
			got, p := Page(items, func(at time.Time) time.Time { return at }, tt.page, tt.size)
			if len(got) != tt.count || p.TotalItems != tt.n || p.TotalPages != tt.pages || p.HasNextPage != tt.next || p.Page != tt.page || p.PageSize != tt.size {
				t.Fatalf("Page = %d items, %+v; want %d items, %d pages, next %v", len(got), p, tt.count, tt.pages, tt.next)
			}
			if tt.count > 0 && !got[0].Equal(base.Add(time.Duration(tt.n-1-tt.first)*time.Minute)) {
				t.Errorf("first item %v, want the one of age rank %d (newest first)", got[0], tt.first)
			}
		})
	}
	// A caller of the core that names no page or size (the API always does) gets the
	// first page of the default size, not a division by zero.
	if got, p := Page(make([]time.Time, 25), func(at time.Time) time.Time { return at }, 0, 0); len(got) != DefaultPageSize || p.Page != 1 || p.TotalPages != 2 {
		t.Errorf("Page(page 0, size 0) = %d items, %+v; want the first %d of 2 pages", len(got), p, DefaultPageSize)
	}
	if f := NewStateFilter(nil); !f.Admits("Running") {
		t.Error("an empty state filter refuses a state")
	}
	if f := NewStateFilter([]string{"running"}); !f.Admits("Running") || f.Admits("Paused") {
		t.Error("a state filter does not match its states without case, or only them")
	}
}
