package store

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

// BenchmarkClaimScripts1000 is the Redis side of a batch claim of 1000 (gateway's
// BenchmarkBatchClaim1000 without admission, HTTP and the answer): the claim script on
// 1000 members this process added (prepared records) and the events script for them,
// against a real redis-server. Reported per batch: the time Redis counts for each script
// (commandstats; mean, and the fastest batch's: at high load the mean is mostly waits
// for a core), and the wall time of each call from here. What the script's time is made
// of is in docs/PERFORMANCE.md ("Claiming a batch of 1000").
func BenchmarkClaimScripts1000(b *testing.B) {
	const size = 1000
	r, err := testenv.StartRedis(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Stop)
	s, err := Open(context.Background(), Options{URL: r.URL, Prefix: "b:", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	s.SetMeter(func(*Sandbox) (int64, int64) { return 50, 64 << 20 })
	ctx := context.Background()
	if err := s.PutPool(ctx, &Pool{Tenant: "default", Name: "bench", Template: []byte(`{}`)}, true); err != nil {
		b.Fatal(err)
	}
	// A script's time is under eval the first time (EVALSHA fails, EVAL loads it).
	usec := func(info string) float64 {
		var sum float64
		for _, m := range regexp.MustCompile(`cmdstat_eval(?:sha)?:calls=\d+,usec=(\d+),`).FindAllStringSubmatch(info, -1) {
			v, _ := strconv.ParseFloat(m[1], 64)
			sum += v
		}
		return sum
	}
	var claimUs, eventsUs float64
	// The fastest batch's: at high load the mean is mostly waits for a core.
	minClaimUs, minEventsUs := 1e18, 1e18
	var claimWall, eventsWall time.Duration
	b.ResetTimer()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		now := time.Now().UTC()
		for j := 0; j < size; j++ {
			sb := scaleRecord(fmt.Sprintf("m-%d-%05d", i, j), "default", "bench")
			sb.ExpiresAt = nil
			if ok, err := s.AddWarm(ctx, sb); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
		exp := now.Add(time.Hour)
		patch := ClaimPatch{"tenant": "default", "metadata": map[string]string{"sandgate.io/pool": "bench", "sandgate.io/batch": "b1"},
			"createdAt": now, "lastTransitionAt": now, "state": "Running", "extensions": map[string]string(nil), "batch": "b1", "expiresAt": exp}
		_ = s.rdb.ConfigResetStat(ctx).Err()
		b.StartTimer()
		t0 := time.Now()
		got, err := s.Claim(ctx, "default", "bench", "default", size, patch, now.UnixMilli(), strconv.FormatInt(exp.UnixMilli(), 10))
		claimWall += time.Since(t0)
		b.StopTimer()
		if err != nil || len(got) != size {
			b.Fatalf("claimed %d, %v", len(got), err)
		}
		info, _ := s.rdb.Info(ctx, "commandstats").Result()
		c := usec(info)
		claimUs += c
		minClaimUs = min(minClaimUs, c)
		_ = s.rdb.ConfigResetStat(ctx).Err()
		ids := make([]string, len(got))
		for k, sb := range got {
			ids[k] = sb.ID
		}
		b.StartTimer()
		t0 = time.Now()
		err = s.AppendPerSandbox(ctx, Event{Type: "sandbox.created", Tenant: "default", Time: now,
			Data: map[string]any{"image": "sandgate/base:0.1.0", "key": "admin", "source": "pool", "pool": "bench"}}, ids)
		eventsWall += time.Since(t0)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		info, _ = s.rdb.Info(ctx, "commandstats").Result()
		e := usec(info)
		eventsUs += e
		minEventsUs = min(minEventsUs, e)
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(claimUs/n, "claim-redis-µs/op")
	b.ReportMetric(eventsUs/n, "events-redis-µs/op")
	b.ReportMetric(minClaimUs, "claim-redis-min-µs")
	b.ReportMetric(minEventsUs, "events-redis-min-µs")
	b.ReportMetric(float64(claimWall.Microseconds())/n, "claim-wall-µs/op")
	b.ReportMetric(float64(eventsWall.Microseconds())/n, "events-wall-µs/op")
}
