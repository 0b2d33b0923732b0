package api

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/test/coredeps"
)

// BenchmarkE2BDoorInProcess: the gateway's share of a command through each door,
// without Docker. One sandbox of the in-process runtime (its agent in this process), one
// keep-alive client, the calls one after another, the three ways alternating:
//
//   - door: envd's process.Start of `true` as the E2B SDKs send it (E2b-Sandbox-Id and
//     -Port, X-Access-Token, the Connect stream's envelope);
//   - endpoint: the same envd call through the OpenSandbox door's agent endpoint
//     (…/proxy/44772/envd/process.Process/Start with the endpoint's headers);
//   - command: the OpenSandbox door's POST /command `true` through the same endpoint.
//
// door and endpoint differ only in the gateway's routing, so door−endpoint is the door's
// own cost; endpoint−command is envd's against /command in the agent. Reported per call:
// wall µs and this process's CPU µs (gateway, agent and client alike).
func BenchmarkE2BDoorInProcess(b *testing.B) {
	d := coredeps.Start(b)
	svc := gateway.New(gateway.Config{}, d.Store, d.Runtime, d.Policy, d.Log)
	svc.SetAdminKey("admin-key")
	svc.Start(context.Background())
	b.Cleanup(svc.Stop)
	srv := httptest.NewServer(New(svc, Options{Logger: d.Log, E2B: E2BOptions{
		Prefix: "/e2b", DefaultTemplates: map[string]string{"base": "sandgate/base:test"},
	}}))
	b.Cleanup(srv.Close)
	admin := map[string]string{"OPEN-SANDBOX-API-KEY": "admin-key"}
	st, body := benchCall(b, "POST", srv.URL+"/v1/tenants", map[string]any{"name": "bench"}, admin)
	var tenant struct{ ID string }
	if json.Unmarshal(body, &tenant); st != http.StatusCreated {
		b.Fatalf("tenant: %d %s", st, body)
	}
	st, body = benchCall(b, "POST", srv.URL+"/v1/tenants/"+tenant.ID+"/keys", map[string]any{"role": "tenant-admin"}, admin)
	var key struct{ Key string }
	if json.Unmarshal(body, &key); st != http.StatusCreated {
		b.Fatalf("key: %d %s", st, body)
	}
	st, body = benchCall(b, "POST", srv.URL+"/e2b/v2/sandboxes", map[string]any{"templateID": "base", "timeout": 600}, map[string]string{"X-API-Key": key.Key})
	var sb e2bCreated
	if json.Unmarshal(body, &sb); st != http.StatusCreated {
		b.Fatalf("create: %d %s", st, body)
	}
	st, body = benchCall(b, "GET", srv.URL+"/v1/sandboxes/"+sb.SandboxID+"/endpoints/44772", nil, map[string]string{"OPEN-SANDBOX-API-KEY": key.Key})
	var ep struct {
		Endpoint string
		Headers  map[string]string
	}
	if json.Unmarshal(body, &ep); st != http.StatusOK {
		b.Fatalf("endpoint: %d %s", st, body)
	}
	_, epPath, _ := strings.Cut(ep.Endpoint, "/")

	// envd's Start of `true` as root (the host has no `user`), one Connect envelope.
	msg := []byte(`{"process":{"cmd":"/bin/true","args":[]}}`)
	start := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(start[1:5], uint32(len(msg)))
	copy(start[5:], msg)
	envdHeaders := map[string]string{
		"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1",
		"Authorization": "Basic cm9vdDo=", "Accept-Encoding": "gzip, deflate",
	}
	door := map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": sb.EnvdAccessToken}
	endpoint := map[string]string{}
	for k, v := range envdHeaders {
		door[k], endpoint[k] = v, v
	}
	for k, v := range ep.Headers {
		endpoint[k] = v
	}
	command := map[string]string{"Content-Type": "application/json"}
	for k, v := range ep.Headers {
		command[k] = v
	}
	ways := []struct {
		name, url, want string
		body            []byte
		hdr             map[string]string
	}{
		{"door", srv.URL + "/process.Process/Start", `"end"`, start, door},
		{"endpoint", srv.URL + "/" + epPath + "/envd/process.Process/Start", `"end"`, start, endpoint},
		{"command", srv.URL + "/" + epPath + "/command", "execution_complete", []byte(`{"command":"true"}`), command},
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}}
	defer client.CloseIdleConnections()
	one := func(i int) {
		w := ways[i]
		req, _ := http.NewRequest("POST", w.url, bytes.NewReader(w.body))
		for k, v := range w.hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(got, []byte(w.want)) {
			b.Fatalf("%s: %d %s", w.name, resp.StatusCode, got)
		}
	}
	for _, i := range []int{2, 1, 0} {
		one(i) // connections and caches warm
	}
	var wall, cpu [3]time.Duration
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for i := range ways {
			t0, c0 := time.Now(), selfCPU()
			one(i)
			wall[i] += time.Since(t0)
			cpu[i] += selfCPU() - c0
		}
	}
	for i, w := range ways {
		b.ReportMetric(float64(wall[i].Microseconds())/float64(b.N), w.name+"-µs/call")
		b.ReportMetric(float64(cpu[i].Microseconds())/float64(b.N), w.name+"-cpu-µs/call")
	}
}
