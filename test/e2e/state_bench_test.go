package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/test/testenv"
)

// stateBenchRounds is how many samples each figure of BenchmarkState takes per run.
const stateBenchRounds = 5

// BenchmarkState measures the state features (snapshots, forks, idle pause), each beside its raw baseline
// from the same run:
//   - snapshot_create: POST /snapshots until Ready, beside a bare `docker commit` of the
//     same container;
//   - fork10_answered: a fork of 10 until every copy answers a command, beside a batch
//     of 10 cold creates until every member answers;
//   - resume_on_access: a command on an idle-paused sandbox (resumed on the way), beside
//     the same command on a running one.
func BenchmarkState(b *testing.B) {
	e := newEnv(b, startRedis(b))
	g := e.startGateway()
	removeSnapshotImagesOfTenant(b, e, "default")
	for i := 0; i < b.N; i++ {
		benchSnapshot(b, g)
		benchFork(b, g)
		benchResume(b, g)
	}
}

func benchSnapshot(b *testing.B, g *gateway) {
	src := g.createSandbox(map[string]any{})
	g.agent(src).run("head -c 1000000 /dev/urandom > /srv/blob")
	var lat, raw []time.Duration
	cli, err := client.New(client.FromEnv)
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Ping(context.Background(), client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < stateBenchRounds; i++ {
		start := time.Now()
		snap := g.snapshotOf(src)
		lat = append(lat, time.Since(start))
		g.do("DELETE", "/v1/snapshots/"+snap, nil)

		start = time.Now()
		ref := "sandgate-bench-raw/commit:" + randomHex(4)
		if _, err := cli.ContainerCommit(context.Background(), "sandgate-"+src, client.ContainerCommitOptions{Reference: ref, NoPause: true}); err != nil {
			b.Fatal(err)
		}
		raw = append(raw, time.Since(start))
		_, _ = cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{})
	}
	g.do("DELETE", "/v1/sandboxes/"+src, nil)
	p50, p99 := testenv.Quantiles(lat, time.Millisecond)
	base, _ := testenv.Quantiles(raw, time.Millisecond)
	testenv.RecordFigure(b, testenv.Figure{Name: "snapshot_create", Unit: "ms", P50: p50, P99: p99, BaselineP50: base, Target: "<= baseline + 1000"})
}

// batchAnswered waits until every member of a batch answer runs a command, from the
// moment start.
func batchAnswered(b *testing.B, g *gateway, r response, start time.Time) time.Duration {
	b.Helper()
	if r.Status != http.StatusAccepted {
		b.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	var batch struct {
		ID      string `json:"id"`
		Members []struct {
			ID string `json:"id"`
		} `json:"members"`
	}
	if err := json.Unmarshal(r.Body, &batch); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 5*time.Minute, func() bool {
		s := g.do("GET", "/v1/batches/"+batch.ID, nil).JSON(b)["summary"].(map[string]any)
		return s["running"].(float64) == float64(len(batch.Members))
	}, "every member to run")
	var wg sync.WaitGroup
	for _, m := range batch.Members {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			if ev := lastEvent(g.agent(id).run("true")); ev.Type != "execution_complete" {
				b.Errorf("member %s: %+v", id, ev)
			}
		}(m.ID)
	}
	wg.Wait()
	took := time.Since(start)
	for _, m := range batch.Members {
		g.do("DELETE", "/v1/sandboxes/"+m.ID, nil)
	}
	return took
}

func benchFork(b *testing.B, g *gateway) {
	src := g.createSandbox(map[string]any{})
	var lat, raw []time.Duration
	for i := 0; i < 2; i++ {
		start := time.Now()
		lat = append(lat, batchAnswered(b, g, g.do("POST", "/v1/sandboxes/"+src+"/fork", map[string]any{"count": 10}), start))
		start = time.Now()
		raw = append(raw, batchAnswered(b, g, g.do("POST", "/v1/batches", map[string]any{"count": 10,
			"template": map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}}}), start))
	}
	g.do("DELETE", "/v1/sandboxes/"+src, nil)
	for _, it := range g.do("GET", "/v1/snapshots", nil).JSON(b)["items"].([]any) {
		g.do("DELETE", "/v1/snapshots/"+it.(map[string]any)["id"].(string), nil)
	}
	p50, p99 := testenv.Quantiles(lat, time.Millisecond)
	base, _ := testenv.Quantiles(raw, time.Millisecond)
	testenv.RecordFigure(b, testenv.Figure{Name: "fork10_answered", Unit: "ms", P50: p50, P99: p99, BaselineP50: base, Target: "<= baseline + snapshot_create"})
}

func benchResume(b *testing.B, g *gateway) {
	id := g.createSandbox(map[string]any{"extensions": map[string]string{"idle.pause.seconds": "1"}})
	busy := g.createSandbox(map[string]any{})
	a, ab := g.agent(id), g.agent(busy)
	var lat, raw []time.Duration
	for i := 0; i < stateBenchRounds; i++ {
		g.waitIdlePaused(b, id)
		start := time.Now()
		if ev := lastEvent(a.run("true")); ev.Type != "execution_complete" {
			b.Fatalf("resumed command: %+v", ev)
		}
		lat = append(lat, time.Since(start))
		start = time.Now()
		if ev := lastEvent(ab.run("true")); ev.Type != "execution_complete" {
			b.Fatalf("command: %+v", ev)
		}
		raw = append(raw, time.Since(start))
	}
	g.do("DELETE", "/v1/sandboxes/"+id, nil)
	g.do("DELETE", "/v1/sandboxes/"+busy, nil)
	p50, p99 := testenv.Quantiles(lat, time.Millisecond)
	base, _ := testenv.Quantiles(raw, time.Millisecond)
	testenv.RecordFigure(b, testenv.Figure{Name: "resume_on_access", Unit: "ms", P50: p50, P99: p99, BaselineP50: base, Target: "<= baseline + 300"})
}
