package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/sandgate/sandgate/test/testenv"
)

// Creates of many sandboxes at once: the engine's work per sandbox, not a create's
// latency, sets how fast a fleet comes up.
const (
	throughputCreates  = 50
	throughputParallel = 8
)

// BenchmarkCreateThroughput50x8 creates 50 sandboxes 8 at a time through the gateway
// (each with its egress enforcer: the platform default policy) until every create has
// answered Running, beside the raw baseline of 50 `docker create` + `start` of the same
// image on the same network, 8 at a time. The two alternate, in turn first; between
// them everything is removed and the runtime's spare namespaces are made again, so that
// neither side runs beside the other's clean-up. The figure is the wall time of one
// round of 50. With SANDGATE_E2E_CPU_SPLIT=1 and -v it logs each round's CPU per
// sandbox by process group (cpusplit_test.go).
func BenchmarkCreateThroughput50x8(b *testing.B) {
	e := newEnv(b, startRedis(b))
	// The reconciler at the operator's default interval (SANDGATE_E2E_THROUGHPUT_SYNC
	// names another): the harness's quicker one is for tests that wait on it, and each
	// pass is engine work beside the creates.
	syncInterval := "2s"
	if v := os.Getenv("SANDGATE_E2E_THROUGHPUT_SYNC"); v != "" {
		syncInterval = v
	}
	g := e.startGateway("SANDGATE_SYNC_INTERVAL=" + syncInterval)
	cli, err := client.New(client.FromEnv)
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: throughputParallel}}
	create := func() (string, error) {
		body, _ := json.Marshal(map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}})
		req, _ := http.NewRequest("POST", "http://"+g.Addr+"/v1/sandboxes", bytes.NewReader(body))
		req.Header.Set("OPEN-SANDBOX-API-KEY", g.APIKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var m struct {
			ID     string
			Status struct{ State string }
		}
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(raw, &m) != nil || m.Status.State != "Running" {
			return m.ID, fmt.Errorf("create: %d %s", resp.StatusCode, raw)
		}
		return m.ID, nil
	}
	// fanOut runs one of n times, parallel at a time, and returns the wall time.
	fanOut := func(n, parallel int, one func(i int)) time.Duration {
		start := time.Now()
		slots := make(chan struct{}, parallel)
		var wg sync.WaitGroup
		for i := range n {
			slots <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-slots; wg.Done() }()
				one(i)
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	viaGateway := func() time.Duration {
		ids := make([]string, throughputCreates)
		var before cpuLook
		if cpuSplitOn() {
			before = lookAtCPU()
		}
		took := fanOut(throughputCreates, throughputParallel, func(i int) {
			id, err := create()
			ids[i] = id
			if err != nil {
				b.Error(err)
			}
		})
		if cpuSplitOn() {
			after := lookAtCPU()
			splitCPU(before, after, g.proc.Pid(), sandboxRoles(b, cli, e.Network, ids)).log(b, "sandgate", throughputCreates)
		}
		fanOut(len(ids), throughputParallel, func(i int) {
			if ids[i] != "" {
				g.do("DELETE", "/v1/sandboxes/"+ids[i], nil)
			}
		})
		waitSpares(b, e.Network, 2)
		return took
	}
	rawDocker := func() time.Duration {
		ids := make([]string, throughputCreates)
		var before cpuLook
		if cpuSplitOn() {
			before = lookAtCPU()
		}
		took := fanOut(throughputCreates, throughputParallel, func(i int) {
			c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
				Config:     &container.Config{Image: baseImage, Cmd: []string{"tail", "-f", "/dev/null"}},
				HostConfig: &container.HostConfig{NetworkMode: container.NetworkMode(e.Network)},
			})
			if err != nil {
				b.Error(err)
				return
			}
			ids[i] = c.ID
			if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
				b.Error(err)
			}
		})
		if cpuSplitOn() {
			after := lookAtCPU()
			roles := map[string]string{}
			for _, id := range ids {
				roles[id] = "container"
			}
			splitCPU(before, after, 0, roles).log(b, "raw", throughputCreates)
		}
		fanOut(len(ids), throughputParallel, func(i int) {
			if ids[i] != "" {
				_, _ = cli.ContainerRemove(ctx, ids[i], client.ContainerRemoveOptions{Force: true})
			}
		})
		return took
	}
	b.ResetTimer()
	gw, raw := alternate(b, viaGateway, rawDocker)
	b.StopTimer()
	dumpCreateSteps(b, g)
	p50, p99 := gw.ms()
	base, _ := raw.ms()
	b.ReportMetric(p50, "round-ms")
	b.ReportMetric(base, "raw-round-ms")
	testenv.RecordFigure(b, testenv.Figure{Name: "create_throughput_50x8", Unit: "ms", P50: p50, P99: p99, BaselineP50: base, Target: "<= 1.3x"})
}
