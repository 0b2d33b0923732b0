// Package agentproto holds the wire names shared by the in-sandbox agent, the egress
// enforcer and everything that calls them (the gateway, the runtimes, the tests): ports,
// credential headers, environment variables and the paths of sandgate's own routes. It
// is a leaf: it imports nothing, so that the agent and its callers agree on these names
// by construction instead of by copy.
package agentproto

// Ports inside every sandbox: the agent API and the egress enforcer's API.
const (
	AgentPort  = 44772
	EgressPort = 18080
)

// JupyterProbePort is where OpenSandbox's code-interpreter SDKs look, from inside the
// sandbox, for Jupyter before they call it ready (127.0.0.1:${JUPYTER_PORT:-44771}).
// EnvJupyterPort moves it.
const (
	JupyterProbePort = 44771
	EnvJupyterPort   = "JUPYTER_PORT"
)

// Credential headers. The SDKs send exactly these names (OpenSandbox's).
const (
	// HeaderAgentToken carries the agent's token on every agent request.
	HeaderAgentToken = "X-EXECD-ACCESS-TOKEN"
	// HeaderEgressToken is OpenSandbox's header for the egress API token. The enforcer
	// itself never accepts it (requests to it are signed, package egressauth); SDKs send
	// it to the gateway, which checks it there.
	HeaderEgressToken = "OPENSANDBOX-EGRESS-AUTH"
)

// Environment variables the agent and the enforcer read from their container; the agent
// removes them from every child's environment.
const (
	EnvAgentToken   = "SANDGATE_AGENT_TOKEN"
	EnvEgressToken  = "SANDGATE_EGRESS_TOKEN"
	EnvEgressPolicy = "SANDGATE_EGRESS_POLICY"
)

// The credential vault's trust files in a workload, written by the runtime into the
// agent's directory when the sandbox has the vault: VaultCAPath holds the sandbox's CA
// alone, VaultBundlePath the image's system roots plus it. The agent points the usual
// trust variables at them (VaultTrustEnv) for every process it starts while they exist.
const (
	VaultCAPath     = "/.sandgate/vault/ca.pem"
	VaultBundlePath = "/.sandgate/vault/ca-bundle.pem"
)

// VaultTrustEnv is the trust variables of a sandbox with the vault: OpenSSL (curl, git,
// Python's ssl, Ruby), Go and Python requests read the bundle; Node adds the CA to its
// own roots.
func VaultTrustEnv() map[string]string {
	return map[string]string{
		"SSL_CERT_FILE":       VaultBundlePath,
		"REQUESTS_CA_BUNDLE":  VaultBundlePath,
		"NODE_EXTRA_CA_CERTS": VaultCAPath,
	}
}

// Agent routes that callers other than a sandbox's user use: readiness and sandgate's
// warm-pool extensions (late-bound environment, deferred entrypoint).
const (
	PathPing       = "/ping"
	PathEnv        = "/sandgate/env"
	PathEntrypoint = "/sandgate/entrypoint"
	// PathFreeze and PathThaw stop and continue the sandbox's processes (all but the
	// agent): the pause of a runtime that cannot freeze a sandbox itself (Kubernetes).
	PathFreeze = "/sandgate/freeze"
	PathThaw   = "/sandgate/thaw"
	// PathMetrics is the agent's own resource reading, which the gateway samples.
	PathMetrics = "/metrics"
	// PathEnvdPrefix is where the agent serves E2B's envd API: the gateway sends the
	// E2B SDKs' calls for envd's port to this prefix plus their own path
	// (/envd/process.Process/Start, /envd/files, /envd/health), having checked their
	// X-Access-Token itself.
	PathEnvdPrefix = "/envd"
)

// Enforcer routes: the (signed) policy API and the unauthenticated health check.
const (
	PathPolicy  = "/policy"
	PathHealthz = "/healthz"
	// PathVaultAudit is sandgate's own route (not OpenSandbox's) from which the gateway
	// drains the vault's injection records (signed, as /policy).
	PathVaultAudit = "/sandgate/vault-audit"
)
