package e2e

import (
	"testing"
	"time"
)

// advanceClock moves the gateway's clock d forward (a gateway started with
// SANDGATE_TEST_CLOCK=on): what a test does instead of sleeping through a cooldown or a
// link's expiry. It returns the gateway's new time.
func (g *gateway) advanceClock(d time.Duration) time.Time {
	g.t.Helper()
	r := g.do("POST", "/v1/admin/test-clock", map[string]string{"advance": d.String()})
	if r.Status != 200 {
		g.t.Fatalf("advance the gateway's clock %s: %d %s", d, r.Status, r.Body)
	}
	now, err := time.Parse(time.RFC3339Nano, r.JSON(g.t)["now"].(string))
	if err != nil {
		g.t.Fatalf("test clock answer %s: %v", r.Body, err)
	}
	return now
}

// TestTestClockSurface: the route that moves a gateway's clock is absent unless the
// gateway runs with SANDGATE_TEST_CLOCK=on (404 for the platform admin itself), and with
// it only the platform admin moves the clock: no key, a tenant's member and a tenant's
// admin are refused and the clock has not moved; bad steps are 400.
func TestTestClockSurface(t *testing.T) {
	redis := startRedis(t)
	t.Run("off by default: no route", func(t *testing.T) {
		g := newEnv(t, redis).startGateway()
		for _, body := range []any{map[string]string{"advance": "1h"}, nil} {
			expectError(t, g.do("POST", "/v1/admin/test-clock", body), 404, "ROUTE_NOT_FOUND")
			expectError(t, g.do("POST", "/admin/test-clock", body), 404, "ROUTE_NOT_FOUND")
		}
		expectError(t, g.do("GET", "/v1/admin/test-clock", nil), 404, "ROUTE_NOT_FOUND")
	})

	t.Run("on: the platform admin only", func(t *testing.T) {
		admin := newEnv(t, redis, "SANDGATE_TEST_CLOCK=on").startGateway()
		tenant := admin.newPluginTenant("clock-tenant")
		member, tenantAdmin := admin.withTenantKey(tenant, "member"), admin.withTenantKey(tenant, "tenant-admin")
		step := map[string]string{"advance": "1h"}
		expectError(t, admin.do("POST", "/v1/admin/test-clock", step, "OPEN-SANDBOX-API-KEY", ""), 401, "MISSING_API_KEY")
		expectError(t, admin.do("POST", "/v1/admin/test-clock", step, "OPEN-SANDBOX-API-KEY", "wrong"), 401, "INVALID_API_KEY")
		expectError(t, member.do("POST", "/v1/admin/test-clock", step), 403, "POLICY::DENIED") // Rego
		expectError(t, tenantAdmin.do("POST", "/v1/admin/test-clock", step), 403, "POLICY::DENIED")
		for _, bad := range []string{"", "soon", "-1s", "0s", "25h"} {
			expectError(t, admin.do("POST", "/v1/admin/test-clock", map[string]string{"advance": bad}), 400, "SANDBOX::INVALID_PARAMETER")
		}
		expectError(t, admin.do("GET", "/v1/admin/test-clock", nil), 405, "METHOD_NOT_ALLOWED")
		// Nothing above moved the clock: the admin's one second is all it is ahead.
		if ahead := time.Until(admin.advanceClock(time.Second)); ahead > 30*time.Second || ahead < 0 {
			t.Fatalf("after the refused steps and one of 1s the gateway's clock is %s ahead", ahead)
		}
		before := time.Now()
		if ahead := admin.advanceClock(2 * time.Hour).Sub(before); ahead < 2*time.Hour {
			t.Fatalf("after 2h more the gateway's clock is %s ahead", ahead)
		}
	})
}
