package gateway

import (
	"errors"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
)

// Error is a failure a user can act on: what kind of failure it is, a stable namespaced
// code (codes.go), and a message safe to show. Internal causes stay in Cause for the logs.
// The core never picks an HTTP status: gateway/api maps the Kind to one, in one place.
// It is package fault's, which the feature packages report their refusals with.
type Error = fault.Error

// Kind is what went wrong, as a caller would act on it (fault.Kind).
type Kind = fault.Kind

// The kinds of failure (their meanings and statuses are in package fault).
const (
	KindInvalid          = fault.KindInvalid
	KindUnauthenticated  = fault.KindUnauthenticated
	KindForbidden        = fault.KindForbidden
	KindNotFound         = fault.KindNotFound
	KindMethodNotAllowed = fault.KindMethodNotAllowed
	KindConflict         = fault.KindConflict
	KindTooLarge         = fault.KindTooLarge
	KindUnsupportedMedia = fault.KindUnsupportedMedia
	KindUnprocessable    = fault.KindUnprocessable
	KindQuota            = fault.KindQuota
	KindInternal         = fault.KindInternal
	KindUnsupported      = fault.KindUnsupported
	KindUpstream         = fault.KindUpstream
	KindUnavailable      = fault.KindUnavailable
	KindTimeout          = fault.KindTimeout
)

// Kinds lists every Kind, for the test that each has a status.
var Kinds = fault.Kinds

// Errorf builds an *Error.
func Errorf(kind Kind, code, format string, args ...any) *Error {
	return fault.Errorf(kind, code, format, args...)
}

func invalid(format string, args ...any) *Error {
	return Errorf(KindInvalid, CodeInvalidParameter, format, args...)
}

func notFound(id string) *Error { return fault.NotFound(id) }

// AsError extracts an *Error from err's chain.
func AsError(err error) (*Error, bool) { return fault.AsError(err) }

// ErrorOf is what err says to a caller: the *Error in its chain, else the store's
// sentinels (Redis unreachable, a record gone, a concurrent change) as the *Error they
// stand for; ok is false for any other error, an internal failure whose cause is not
// for the caller.
func ErrorOf(err error) (e *Error, ok bool) {
	if e, ok := AsError(err); ok {
		return e, true
	}
	switch {
	case errors.Is(err, store.ErrUnavailable):
		return &Error{Kind: KindUnavailable, Code: CodeStoreUnavailable, Message: "the state store (Redis) is unreachable; retry shortly", Cause: err}, true
	case errors.Is(err, store.ErrNotFound):
		return &Error{Kind: KindNotFound, Code: CodeNotFound, Message: "not found", Cause: err}, true
	case errors.Is(err, store.ErrConflict):
		return &Error{Kind: KindConflict, Code: CodeConflict, Message: "the sandbox changed concurrently; retry", Cause: err}, true
	}
	return nil, false
}

// decisionError is the *Error of a policy denial: its code and message as the policy gave
// them, its kind from the decision's outcome. The cause (a policy that failed to
// evaluate) stays for the logs.
func decisionError(d policy.Decision) *Error {
	return &Error{Kind: outcomeKind(d.Outcome()), Code: d.Code, Message: d.Message, Cause: d.Cause}
}

func outcomeKind(o policy.Outcome) Kind {
	switch o {
	case policy.Hidden:
		return KindNotFound
	case policy.Limited:
		return KindQuota
	case policy.Invalid:
		return KindInvalid
	}
	return KindForbidden
}
