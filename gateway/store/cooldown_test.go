package store

import (
	"context"
	"testing"
	"time"
)

// TestCooldownOnTheCallersClock: the renew cooldown is decided on the time the caller
// passes, not on Redis's: a second start within the window is refused however little
// real time passed, one a window later is allowed at once, and a caller whose time is
// behind the last start (a late decision, a gateway whose clock is behind) is refused.
func TestCooldownOnTheCallersClock(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	const window = time.Minute
	t0 := time.Now()
	try := func(at time.Time) bool {
		t.Helper()
		ok, err := s.TryCooldown(ctx, "renew:sb", at, window)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	steps := []struct {
		name string
		at   time.Time
		want bool
	}{
		{"the first start", t0, true},
		{"within the window", t0.Add(window - time.Millisecond), false},
		{"a window later, with no real time passed", t0.Add(window), true},
		{"behind the last start", t0.Add(window / 2), false},
		{"just before the next window", t0.Add(2*window - time.Millisecond), false},
		{"two windows later", t0.Add(2 * window), true},
	}
	for _, st := range steps {
		if got := try(st.at); got != st.want {
			t.Fatalf("%s: %v, want %v", st.name, got, st.want)
		}
	}
	if ok, _ := s.TryCooldown(ctx, "renew:other", t0.Add(window/2), window); !ok {
		t.Fatal("another name's cooldown is its own")
	}
	// The key expires by itself (two windows of Redis time), so a clock far behind holds
	// the next start off for two windows at most.
	ttl, err := s.rdb.PTTL(ctx, s.Key("cooldown", "renew:sb")).Result()
	if err != nil || ttl <= window || ttl > 2*window {
		t.Fatalf("key expiry %s (%v), want within (%s, %s]", ttl, err, window, 2*window)
	}
}
