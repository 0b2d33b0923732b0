package store

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sandgate/sandgate/test/testenv"
)

// Load on the real scripts against one real redis-server (redis-benchmark style: many
// clients at once, throughput reported), for docs/SCALE.md. Run with
//
//	go test -run '^$' -bench Scale -benchtime 1x ./gateway/store/
//
// (-bench Scale/redis for the one-server figures alone.)
//
// Figures: claims/s (one warm member per claim script, 32 clients), creates/s and
// deletes/s (the record scripts), events/s (appends to tenants' streams, batched as the
// gateway does), and the Redis memory a claimed sandbox takes (record, indexes,
// counters, with a realistic record), and apart from it the token keys the warm adds
// and claims leave for opTTL (opscript.go).

const scaleClients = 32

func openScaleStore(b *testing.B, cluster bool) *Store {
	b.Helper()
	opts := Options{Prefix: "scale:", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if cluster {
		c, err := testenv.StartRedisCluster(b.TempDir(), 3)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Stop)
		opts.URL, opts.Cluster = c.URL, true
	} else {
		r, err := testenv.StartRedis(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(r.Stop)
		opts.URL = r.URL
	}
	s, err := Open(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	s.SetMeter(func(*Sandbox) (int64, int64) { return 500, 512 << 20 })
	return s
}

// scaleRecord is a record shaped like a real claimed one (tokens, metadata, address).
func scaleRecord(id, tenant, pool string) *Sandbox {
	now := time.Now().UTC()
	exp := now.Add(time.Hour)
	return &Sandbox{ID: id, Tenant: tenant, Image: "sandgate/base:0.1.0", Entrypoint: []string{"tail", "-f", "/dev/null"},
		Metadata: map[string]string{"sandgate.io/pool": pool, "team": "alpha"}, ResourceLimits: map[string]string{"cpu": "500m", "memory": "512Mi"},
		State: "Running", LastTransitionAt: now, CreatedAt: now, ExpiresAt: &exp, Address: "172.18.3.41",
		AgentToken: strings.Repeat("a", 48), EgressToken: strings.Repeat("e", 48), AccessToken: strings.Repeat("c", 48), Pool: pool,
		EgressPolicy: []byte(`{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"}]}`), PoolVersion: 1}
}

// parallel runs fn(i) for i in [0, n) on scaleClients goroutines and returns the rate.
func parallel(b *testing.B, n int, fn func(i int) error) float64 {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	t0 := time.Now()
	for c := 0; c < scaleClients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return float64(n) / time.Since(t0).Seconds()
}

// redisCPU sums the CPU time the server has used (every primary of a cluster).
func redisCPU(b *testing.B, s *Store) time.Duration {
	var total float64
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		total += infoSum(b, s, "cpu", f)
	}
	return time.Duration(total * float64(time.Second))
}

// usedMemory sums used_memory over the server (every primary of a cluster).
func usedMemory(b *testing.B, s *Store) int64 { return int64(infoSum(b, s, "memory", "used_memory")) }

// infoSum sums field of INFO section over the server (every primary of a cluster).
func infoSum(b *testing.B, s *Store, section, field string) float64 {
	var mu sync.Mutex
	var total float64
	read := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, section).Result()
		if err != nil {
			return err
		}
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, field+":"); ok {
				n, _ := strconv.ParseFloat(v, 64)
				mu.Lock()
				total += n
				mu.Unlock()
				return nil
			}
		}
		return fmt.Errorf("no %s in INFO %s", field, section)
	}
	var err error
	if cc, ok := s.Client().(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(context.Background(), read)
	} else {
		err = read(context.Background(), s.Client().(*redis.Client))
	}
	if err != nil {
		b.Fatal(err)
	}
	return total
}

// BenchmarkScale/redis is one redis-server; BenchmarkScale/cluster3 a Redis Cluster of
// three primaries on the same machine (on 2 cores it shows the scripts run there and
// what the cluster's routing costs, not how K machines scale).
func BenchmarkScale(b *testing.B) {
	b.Run("redis", func(b *testing.B) { benchScale(b, false) })
	b.Run("cluster3", func(b *testing.B) { benchScale(b, true) })
}

func benchScale(b *testing.B, cluster bool) {
	const n = 20000
	const tenants = 100
	for i := 0; i < b.N; i++ {
		s := openScaleStore(b, cluster)
		ctx := context.Background()
		tmpl := []byte(`{}`)
		for t := 0; t < tenants; t++ {
			if err := s.PutPool(ctx, &Pool{Tenant: fmt.Sprintf("t%d", t), Name: "p", Template: tmpl}, true); err != nil {
				b.Fatal(err)
			}
		}
		base := usedMemory(b, s)
		warmRate := parallel(b, n, func(i int) error {
			t := fmt.Sprintf("t%d", i%tenants)
			_, err := s.AddWarm(ctx, scaleRecord(fmt.Sprintf("w-%06d", i), t, "p"))
			return err
		})
		cpu0 := redisCPU(b, s)
		claimRate := parallel(b, n, func(i int) error {
			t := fmt.Sprintf("t%d", i%tenants)
			got, err := s.Claim(ctx, t, "p", t, 1, ClaimPatch{"tenant": t, "metadata": map[string]string{"sandgate.io/pool": "p", "team": "alpha"}},
				time.Now().UnixMilli(), strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10))
			if err == nil && len(got) != 1 {
				err = fmt.Errorf("claim %d got %d members", i, len(got))
			}
			return err
		})
		claimCPU := float64((redisCPU(b, s) - cpu0).Microseconds()) / n
		// The warm adds and claims left a token key each (opscript.go), which expire after
		// opTTL: counted apart, so that the steady figure is what stays per sandbox.
		withTokens := usedMemory(b, s)
		tokens := 0
		if err := s.scanKeys(ctx, s.prefix+"*:op:*", func(key string) {
			tokens++
			_ = s.rdb.Unlink(ctx, key).Err()
		}); err != nil {
			b.Fatal(err)
		}
		steady := usedMemory(b, s)
		perSandbox := float64(steady-base) / n
		perToken := float64(withTokens-steady) / float64(max(tokens, 1))
		createRate := parallel(b, n, func(i int) error {
			return s.CreateSandbox(ctx, scaleRecord(fmt.Sprintf("c-%06d", i), fmt.Sprintf("t%d", i%tenants), ""), 0)
		})
		admitRate := parallel(b, n, func(i int) error {
			_, err := s.TenantUsage(ctx, fmt.Sprintf("t%d", i%tenants))
			return err
		})
		const batch = 10
		eventRate := parallel(b, n/batch, func(i int) error {
			evs := make([]Event, batch)
			for j := range evs {
				evs[j] = Event{Type: "command.started", Tenant: fmt.Sprintf("t%d", i%tenants), SandboxID: fmt.Sprintf("w-%06d", i), Time: time.Now(),
					Data: map[string]any{"endpoint": "/command", "command": "python3 main.py"}}
			}
			return s.AppendEvents(ctx, evs)
		}) * batch
		deleteRate := parallel(b, n, func(i int) error { return s.DeleteSandbox(ctx, fmt.Sprintf("c-%06d", i)) })
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(claimRate, "claims/s")
		b.ReportMetric(claimCPU, "redis-cpu-µs/claim")
		b.ReportMetric(warmRate, "warm-adds/s")
		b.ReportMetric(createRate, "creates/s")
		b.ReportMetric(deleteRate, "deletes/s")
		b.ReportMetric(admitRate, "usage-reads/s")
		b.ReportMetric(eventRate, "events/s")
		b.ReportMetric(perSandbox, "bytes/sandbox")
		b.ReportMetric(perToken, "bytes/op-token")
		b.ReportMetric(float64(tokens)/n, "op-tokens/sandbox")
	}
}
