package gateway

import (
	"github.com/sandgate/sandgate/gateway/admission"
	"github.com/sandgate/sandgate/policy"
)

// admissionHost is the core as the admission feature sees it (admission.Host).
type admissionHost struct{ s *Service }

// Denied queues the denial for the audit stream and answers the decision's error.
func (h admissionHost) Denied(tenant, action string, d policy.Decision) error {
	h.s.logDecision(tenant, action, d)
	return decisionError(d)
}

var _ admission.Host = admissionHost{}
