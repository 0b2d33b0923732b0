package store

import (
	"context"
	"testing"
	"time"
)

func TestPublishStarting(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	if err := s.PublishStarting(ctx, "gw-a", map[string]int{"t/p": 3, "t/q": 0}, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.PublishStarting(ctx, "gw-b", map[string]int{"t/p": 2}, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	count := func(pool, except string) int64 {
		t.Helper()
		n, err := s.StartingCount(ctx, pool, except)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count("t/p", ""); n != 5 {
		t.Fatalf("starting = %d, want 5 (both gateways)", n)
	}
	if n := count("t/p", "gw-a"); n != 2 {
		t.Fatalf("starting but gw-a's = %d, want 2", n)
	}
	if n := count("t/q", ""); n != 0 {
		t.Fatalf("starting = %d, want 0", n)
	}
	if n := count("t/", ""); n != 0 {
		t.Fatalf("a pool key's prefix reads %d, want 0", n)
	}
	time.Sleep(600 * time.Millisecond)
	if n := count("t/p", ""); n != 2 {
		t.Fatalf("gw-a's lapsed count still read: %d, want 2", n)
	}
	if err := s.PublishStarting(ctx, "gw-b", map[string]int{"t/p": 0}, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := count("t/p", ""); n != 0 {
		t.Fatalf("a cleared count still reads %d", n)
	}
}
