package policyadmin

import "github.com/sandgate/sandgate/gateway/store"

// Host is what the policy feature needs of the gateway's core. The core implements it;
// the store, the policy engine and the logger the Manager is given directly.
type Host interface {
	// QueueEvent hands an event of the tenant's stream (policy.updated, policy.reset) to
	// the core's batched event writer without blocking.
	QueueEvent(ev store.Event)
}
