package plugins_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate/plugins"
)

func TestSmoke(t *testing.T) {
	h := newHost(t, plugins.HostOptions{})
	start := time.Now()
	err := h.Load(context.Background(), plugins.Plugin{Tenant: "t1", Name: "noop", Module: wasm(t, "noop"), Config: plugins.Config{Hooks: []string{"on_event", "decide_ttl"}}})
	t.Logf("load: %v %v", time.Since(start), err)
	for i := 0; i < 5; i++ {
		start = time.Now()
		exp, changed, err := h.DecideTTL(context.Background(), "t1", plugins.TTLInput{Reason: "activity", CurrentExpiresAt: time.Now().Add(time.Minute)})
		t.Logf("decide: %v %v %v %v", time.Since(start), exp, changed, err)
	}
	st, _ := h.Stats("t1", "noop")
	t.Logf("%+v", st)
}
