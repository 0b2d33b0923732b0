package store

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

// TestReadyMeansCommandsAnswer: after an outage in which every dial of the commands' pool
// failed, go-redis keeps that pool refusing until its own redial succeeds, up to a second
// after Redis is back. Ready (the readiness endpoint's probe, on a pool of its own) must
// not say ready before the commands' pool answers, or a caller that waited for /v1/ready
// gets a 503 on its next request.
func TestReadyMeansCommandsAnswer(t *testing.T) {
	r, err := testenv.StartRedis(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: r.URL, Prefix: "t:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	r.Stop()
	// Fail more dials than the pool has connections (each past the fail-fast window, which
	// would otherwise spare the dials), so that go-redis stops dialling for this pool.
	for i := 0; i < 2*64; i++ {
		s.health.lastFailure.Store(0)
		_ = s.rdb.Ping(ctx).Err()
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(15 * time.Second)
	for s.Ready(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("Redis is back but Ready still fails")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Ready said ready, but the next command failed: %v", err)
	}
}
