package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/sandgate/sandgate/test/testenv"
)

// latencies collects per-operation durations and reports p50/p99 beside ns/op.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	q := func(p float64) float64 { return float64(l[int(p*float64(len(l)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

// ms returns the p50 and p99 of l in milliseconds.
func (l latencies) ms() (p50, p99 float64) { return testenv.Quantiles(l, time.Millisecond) }

// BenchmarkColdCreate measures create → first command completed through sandgate, beside
// the raw baseline of `docker create` + `start` + `exec true` of the same image.
func BenchmarkColdCreate(b *testing.B) {
	e := newEnv(b, startRedis(b))
	g := e.startGateway()
	var viaGateway, raw latencies
	b.Run("sandgate", func(b *testing.B) {
		var lat latencies
		defer func() { viaGateway = lat }()
		for i := 0; i < b.N; i++ {
			start := time.Now()
			id := g.createSandbox(map[string]any{})
			if evs := g.agent(id).run("true"); lastEvent(evs).Type != "execution_complete" {
				b.Fatalf("true: %+v", evs)
			}
			lat = append(lat, time.Since(start))
			b.StopTimer()
			g.do("DELETE", "/v1/sandboxes/"+id, nil)
			b.StartTimer()
		}
		lat.report(b)
	})
	b.Run("raw-docker", func(b *testing.B) {
		cli, err := client.New(client.FromEnv)
		if err != nil {
			b.Fatal(err)
		}
		defer cli.Close()
		ctx := context.Background()
		if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
			b.Fatal(err)
		}
		var lat latencies
		defer func() { raw = lat }()
		for i := 0; i < b.N; i++ {
			start := time.Now()
			c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
				Config:     &container.Config{Image: baseImage, Cmd: []string{"tail", "-f", "/dev/null"}},
				HostConfig: &container.HostConfig{NetworkMode: container.NetworkMode(e.Network)},
			})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
				b.Fatal(err)
			}
			ex, err := cli.ExecCreate(ctx, c.ID, client.ExecCreateOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
			if err != nil {
				b.Fatal(err)
			}
			att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, att.Reader)
			att.Close()
			lat = append(lat, time.Since(start))
			b.StopTimer()
			_, _ = cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
			b.StartTimer()
		}
		lat.report(b)
	})
	p50, p99 := viaGateway.ms()
	base, _ := raw.ms()
	testenv.RecordFigure(b, testenv.Figure{Name: "cold_create_first_command", Unit: "ms", P50: p50, P99: p99, BaselineP50: base, Target: "<= 1.2x"})
}

// BenchmarkTrueRoundTrip measures POST /command {"true"} through the gateway's proxy,
// beside the same call straight to the agent at the container's address.
func BenchmarkTrueRoundTrip(b *testing.B) {
	e := newEnv(b, startRedis(b))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{})
	defer g.do("DELETE", "/v1/sandboxes/"+id, nil)
	viaGateway := g.agent(id)
	direct := directAgent(b, id)
	got := map[string]latencies{}
	for _, c := range []struct {
		name string
		a    *agent
	}{{"sandgate", viaGateway}, {"direct-agent", direct}} {
		b.Run(c.name, func(b *testing.B) {
			body := []byte(`{"command":"true"}`)
			var lat latencies
			defer func() { got[c.name] = lat }()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				resp := c.a.request("POST", "/command", bytes.NewReader(body), "application/json")
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if !strings.Contains(string(data), "execution_complete") {
					b.Fatalf("true: %s", data)
				}
				lat = append(lat, time.Since(start))
			}
			lat.report(b)
		})
	}
	p50, p99 := got["sandgate"].ms()
	d50, d99 := got["direct-agent"].ms()
	testenv.RecordFigure(b, testenv.Figure{Name: "true_rtt", Unit: "ms", P50: p50, P99: p99, BaselineP50: d50, Target: "<= 3"})
	testenv.RecordFigure(b, testenv.Figure{Name: "true_rtt_direct", Unit: "ms", P50: d50, P99: d99, Target: "<= 2"})
}

// directAgent reaches a sandbox's agent without the gateway: container address and the
// agent's own token, read from the engine (the raw baseline of the proxy).
func directAgent(b testing.TB, id string) *agent {
	out, err := exec.Command("docker", "inspect", "sandgate-"+id).Output()
	if err != nil {
		b.Fatal(err)
	}
	var info []struct {
		Config          struct{ Env []string }
		NetworkSettings struct {
			Networks map[string]struct{ IPAddress string }
		}
	}
	if err := json.Unmarshal(out, &info); err != nil || len(info) != 1 {
		b.Fatalf("inspect: %v", err)
	}
	var token, ip string
	for _, kv := range info[0].Config.Env {
		if v, ok := strings.CutPrefix(kv, "SANDGATE_AGENT_TOKEN="); ok {
			token = v
		}
	}
	for _, n := range info[0].NetworkSettings.Networks {
		ip = n.IPAddress
	}
	return &agent{t: b, base: fmt.Sprintf("http://%s:44772", ip), headers: map[string]string{"X-EXECD-ACCESS-TOKEN": token},
		client: &http.Client{Timeout: time.Minute}}
}
