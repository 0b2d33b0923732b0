package gateway

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
)

// TestErrorOf: what the core tells gateway/api about an error: its own *Error through any
// wrapping, the store's sentinels as the kinds they stand for, anything else unclassified.
func TestErrorOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		kind Kind // "" = unclassified
		code string
	}{
		{"an *Error", notFound("x"), KindNotFound, CodeNotFound},
		{"a wrapped *Error", fmt.Errorf("claim: %w", Errorf(KindQuota, CodeQuotaRate, "slow down")), KindQuota, CodeQuotaRate},
		{"Redis unreachable", fmt.Errorf("list: %w", store.ErrUnavailable), KindUnavailable, CodeStoreUnavailable},
		{"a record gone", store.ErrNotFound, KindNotFound, CodeNotFound},
		{"a concurrent change", store.ErrConflict, KindConflict, CodeConflict},
		{"an *Error wins over the store's sentinel it wraps", &Error{Kind: KindUpstream, Code: CodeEgressUnavailable, Message: "no answer", Cause: store.ErrUnavailable}, KindUpstream, CodeEgressUnavailable},
		{"anything else", errors.New("boom"), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, ok := ErrorOf(tt.err)
			if tt.kind == "" {
				if ok {
					t.Fatalf("ErrorOf(%v) = %+v, want unclassified", tt.err, e)
				}
				return
			}
			if !ok || e.Kind != tt.kind || e.Code != tt.code || e.Message == "" {
				t.Fatalf("ErrorOf(%v) = %+v, %v; want %s %s with a message", tt.err, e, ok, tt.kind, tt.code)
			}
		})
	}
}

// TestDecisionError: a policy denial keeps the policy's code and message, and its kind
// follows the decision's outcome.
func TestDecisionError(t *testing.T) {
	tests := []struct {
		code string
		want Kind
	}{
		{policy.CodeDenied, KindForbidden},
		{policy.CodeEvaluationFailed, KindForbidden},
		{policy.CodeNotFound, KindNotFound},
		{policy.CodeQuotaCPU, KindQuota},
		{policy.CodeInvalidEgress, KindInvalid},
		{"CUSTOM::OPERATOR_RULE", KindForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			e := decisionError(policy.Decision{Code: tt.code, Message: "because"})
			if e.Kind != tt.want || e.Code != tt.code || e.Message != "because" {
				t.Fatalf("decisionError(%s) = %+v, want kind %s", tt.code, e, tt.want)
			}
		})
	}
}

// TestRuntimeCreateErrorImages: a refused registry is a 403 that names the setting
// allowing it; a failed pull answers the runtime's reason only; a foreign snapshot
// (reported by the runtime as a missing image) answers as any missing image does.
func TestRuntimeCreateErrorImages(t *testing.T) {
	tests := []struct {
		name string
		err  error
		kind Kind
		code string
		want string // in the message
	}{
		{"registry of the platform", fmt.Errorf("create: %w", &runtimes.RegistryRefusedError{Image: "127.0.0.1:5000/a:1", Registry: "127.0.0.1:5000"}),
			KindForbidden, CodeImageRegistryRefused, "SANDGATE_IMAGE_REGISTRIES"},
		{"registry refused the pull", &runtimes.PullError{Image: "r.example/a:1", Reason: "not found: manifest unknown", Denied: true},
			KindInvalid, CodeImagePullFailed, ": not found: manifest unknown"},
		{"registry unreachable", &runtimes.PullError{Image: "r.example/a:1", Reason: "unreachable", Denied: false},
			KindUpstream, CodeImagePullFailed, ": unreachable"},
		{"missing or another tenant's", fmt.Errorf("image %q is not present on the engine: %w", "b2", runtimes.ErrImageNotFound),
			KindInvalid, CodeImageNotFound, `image "b2" is not present`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			image := "b2"
			var rr *runtimes.RegistryRefusedError
			var pe *runtimes.PullError
			if errors.As(tt.err, &rr) {
				image = rr.Image
			} else if errors.As(tt.err, &pe) {
				image = pe.Image
			}
			e, ok := ErrorOf(runtimeCreateError(image, tt.err))
			if !ok || e.Kind != tt.kind || e.Code != tt.code || !strings.Contains(e.Message, tt.want) {
				t.Fatalf("runtimeCreateError(%v) = %+v; want %s %s with %q", tt.err, e, tt.kind, tt.code, tt.want)
			}
		})
	}
}
