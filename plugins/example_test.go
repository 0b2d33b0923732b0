package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/sandgate/sandgate/plugins"
)

// A gateway loads a tenant's TTL plugin and asks it, on activity, for the
// sandbox's new expiry.
func Example() {
	ctx := context.Background()
	host, err := plugins.NewHost(ctx, plugins.HostOptions{CacheDir: cacheDir})
	if err != nil {
		panic(err)
	}
	defer host.Close(ctx)

	module, err := os.ReadFile("examples/ttl-on-activity/ttl-on-activity.wasm")
	if err != nil {
		panic(err)
	}
	err = host.Load(ctx, plugins.Plugin{
		Tenant: "acme", Name: "ttl", Version: "1", Module: module,
		Config: plugins.Config{
			Hooks:    []string{plugins.HookDecideTTL},
			Limits:   plugins.Limits{TimeoutMs: 50},
			Settings: json.RawMessage(`{"extendMinutes": 15}`),
		},
	})
	if err != nil {
		panic(err)
	}

	now := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	expiry, changed, err := host.DecideTTL(ctx, "acme", plugins.TTLInput{
		SandboxID: "3f6c1c1e-8d1a-4c53-9a55-2a3c0f0f9a11", Reason: plugins.ReasonActivity,
		Now: now, CurrentExpiresAt: now.Add(time.Minute), MaxExpiresAt: now.Add(time.Hour),
		Activity: &plugins.Activity{Port: 8080, Method: "GET", Path: "/"},
	})
	fmt.Println(expiry.Format(time.RFC3339), changed, err)

	// Without a decide_ttl plugin, the gateway applies its built-in rule.
	_, _, err = host.DecideTTL(ctx, "globex", plugins.TTLInput{Reason: plugins.ReasonActivity, Now: now})
	fmt.Println(plugins.ErrorCode(err))
	// Output:
	// 2026-01-05T10:15:00Z true <nil>
	// PLUGIN::NOT_FOUND
}
