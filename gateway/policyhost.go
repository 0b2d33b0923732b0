package gateway

import (
	"github.com/sandgate/sandgate/gateway/policyadmin"
	"github.com/sandgate/sandgate/gateway/store"
)

// The policy feature's vocabulary, named here for the core and its callers (package
// gateway/policyadmin).
type (
	// PolicyModule is one Rego source as the policy API shows it, PolicyState the body
	// of GET /v1/policy, PolicyError one located problem of a policy.
	PolicyModule = policyadmin.Module
	PolicyState  = policyadmin.State
	PolicyError  = policyadmin.Problem
	// PolicyEvalResult is the body of POST /v1/policy/eval, PolicyTestReport of POST
	// /v1/policy/test.
	PolicyEvalResult = policyadmin.EvalResult
	PolicyTestReport = policyadmin.TestReport
)

// OriginOverride marks modules stored through the policy API.
const OriginOverride = policyadmin.OriginOverride

// ConsoleActions are the actions the console asks about to show or hide its controls.
var ConsoleActions = policyadmin.ConsoleActions

// PolicyErrors turns a compile failure into located errors; ok is false for any other error.
func PolicyErrors(err error) ([]PolicyError, bool) { return policyadmin.Problems(err) }

// PolicyAdmin is the feature of tenants' Rego policy management: the policy API and what
// the console may show a caller. gateway/api calls it for /v1/policy and the session's
// allowed actions.
func (s *Service) PolicyAdmin() *policyadmin.Manager { return s.policyAdmin }

// policyHost is the core as the policy feature sees it (policyadmin.Host).
type policyHost struct{ s *Service }

// QueueEvent hands ev to the batched event writer (package gateway/eventlog).
func (h policyHost) QueueEvent(ev store.Event) { h.s.eventLog.Queue(ev) }

var _ policyadmin.Host = policyHost{}
