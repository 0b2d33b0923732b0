package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
	"github.com/sandgate/sandgate/sandbox-agent/egress"
)

// enforcerCheckTimeout bounds the wait for a signed answer from an enforcer whose startup
// probe has passed (it listens already; a few seconds cover a slow node), and
// enforcerCallTimeout one request of that wait. A variable so that a test of an
// answer that never comes need not wait it out.
var enforcerCheckTimeout = 15 * time.Second

const enforcerCallTimeout = 5 * time.Second

// checksEnforcerAt reports whether the enforcer of a pod at addr is asked for its policy
// in force. Every pod address is, except one on loopback: a pod network never hands out
// loopback addresses (each network namespace has its own), so such an address names no
// pod's interface at all, only the simulated pods of a kwok node, which run no
// containers and so no enforcer. The address comes from the pod's status, which the
// kubelet writes; nothing in the pod chooses it.
func checksEnforcerAt(addr string) bool {
	ip := net.ParseIP(addr)
	return ip == nil || !ip.IsLoopback()
}

// checkPolicyInForce asks the enforcer of spec at addr, with a request signed with the
// sandbox's enforcer token, for the policy it enforces, and compares the signed answer
// with the policy the pod gave it (egress.CheckPolicyInForce). It runs once the pod is
// up, before Create answers: the kubelet started the workload once the enforcer's
// startup probe (an unsigned /healthz) passed, and that probe says nothing of what the
// enforcer enforces nor of who answered it. A signed answer with another policy, or an
// answer that stays unsigned (whatever holds port 18080 is not the enforcer the runtime
// started), is ErrEnforcementMismatch; no signed answer within enforcerCheckTimeout is
// an error too. Without an enforcer token there is nothing to sign with, and the probe
// is all there is (the gateway gives every sandbox with egress a token).
func (r *Runtime) checkPolicyInForce(ctx context.Context, spec runtimes.Spec, addr string) error {
	if spec.EgressToken == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, enforcerCheckTimeout)
	defer cancel()
	var last error
	for {
		status, body, err := r.agents.Policy(ctx, addr, spec.EgressToken, http.MethodGet, nil, enforcerCallTimeout)
		switch {
		case err == nil && status == http.StatusOK:
			if err := egress.CheckPolicyInForce(body, sidecarPolicy(spec), spec.Egress.PlatformDeny); err != nil {
				return fmt.Errorf("%w: %w", runtimes.ErrEnforcementMismatch, err)
			}
			return nil
		case err == nil:
			last = fmt.Errorf("the enforcer answered GET /policy with status %d", status)
		default:
			last = err
		}
		select {
		case <-ctx.Done():
			if errors.Is(last, agentclient.ErrUnsigned) {
				return fmt.Errorf("%w: %w", runtimes.ErrEnforcementMismatch, last)
			}
			return fmt.Errorf("the egress enforcer gave no signed report of its policy within %s: %w", enforcerCheckTimeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
