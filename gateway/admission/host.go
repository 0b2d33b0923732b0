package admission

import "github.com/sandgate/sandgate/policy"

// Host is what admission needs of the gateway's core. The core implements it; the
// store, the runtime, the policy engine and the metrics the Manager is given directly.
type Host interface {
	// Denied records the admission policy's denial d of action for tenant in the audit
	// stream and returns the error the caller is answered with (its kind and code are
	// the decision's).
	Denied(tenant, action string, d policy.Decision) error
}
