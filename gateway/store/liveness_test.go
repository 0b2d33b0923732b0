package store

import (
	"context"
	"testing"
	"time"
)

func TestHeartbeat(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	if err := s.Heartbeat(ctx, "g1", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	alive, err := s.Alive(ctx, []string{"g1", "g2"})
	if err != nil || !alive["g1"] || alive["g2"] {
		t.Fatalf("alive = %v, %v; want g1 only", alive, err)
	}
	time.Sleep(600 * time.Millisecond) // past the TTL: Redis expires the key
	if alive, _ := s.Alive(ctx, []string{"g1"}); alive["g1"] {
		t.Fatal("g1 still alive after its heartbeat lapsed")
	}
	_ = s.Heartbeat(ctx, "g1", time.Minute)
	_ = s.EndHeartbeat(ctx, "g1")
	if alive, _ := s.Alive(ctx, []string{"g1"}); alive["g1"] {
		t.Fatal("g1 still alive after EndHeartbeat")
	}
}
