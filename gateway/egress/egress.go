// Package egress is the gateway's feature of what sandboxes may reach on the network and
// of the credentials their enforcer holds for them. Every network policy a sandbox gets,
// at create, at a pool claim or through its egress API (port 18080), is first turned
// into the effective policy by the Rego egress policy, and only that result reaches the
// sandbox's egress enforcer; the platform's deny targets go to the enforcer at its start
// too, so that no later change, even one made straight to the enforcer, can undo them
// (policy.go). A Manager owns: the policy of a new sandbox, of a claim and of a pool's
// template, and the host's own addresses the platform denies (policy.go); the signed
// reads and changes of a sandbox's policy through its egress API, typed as PolicyChange
// and answered as the enforcer's Answer (change.go); the restore of an enforcer that
// died (enforcer.go); and the credential vault: requests to it typed as VaultRequest,
// their bindings judged by the Rego vault policy, its audit records drained into the
// tenant's audit stream (vault.go). It reaches the core only through Host (host.go): the
// event pipeline, the audit stream, the route cache, the reaper's judgement and the
// count of background errors; the store, the runtime, the policy engine, the agent
// client and the metrics it is given directly. It imports neither package gateway nor
// net/http: its calls to enforcers are agentclient's signed, typed methods, and
// gateway/api turns HTTP requests into PolicyChange and VaultRequest and an Answer back
// into a response.
package egress

import (
	"log/slog"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/internal/spawn"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
)

// Codes of a sandbox's egress API and credential vault (gateway/codes.go lists them with
// the rest).
const (
	// CodeEgressUnavailable: the sandbox's egress enforcer did not answer, or gave an
	// answer it did not sign.
	CodeEgressUnavailable = "EGRESS::UNAVAILABLE"
	// CodeEgressMethodNotAllowed: the egress API's /policy has no such operation (the
	// enforcer's own code for it).
	CodeEgressMethodNotAllowed = "EGRESS::METHOD_NOT_ALLOWED"
	// CodeVaultInvalidRequest: a vault request the gateway cannot read (the enforcer's
	// own code for it).
	CodeVaultInvalidRequest = "VAULT::INVALID_REQUEST"
)

// ReasonEnforcerLost is the Failed reason of a sandbox whose enforcer could not be restored.
const ReasonEnforcerLost = "ENFORCER_LOST"

// Record states the feature reads and writes; they are the core's own (package gateway
// defines the same values).
const (
	stateRunning = "Running"
	stateFailed  = "Failed"
)

// callTimeout bounds one signed call to an enforcer (its policy and vault API).
const callTimeout = 10 * time.Second

// Manager owns this gateway's part of egress: the enforcer restores and vault audit
// drains under way, and the locks that order changes to one sandbox's policy. It is
// safe for concurrent use.
type Manager struct {
	store   *store.Store
	runtime runtimes.Runtime
	policy  *policy.Engine
	agents  *agentclient.Client
	metrics *metrics.Set
	host    Host
	log     *slog.Logger

	// restores are the enforcer restores under way, with their failed attempts.
	restores enforcerRestores
	// drains are the vault audit drains under way.
	drains inFlight
	// policyLocks serialize the read-modify-write of one sandbox's policy within this
	// gateway (striped, so that no per-sandbox entry outlives its sandbox).
	policyLocks [64]sync.Mutex

	// group runs the enforcer restores and the vault audit drains.
	group spawn.Group
}

// New builds a Manager. pol decides every policy and binding; it must not be nil.
func New(st *store.Store, rt runtimes.Runtime, pol *policy.Engine, agents *agentclient.Client, m *metrics.Set, host Host, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{store: st, runtime: rt, policy: pol, agents: agents, metrics: m, host: host, log: log}
}

// Stop waits for the restores and drains under way and starts no more.
func (m *Manager) Stop() { m.group.Stop() }

// Enforces reports whether the runtime puts an egress enforcer beside each sandbox.
func (m *Manager) Enforces() bool {
	e, ok := m.runtime.(runtimes.EgressEnforcer)
	return ok && e.EnforcesEgress()
}

// RunsCredentialProxy reports whether the runtime can run the credential vault.
func (m *Manager) RunsCredentialProxy() bool {
	r, ok := m.runtime.(runtimes.CredentialProxyRuntime)
	return ok && m.Enforces() && r.RunsCredentialProxy()
}

// Answer is an enforcer's answer to a request of its egress or vault API, relayed to the
// caller as the enforcer gave it. Status is the enforcer's own, part of the API the
// gateway relays (never one the gateway picks for its own errors, which are
// *fault.Error); Body is its JSON document, empty when it has none.
type Answer struct {
	Status int
	Body   []byte
}

// answerOf is the relayed form of the enforcer's answer a.
func answerOf(a agentclient.Answer) *Answer { return &Answer{Status: a.Status, Body: a.Body} }

// inFlight holds the ids some work is under way for, so that it is not started twice.
type inFlight struct{ ids sync.Map }

// begin claims id; false when work on it is already under way.
func (f *inFlight) begin(id string) bool {
	_, busy := f.ids.LoadOrStore(id, true)
	return !busy
}

func (f *inFlight) end(id string) { f.ids.Delete(id) }

// decisionError is the error of a policy denial: its code and message as the policy
// gave them, its kind from the decision's outcome. The cause (a policy that failed to
// evaluate) stays for the logs.
func decisionError(d policy.Decision) *fault.Error {
	kind := fault.KindForbidden
	switch d.Outcome() {
	case policy.Hidden:
		kind = fault.KindNotFound
	case policy.Limited:
		kind = fault.KindQuota
	case policy.Invalid:
		kind = fault.KindInvalid
	}
	return &fault.Error{Kind: kind, Code: d.Code, Message: d.Message, Cause: d.Cause}
}

func invalid(format string, args ...any) *fault.Error {
	return fault.Errorf(fault.KindInvalid, fault.CodeInvalidParameter, format, args...)
}

func invalidEgress(format string, args ...any) *fault.Error {
	return fault.Errorf(fault.KindInvalid, policy.CodeInvalidEgress, format, args...)
}
