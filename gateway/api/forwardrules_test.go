package api

import (
	"net/http"
	"testing"

	"github.com/sandgate/sandgate/gateway/api/forwardtest"
)

// TestForwardRules runs the forwarding rules (package forwardtest) against both paths
// of NewForward: the lean forward, for the requests it takes, and httputil. Caddy's
// reverse_proxy meets the same table in caddy/modules.
func TestForwardRules(t *testing.T) {
	onError := func(w http.ResponseWriter, r *http.Request, err error) {
		t.Errorf("forward: %v", err)
		w.WriteHeader(http.StatusBadGateway)
	}
	lean := newLeanForward(onError)
	forwardtest.Run(t,
		forwardtest.Forwarder{
			Name:  "lean",
			Start: func(t *testing.T, upstream string) string { return forwardtest.Serve(t, upstream, lean.serve) },
			Takes: lean.handles,
		},
		forwardtest.Forwarder{
			Name: "httputil",
			Start: func(t *testing.T, upstream string) string {
				return forwardtest.Serve(t, upstream, httputilForward(onError))
			},
		},
	)
}
