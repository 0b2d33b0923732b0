package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
)

// noTimeout is a create that names no timeout: OpenSandbox's "no expiry".
func noTimeout() CreateRequest {
	return CreateRequest{Image: &ImageSpec{URI: "sandgate/base:test"}, Entrypoint: []string{"sleep", "600"}}
}

// TestNoTimeoutNeverExpires: a create without timeout answers without expiresAt, keeps
// none in its record, outlives reaper passes, and refuses a renewal of the expiry it
// does not have.
func TestNoTimeoutNeverExpires(t *testing.T) {
	c := newTestCore(t, Config{ReapInterval: 20 * time.Millisecond})
	ctx := context.Background()
	resp, err := c.svc.Create(ctx, admin, noTimeout())
	if err != nil {
		t.Fatal(err)
	}
	if resp.ExpiresAt != nil {
		t.Fatalf("create without timeout answers expiresAt %s, want none", resp.ExpiresAt)
	}
	time.Sleep(200 * time.Millisecond)
	got, err := c.svc.Get(ctx, admin, resp.ID)
	if err != nil {
		t.Fatalf("the sandbox without expiry is gone after reaper passes: %v", err)
	}
	if got.ExpiresAt != nil {
		t.Fatalf("the sandbox's record expires at %s, want never", got.ExpiresAt)
	}
	_, err = c.svc.Renew(ctx, admin, resp.ID, time.Now().Add(time.Hour))
	wantCode(t, err, KindConflict, CodeInvalidExpiration)
	if got, _ := c.svc.Get(ctx, admin, resp.ID); got == nil || got.ExpiresAt != nil {
		t.Fatalf("a refused renewal gave the sandbox an expiry: %+v", got)
	}
}

// TestNoTimeoutBounds: an operator who forbids sandboxes without expiry (the gateway's
// RequireTimeout, a tenant's maxTimeoutSeconds) gets a 400 naming the limit, never a
// lifetime the create did not ask for; a tenant allowed manual cleanup is exempt from
// the gateway's rule.
func TestNoTimeoutBounds(t *testing.T) {
	ctx := context.Background()
	tenantCaller := func(t *testing.T, c *testCore, name string, q store.Quotas) Caller {
		t.Helper()
		tenant, err := c.svc.Tenancy().CreateTenant(ctx, TenantRequest{Name: name, Quotas: &q})
		if err != nil {
			t.Fatal(err)
		}
		key, err := c.svc.Tenancy().CreateKey(ctx, tenant.ID, "member")
		if err != nil {
			t.Fatal(err)
		}
		caller, err := c.svc.Authenticate(ctx, key.Key)
		if err != nil {
			t.Fatal(err)
		}
		return caller
	}
	t.Run("gateway requires a timeout", func(t *testing.T) {
		c := newTestCore(t, Config{RequireTimeout: true})
		_, err := c.svc.Create(ctx, admin, noTimeout())
		wantCode(t, err, KindInvalid, CodeInvalidExpiration)
		if e, _ := AsError(err); !strings.Contains(e.Message, "604800") {
			t.Errorf("message %q does not name the allowed timeouts", e.Message)
		}
		if _, err := c.svc.Create(ctx, admin, sleeper(600)); err != nil {
			t.Fatalf("a create with a timeout is refused: %v", err)
		}
		manual := tenantCaller(t, c, "manual", store.Quotas{AllowManualCleanup: true})
		resp, err := c.svc.Create(ctx, manual, noTimeout())
		if err != nil {
			t.Fatalf("a tenant allowed manual cleanup is refused: %v", err)
		}
		if resp.ExpiresAt != nil {
			t.Fatalf("manual cleanup, yet expiresAt %s", resp.ExpiresAt)
		}
	})
	t.Run("tenant caps the timeout", func(t *testing.T) {
		c := newTestCore(t, Config{})
		capped := tenantCaller(t, c, "capped", store.Quotas{MaxTimeoutSeconds: 3600})
		_, err := c.svc.Create(ctx, capped, noTimeout())
		wantCode(t, err, KindInvalid, policy.CodeQuotaTimeout)
		if e, _ := AsError(err); !strings.Contains(e.Message, "3600") {
			t.Errorf("message %q does not name the tenant's limit", e.Message)
		}
	})
}

// TestClaimTimeout: a pool claim or a batch without timeout takes its template's, and
// neither without one expires, whether the member comes warm or cold.
func TestClaimTimeout(t *testing.T) {
	ctx := context.Background()
	c := newTestCore(t, Config{PoolInterval: 50 * time.Millisecond, PoolWait: 10 * time.Millisecond})
	timed := sleeper(600)
	untimed := noTimeout()
	for name, tmpl := range map[string]*CreateRequest{"timed": &timed, "untimed": &untimed, "cold": &timed} {
		capacity := store.Capacity{BufferMin: 1, BufferMax: 1, PoolMax: 3}
		if name == "cold" {
			capacity = store.Capacity{PoolMax: 3}
		}
		if _, err := c.svc.Pools().Create(ctx, admin, PoolRequest{Name: name, Template: tmpl, CapacitySpec: capacity}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"timed", "untimed"} {
		eventually(t, "a warm member in "+name, func() bool {
			p, err := c.svc.Pools().Get(ctx, admin, name)
			return err == nil && p.Status.Available == 1
		})
	}
	wantLifetime := func(t *testing.T, expiresAt *time.Time, want time.Duration) {
		t.Helper()
		switch {
		case want == 0 && expiresAt != nil:
			t.Fatalf("expiresAt %s, want none", expiresAt)
		case want != 0 && expiresAt == nil:
			t.Fatalf("no expiresAt, want about %s", want)
		case want != 0:
			if d := time.Until(*expiresAt); d < want-time.Minute || d > want {
				t.Fatalf("expires in %s, want about %s", d, want)
			}
		}
	}
	tests := []struct {
		name string
		pool string
		want time.Duration
	}{
		{"warm claim takes the template's timeout", "timed", 600 * time.Second},
		{"warm claim of an untimed template", "untimed", 0},
		{"cold claim takes the template's timeout", "cold", 600 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := CreateRequest{Extensions: map[string]string{"poolRef": tt.pool}}
			resp, err := c.svc.Create(ctx, admin, req)
			if err != nil {
				t.Fatal(err)
			}
			wantLifetime(t, resp.ExpiresAt, tt.want)
		})
	}
	t.Run("batch of an untimed template", func(t *testing.T) {
		b, err := c.svc.Batches().Create(ctx, admin, BatchRequest{Count: 1, Template: &untimed}, nil)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the batch member running", func() bool {
			v, err := c.svc.Batches().Get(ctx, admin, b.ID, nil)
			return err == nil && len(v.Members) == 1 && v.Members[0].ID != "" && v.Members[0].Status.State == StateRunning
		})
		v, _ := c.svc.Batches().Get(ctx, admin, b.ID, nil)
		sb, err := c.svc.Get(ctx, admin, v.Members[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		wantLifetime(t, sb.ExpiresAt, 0)
	})
}

// TestExpiredSandboxVanishingIsNotAFailure: a reconciler pass that read a sandbox's
// record just before its expiry, and finds its container gone because the reaper
// (of this gateway or another) is removing it, leaves it to the reaper: no
// sandbox.failed, the record not marked Failed.
func TestExpiredSandboxVanishingIsNotAFailure(t *testing.T) {
	c := newTestCore(t, Config{ReapInterval: time.Hour, SyncInterval: time.Hour})
	ctx := context.Background()
	resp, err := c.svc.Create(ctx, admin, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	judgedAt := time.Now()
	rec, err := c.store.GetSandbox(ctx, resp.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Its expiry comes while the pass runs, and the reaper's removal of its container
	// begins: the pass's list no longer has it.
	past := judgedAt.Add(-time.Millisecond).UTC()
	if _, err := c.store.ModifySandbox(ctx, resp.ID, func(sb *store.Sandbox) error {
		sb.ExpiresAt = &past
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.rt.Delete(ctx, resp.ID); err != nil {
		t.Fatal(err)
	}
	c.svc.syncRecord(ctx, rec, runtimes.Instance{}, false, judgedAt, judgedAt.Add(-time.Second))
	got, err := c.store.GetSandbox(ctx, resp.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State == StateFailed {
		t.Errorf("an expired sandbox whose container the reaper removes was marked Failed (%s: %s)", got.Reason, got.Message)
	}
	events, err := c.store.ReadEvents(ctx, DefaultTenant, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		if ev.Type == "sandbox.failed" {
			t.Errorf("sandbox.failed for an expired sandbox: %v", ev.Data)
		}
	}
}
