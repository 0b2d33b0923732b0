package modules

import (
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sandgate/sandgate/gateway/api/forwardtest"
)

// TestForwardRules runs the forwarding rules (package forwardtest) against Caddy's
// reverse_proxy with the configuration Handler.Provision gives it for agent calls and
// upgrades (its transport, keep-alive and flushing), in a real Caddy HTTP server on
// loopback. Only the upstream source differs: the rule's upstream is named in the
// configuration, where the binary's `sandgate` source gives the address the gateway
// resolved. gateway/api runs the same table against NewForward.
func TestForwardRules(t *testing.T) {
	forwardtest.Run(t, forwardtest.Forwarder{Name: "reverse_proxy", Start: startCaddyProxy})
}

// startCaddyProxy runs Caddy with one route, reverse_proxy to upstream, and stops it in
// t.Cleanup.
func startCaddyProxy(t *testing.T, upstream string) string {
	var rp map[string]any
	if err := json.Unmarshal([]byte(reverseProxyConfig(time.Minute)), &rp); err != nil {
		t.Fatal(err)
	}
	delete(rp, "dynamic_upstreams")
	rp["handler"] = "reverse_proxy"
	rp["upstreams"] = []map[string]string{{"dial": upstream}}
	addr := freeLoopbackAddr(t)
	// Caddy's own files (autosave, storage) go to the test's folders.
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	cfg := map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{"http": map[string]any{"servers": map[string]any{"front": map[string]any{
			"listen":          []string{addr},
			"automatic_https": map[string]any{"disable": true},
			"routes":          []any{map[string]any{"handle": []any{rp}}},
		}}}},
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(raw, true); err != nil {
		t.Fatalf("caddy: %v", err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	return fmt.Sprintf("http://%s", addr)
}

// freeLoopbackAddr is a loopback address no listener holds at the moment.
func freeLoopbackAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
