package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

// BenchmarkBatch100FirstCommands: the gateway's own share of a batch's first commands,
// without Docker: a batch of 100 claimed from a warm pool of in-process sandboxes, then
// from 100 goroutines each member's endpoint and its first `true` through the proxy
// (first-ms), then the same 100 commands again (again-ms: routes, decisions and
// connections all known). The difference is what a first command costs the gateway
// beyond any later one. cpu-ms/first is this process's CPU over the first round (the
// gateway and the in-process agents' HTTP side; the commands' own processes are
// children, not counted). Run with -cpuprofile to see where it goes.
//
// from-answer reaches each member with the agent endpoint the batch's answer carries, as
// an SDK does (client.MemberAgent); endpoint-calls asks GET …/endpoints/44772 first, as
// a client must when the answer carries none (a gateway of an earlier release; against
// one, both make the endpoint calls).
func BenchmarkBatch100FirstCommands(b *testing.B) {
	for _, fromAnswer := range []bool{true, false} {
		name := "from-answer"
		if !fromAnswer {
			name = "endpoint-calls"
		}
		b.Run(name, func(b *testing.B) { batch100FirstCommands(b, fromAnswer) })
	}
}

func batch100FirstCommands(b *testing.B, fromAnswer bool) {
	srv, _ := startTestAPI(b, nil)
	admin := map[string]string{"OPEN-SANDBOX-API-KEY": "admin-key"}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute}}
	do := func(method, path string, body any, hdr map[string]string) (int, []byte) {
		var rd io.Reader
		if body != nil {
			js, _ := json.Marshal(body)
			rd = bytes.NewReader(js)
		}
		req, _ := http.NewRequest(method, srv.URL+path, rd)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}
	if st, body := do("POST", "/v1/pools", map[string]any{"name": "hundred",
		"template":     map[string]any{"image": map[string]string{"uri": "sandgate/base:test"}, "entrypoint": []string{"sleep", "600"}},
		"capacitySpec": map[string]int{"bufferMin": 100, "bufferMax": 100, "poolMin": 0, "poolMax": 100}}, admin); st != 201 {
		b.Fatalf("pool: %d %s", st, body)
	}
	waitAvailable := func() {
		deadline := time.Now().Add(3 * time.Minute)
		for time.Now().Before(deadline) {
			_, body := do("GET", "/v1/pools/hundred", nil, admin)
			var p struct {
				Status struct{ Available int }
			}
			json.Unmarshal(body, &p)
			if p.Status.Available == 100 {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		b.Fatal("pool did not fill")
	}
	type ep struct {
		Endpoint string
		Headers  map[string]string
	}
	command := func(e ep) {
		req, _ := http.NewRequest("POST", "http://"+e.Endpoint+"/command", bytes.NewReader([]byte(`{"command":"true"}`)))
		for k, v := range e.Headers {
			req.Header.Set(k, v)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Error(err)
			return
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(data, []byte("execution_complete")) {
			b.Errorf("command: %d %s", resp.StatusCode, data)
		}
	}
	var first, again []time.Duration
	var firstCPU time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		waitAvailable()
		b.StartTimer()
		cpu0 := selfCPU()
		t0 := time.Now()
		st, body := do("POST", "/v1/batches", map[string]any{"count": 100, "poolRef": "hundred"}, admin)
		if st != 202 {
			b.Fatalf("batch: %d %s", st, body)
		}
		var bt struct {
			ID      string
			Members []struct {
				ID            string
				AgentEndpoint *ep
			}
		}
		json.Unmarshal(body, &bt)
		eps := make([]ep, len(bt.Members))
		var wg sync.WaitGroup
		for j, m := range bt.Members {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if fromAnswer && m.AgentEndpoint != nil {
					eps[j] = *m.AgentEndpoint
					command(eps[j])
					return
				}
				st, body := do("GET", "/v1/sandboxes/"+m.ID+"/endpoints/44772", nil, admin)
				if st != 200 {
					b.Errorf("endpoint: %d %s", st, body)
					return
				}
				json.Unmarshal(body, &eps[j])
				command(eps[j])
			}()
		}
		wg.Wait()
		first = append(first, time.Since(t0))
		firstCPU += selfCPU() - cpu0
		t1 := time.Now()
		for j := range eps {
			wg.Add(1)
			go func() { defer wg.Done(); command(eps[j]) }()
		}
		wg.Wait()
		again = append(again, time.Since(t1))
		b.StopTimer()
		do("DELETE", "/v1/batches/"+bt.ID, nil, admin)
		b.StartTimer()
	}
	p50, _ := testenv.Quantiles(first, time.Millisecond)
	b.ReportMetric(p50, "first-ms")
	p50, _ = testenv.Quantiles(again, time.Millisecond)
	b.ReportMetric(p50, "again-ms")
	b.ReportMetric(float64(firstCPU.Microseconds())/1000/float64(b.N), "cpu-ms/first")
}

// selfCPU is the user and system CPU this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
