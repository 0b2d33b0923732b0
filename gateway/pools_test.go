package gateway

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sandgate/sandgate/gateway/store"
)

// TestPoolTemplateEgressJudgedAtDefinition: a pool whose template asks for an egress
// policy the Rego egress policy refuses is refused when it is created or updated, with
// the decision's code, instead of being stored and failing at every member's start.
func TestPoolTemplateEgressJudgedAtDefinition(t *testing.T) {
	c := newTestCore(t, Config{})
	ctx := context.Background()
	capacity := store.Capacity{BufferMin: 0, BufferMax: 0, PoolMin: 0, PoolMax: 2}
	refused := sleeper(600)
	refused.NetworkPolicy = json.RawMessage(`{"defaultAction":"deny","egress":[{"action":"allow","target":"not a host name!"}]}`)
	_, err := c.svc.Pools().Create(ctx, admin, PoolRequest{Name: "refused", Template: &refused, CapacitySpec: capacity})
	wantCode(t, err, KindInvalid, "EGRESS::INVALID_POLICY")
	if _, err := c.svc.Pools().Get(ctx, admin, "refused"); err == nil {
		t.Fatal("a refused pool was stored")
	}

	allowed := sleeper(600)
	allowed.NetworkPolicy = json.RawMessage(`{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"}]}`)
	if _, err := c.svc.Pools().Create(ctx, admin, PoolRequest{Name: "kept", Template: &allowed, CapacitySpec: capacity}); err != nil {
		t.Fatal(err)
	}
	_, err = c.svc.Pools().Update(ctx, admin, "kept", PoolRequest{Template: &refused, CapacitySpec: capacity})
	wantCode(t, err, KindInvalid, "EGRESS::INVALID_POLICY")
	p, err := c.svc.Pools().Get(ctx, admin, "kept")
	if err != nil {
		t.Fatal(err)
	}
	var tmpl CreateRequest
	if err := json.Unmarshal(p.Template, &tmpl); err != nil || string(tmpl.NetworkPolicy) != string(allowed.NetworkPolicy) {
		t.Fatalf("the refused update changed the template: %s (%v)", p.Template, err)
	}
}
