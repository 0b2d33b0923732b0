package tenancy

import "context"

// Host is what the tenancy feature needs of the gateway's core. The core implements it;
// the store and the logger the Manager is given directly.
type Host interface {
	// KeyRevoked drops what was derived from a revoked key (the access header values it
	// fetched): on this replica at once, on the others when the change they are told of
	// arrives. It does not fail: a change that cannot be announced lapses with the other
	// replicas' binding TTL.
	KeyRevoked(ctx context.Context, keyID string)
}
