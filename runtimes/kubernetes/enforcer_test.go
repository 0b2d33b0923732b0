package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
	"github.com/sandgate/sandgate/sandbox-agent/egress/egressauth"
)

// startEnforcerStandIn serves GET /policy on port 18080 of a loopback address of its own
// and returns that address. It stands in for an enforcer whose answers a real one cannot
// be made to give on demand (another policy than the one its pod gave it, an unsigned or
// mis-signed answer): it checks the request's signature with key, as the enforcer does,
// and answers with body, signed with answerKey (empty: not signed).
func startEnforcerStandIn(t *testing.T, key, answerKey, body string) string {
	t.Helper()
	addr := randomLoopback()
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(runtimes.EgressPort)))
	if err != nil {
		t.Fatalf("listen for the enforcer stand-in: %v", err)
	}
	verifier := egressauth.NewVerifier(key, time.Now().Add(-time.Second))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqBody, _ := io.ReadAll(r.Body)
		nonce, err := verifier.Verify(r, reqBody, time.Now())
		if err != nil || r.Method != http.MethodGet || r.URL.Path != "/policy" {
			http.Error(w, "refused", http.StatusUnauthorized)
			return
		}
		if answerKey != "" {
			w.Header().Set(egressauth.HeaderResponseSignature, egressauth.SignResponse(answerKey, nonce, http.StatusOK, []byte(body)))
		}
		io.WriteString(w, body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return addr
}

// randomLoopback is an address of 127.100.0.0/14 that nothing else uses, so that each
// stand-in has port 18080 of its own.
func randomLoopback() string {
	return fmt.Sprintf("127.%d.%d.%d", 100+rand.IntN(4), rand.IntN(256), 1+rand.IntN(250))
}

// TestPolicyInForceCheckWithEnforcerStandIn: a create believes only the enforcer's
// signed report of the policy the pod gave it. An enforcer that reports another policy
// (an allow-all one planted in its state, a platform deny target dropped), or whatever
// answers without the enforcer's signature, is ErrEnforcementMismatch.
func TestPolicyInForceCheckWithEnforcerStandIn(t *testing.T) {
	saved := enforcerCheckTimeout
	enforcerCheckTimeout = time.Second
	t.Cleanup(func() { enforcerCheckTimeout = saved })

	const key = "egress-token-of-the-sandbox"
	spec := runtimes.Spec{ID: "sb-1", EgressToken: key, Egress: &runtimes.EgressSpec{
		Policy: []byte(`{"defaultAction":"deny"}`), PlatformDeny: []string{"169.254.0.0/16"},
	}}
	inForce := `{"status":"ok","mode":"enforcing","policy":{"defaultAction":"deny","egress":[]},"platformDeny":["169.254.0.0/16"]}`
	tests := []struct {
		name, answerKey, body string
		mismatch              bool
	}{
		{"the policy it was given, signed", key, inForce, false},
		{"allow-all, signed", key, `{"status":"ok","mode":"enforcing","policy":{"defaultAction":"allow","egress":[]},"platformDeny":["169.254.0.0/16"]}`, true},
		{"platform deny dropped, signed", key, `{"status":"ok","mode":"enforcing","policy":{"defaultAction":"deny","egress":[]}}`, true},
		{"the policy it was given, unsigned", "", inForce, true},
		{"the policy it was given, signed with another key", "another-sandbox-token", inForce, true},
	}
	r := &Runtime{agents: agentclient.New()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := startEnforcerStandIn(t, key, tt.answerKey, tt.body)
			err := r.checkPolicyInForce(context.Background(), spec, addr)
			if got := errors.Is(err, runtimes.ErrEnforcementMismatch); got != tt.mismatch || (!tt.mismatch && err != nil) {
				t.Fatalf("checkPolicyInForce = %v, want mismatch %t", err, tt.mismatch)
			}
		})
	}
	t.Run("nothing answers", func(t *testing.T) {
		err := r.checkPolicyInForce(context.Background(), spec, randomLoopback())
		if err == nil {
			t.Fatal("checkPolicyInForce with no enforcer = nil, want an error")
		}
	})
}

// TestChecksEnforcerAt: only a loopback address, which no pod network hands out, goes
// unchecked.
func TestChecksEnforcerAt(t *testing.T) {
	for addr, want := range map[string]bool{"10.244.0.7": true, "fd00::7": true, "192.168.1.2": true, "": true, "127.64.0.3": false, "::1": false} {
		if got := checksEnforcerAt(addr); got != want {
			t.Errorf("checksEnforcerAt(%q) = %t, want %t", addr, got, want)
		}
	}
}
