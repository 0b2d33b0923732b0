package store

import (
	"context"
	"testing"
	"time"
)

func TestPublishStarting(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	if err := s.PublishStarting(ctx, map[string]int{"t/p": 3, "t/q": 0}, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.StartingCount(ctx, "t/p"); n != 3 {
		t.Fatalf("starting = %d, want 3", n)
	}
	if n, _ := s.StartingCount(ctx, "t/q"); n != 0 {
		t.Fatalf("starting = %d, want 0", n)
	}
	time.Sleep(600 * time.Millisecond)
	if n, _ := s.StartingCount(ctx, "t/p"); n != 0 {
		t.Fatalf("a lapsed count still reads %d", n)
	}
}
