package api

import (
	"net/http"
	"time"

	"github.com/sandgate/sandgate/gateway"
)

// testClockPath moves the gateway's clock forward. It is served only by a gateway
// built with the test clock on (test_clock on, SANDGATE_TEST_CLOCK): elsewhere the path
// is unknown (404 ROUTE_NOT_FOUND), so that no production gateway has it.
const testClockPath = "/admin/test-clock"

// registerTestClock adds POST /admin/test-clock when the core has a test clock.
func (h *Handler) registerTestClock() {
	if h.svc == nil || !h.svc.TestClockEnabled() {
		return
	}
	h.register(route{method: "POST", path: testClockPath, handler: h.advanceClock, action: "policy.write"})
	h.registerFallback(testClockPath, []string{"POST"}, false)
}

// advanceClock: {"advance": "3s"} moves the clock that forward; the answer is the
// gateway's new time. The platform admin only (the core checks it again).
func (h *Handler) advanceClock(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var body struct {
		Advance string `json:"advance"`
	}
	if err := decodeJSON(w, r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	d, err := time.ParseDuration(body.Advance)
	if err != nil {
		h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "advance %q: want a duration such as \"3s\"", body.Advance))
		return
	}
	now, err := h.svc.AdvanceClock(c, d)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]time.Time{"now": now})
}
