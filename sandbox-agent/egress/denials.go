package egress

import "sync/atomic"

// deniedQueries counts the DNS questions refused (NXDOMAIN) because the policy does not
// allow the name, since the enforcer started. /healthz reports it; the gateway reads it
// for its sandgate_egress_denials_total series and the sandbox's metrics.
var deniedQueries atomic.Uint64
