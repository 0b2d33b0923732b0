package gateway

import (
	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/admission"
	"github.com/sandgate/sandgate/gateway/batch"
	"github.com/sandgate/sandgate/gateway/egress"
	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/policyadmin"
	"github.com/sandgate/sandgate/gateway/pool"
	"github.com/sandgate/sandgate/gateway/recovery"
	"github.com/sandgate/sandgate/gateway/state"
	"github.com/sandgate/sandgate/gateway/tenancy"
	"github.com/sandgate/sandgate/gateway/tenantplugins"
	"github.com/sandgate/sandgate/policy"
)

// Stable error codes: every {code, message} the gateway answers with carries one of these
// (or one of the leaf packages' codes listed at the end). Clients match on the strings;
// never change one. Each code goes with a Kind (errors.go), and gateway/api turns the
// kind into the HTTP status.

// Codes of the API itself: credentials, routing, and failures not the caller's.
const (
	CodeMissingAPIKey = fault.CodeMissingAPIKey
	CodeInvalidAPIKey = "INVALID_API_KEY"
	CodeForbidden     = fault.CodeForbidden
	CodeRouteNotFound = "ROUTE_NOT_FOUND"
	// CodeMethodNotAllowed: the route exists, not with this method.
	CodeMethodNotAllowed = "METHOD_NOT_ALLOWED"
	// CodeInternal: an unexpected failure; the message names the request id to look up.
	CodeInternal = fault.CodeInternal
	// CodeStoreUnavailable: Redis did not answer.
	CodeStoreUnavailable = fault.CodeStoreUnavailable
)

// Codes of sandboxes: their create, lifecycle and proxy.
const (
	CodeInvalidParameter  = fault.CodeInvalidParameter
	CodeInvalidMetadata   = "SANDBOX::INVALID_METADATA_LABEL"
	CodeInvalidExpiration = fault.CodeInvalidExpiration
	CodeNotFound          = fault.CodeNotFound
	CodeNotRunning        = "SANDBOX::NOT_RUNNING"
	CodeNotPaused         = "SANDBOX::NOT_PAUSED"
	// CodeConflict: the sandbox's record changed under a read-modify-write; retry.
	CodeConflict        = "SANDBOX::CONFLICT"
	CodeImageNotFound   = "SANDBOX::IMAGE_NOT_FOUND"
	CodeImagePullFailed = "SANDBOX::IMAGE_PULL_FAILED"
	// CodeImageBuilding: the image is one the gateway is still building in the background
	// (image_builds); retry once its build is done (GET /v1/images).
	CodeImageBuilding = "SANDBOX::IMAGE_BUILDING"
	// CodeImageRegistryRefused: the image's registry is an address of the platform
	// itself (loopback, link-local, private, the host's own) the operator did not list
	// in SANDGATE_IMAGE_REGISTRIES; refused before any pull.
	CodeImageRegistryRefused = "SANDBOX::IMAGE_REGISTRY_REFUSED"
	// CodeStartFailed: the sandbox's process exited, or did not become ready, at start.
	CodeStartFailed  = "SANDBOX::START_FAILED"
	CodeRuntimeError = fault.CodeRuntimeError
	// CodeUnsupported: the runtime cannot do what the request asks (pause on a runtime
	// without it, a create option it does not implement).
	CodeUnsupported = "SANDBOX::UNSUPPORTED"
	// CodeUpstreamError: the proxy could not reach the sandbox's port.
	CodeUpstreamError = "SANDBOX::UPSTREAM_UNREACHABLE"
	// CodeUnavailable answers a call to a sandbox that died: it is marked Failed, with
	// the reason in the message (a claimed pool member's caller claims another).
	CodeUnavailable = "SANDBOX::UNAVAILABLE"
	// CodeGatewayLost is the cause of a batch member given up because its gateways died.
	CodeGatewayLost = recovery.CodeGatewayLost
)

// Codes of a create's credentialProxy that cannot be honoured: silently ignoring it
// would hand the workload a sandbox without the protection its owner asked for.
const (
	// CodeCredentialProxyUnsupported: the runtime has no credential vault (egress
	// enforcement turned off, or a runtime without interception).
	CodeCredentialProxyUnsupported = "SANDBOX::CREDENTIAL_PROXY_UNSUPPORTED"
	// CodeCredentialProxyNeedsPolicy: the vault's interception lives in the egress
	// enforcer, which a sandbox gets with a networkPolicy (as in OpenSandbox).
	CodeCredentialProxyNeedsPolicy = "SANDBOX::CREDENTIAL_PROXY_REQUIRES_NETWORK_POLICY"
	// CodeCredentialProxyNotInPool: a claim cannot turn the proxy on for warm sandboxes
	// whose template started them without it.
	CodeCredentialProxyNotInPool = "SANDBOX::CREDENTIAL_PROXY_NOT_IN_POOL"
)

// Codes of a sandbox's egress API and credential vault (relayed to its enforcer; package
// gateway/egress produces all but CodeEnforcementMismatch).
const (
	// CodeEgressUnavailable: the sandbox's egress enforcer did not answer, or gave an
	// answer it did not sign.
	CodeEgressUnavailable = egress.CodeEgressUnavailable
	// CodeEnforcementMismatch: the sandbox's egress enforcer did not enforce the policy it
	// was given (signed GET /policy at start); the sandbox was not started.
	CodeEnforcementMismatch = "EGRESS::ENFORCEMENT_MISMATCH"
	// CodeEgressMethodNotAllowed: the egress API's /policy has no such operation (the
	// enforcer's own code for it).
	CodeEgressMethodNotAllowed = egress.CodeEgressMethodNotAllowed
	// CodeVaultInvalidRequest: a vault request the gateway cannot read (the enforcer's
	// own code for it).
	CodeVaultInvalidRequest = egress.CodeVaultInvalidRequest
)

// Codes of proxy access: credentials other than API keys (package gateway/access
// produces all but CodeOriginRefused).
const (
	CodeAccessDenied = access.CodeAccessDenied
	CodeLinkInvalid  = access.CodeLinkInvalid
	CodeLinkExpired  = access.CodeLinkExpired
	// CodeAccessRevoked answers a key-bound access header whose key is gone.
	CodeAccessRevoked = access.CodeAccessRevoked
	// CodeOriginRefused answers a session cookie sent from a page that is not the
	// console's (another site, a preview, an opaque origin).
	CodeOriginRefused = "ACCESS::ORIGIN_REFUSED"
)

// Codes of console sessions (package gateway/access).
const (
	CodeSessionInvalid = access.CodeSessionInvalid
	// CodeCSRFTokenInvalid: a change made with a session cookie lacks its X-CSRF-Token.
	CodeCSRFTokenInvalid = access.CodeCSRFTokenInvalid
)

// Codes of tenants, keys and their quotas.
const (
	CodeTenantNotFound = tenancy.CodeTenantNotFound
	CodeTenantInvalid  = tenancy.CodeTenantInvalid
	CodeKeyNotFound    = tenancy.CodeKeyNotFound
	// CodeQuotaRate: the tenant's token bucket of creates is empty.
	CodeQuotaRate = admission.CodeQuotaRate
	// CodeQuotaConcur: the tenant holds its limit of live sandboxes (the code the
	// admission policy uses for it too).
	CodeQuotaConcur = policy.CodeQuotaConcurrent
	// CodeQuotaSnapshots: the tenant keeps its limit of snapshots.
	CodeQuotaSnapshots = state.CodeQuotaSnapshots
)

// Codes of pools and batches.
const (
	CodePoolNotFound = pool.CodeNotFound
	CodePoolExists   = pool.CodeExists
	CodePoolInvalid  = pool.CodeInvalid
	// CodePoolEmpty: no warm sandbox was free, and none came within the pool wait.
	CodePoolEmpty     = pool.CodeEmpty
	CodeBatchNotFound = batch.CodeNotFound
)

// Codes of snapshots.
const (
	CodeSnapshotUnsupported = state.CodeSnapshotUnsupported
	CodeSnapshotNotFound    = state.CodeSnapshotNotFound
	// CodeSnapshotNotReady: a create from a snapshot still being taken (or failed).
	CodeSnapshotNotReady = state.CodeSnapshotNotReady
	// CodeSnapshotInUse: a delete of a snapshot that live sandboxes were created from.
	CodeSnapshotInUse   = state.CodeSnapshotInUse
	CodeSnapshotInvalid = state.CodeSnapshotInvalid
)

// Codes of volumes.
const (
	CodeVolumeInvalid      = state.CodeVolumeInvalid
	CodeVolumeUnsupported  = state.CodeVolumeUnsupported
	CodeVolumeHostNotFound = state.CodeVolumeHostNotFound
	// CodeVolumeHostChanged: a host volume's path led elsewhere when it was mounted than
	// when it was judged (a symlink appeared on its way); nothing was mounted.
	CodeVolumeHostChanged = state.CodeVolumeHostChanged
	CodeVolumeNotFound    = state.CodeVolumeNotFound
	// CodeVolumeExists: a named volume made by name that the tenant has already;
	// CodeVolumeInUse: a named volume removed while a sandbox mounts it.
	CodeVolumeExists = state.CodeVolumeExists
	CodeVolumeInUse  = state.CodeVolumeInUse
)

// Codes of the policy and plugin administration.
const (
	// CodePolicyInvalid reports Rego that does not parse or compile.
	CodePolicyInvalid = policyadmin.CodePolicyInvalid
	// CodePluginsDisabled answers plugin routes of a gateway built without a plugin host.
	CodePluginsDisabled = tenantplugins.CodeDisabled
)

// The leaf packages declare the codes they produce, and the core passes them on as they
// are:
//
//   - policy/decision.go: policy decisions (POLICY::DENIED, POLICY::NOT_FOUND,
//     POLICY::INVALID_ACTION, POLICY::TENANT_SUSPENDED, POLICY::ROLE_ESCALATION,
//     POLICY::EVALUATION_FAILED), admission (ADMISSION::*, QUOTA::CONCURRENT_SANDBOXES,
//     QUOTA::CPU, QUOTA::MEMORY, QUOTA::TIMEOUT, QUOTA::BATCH_SIZE) and egress input
//     (EGRESS::INVALID_POLICY); a Rego policy may add codes of its own. The kind of each
//     is policy.Decision.Outcome's (see decisionError).
//   - policy/vault.go: VAULT::POLICY_DENIED.
//   - plugins/errors.go: PLUGIN::* (see gateway/tenantplugins' pluginError for their kinds).
//   - sandbox-agent/egress (EGRESS::*, VAULT::*) and sandbox-agent/agent: the codes of
//     the enforcer's and the agent's own answers, which the gateway relays unchanged.
