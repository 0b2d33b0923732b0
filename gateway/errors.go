package gateway

import (
	"errors"
	"fmt"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
)

// Error is a failure a user can act on: what kind of failure it is, a stable namespaced
// code (codes.go), and a message safe to show. Internal causes stay in Cause for the logs.
// The core never picks an HTTP status: gateway/api maps the Kind to one, in one place.
type Error struct {
	Kind    Kind
	Code    string
	Message string
	Cause   error
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Cause)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Cause }

// Kind is what went wrong, as a caller would act on it. It is a string so that an HTTP
// status (an untyped integer constant) can never pass for one.
type Kind string

// The kinds of failure. Each names whose fault it is and what a retry would do; the
// comment gives the status gateway/api answers with.
const (
	// KindInvalid: the request is malformed or breaks a rule of its own fields (400).
	KindInvalid Kind = "invalid"
	// KindUnauthenticated: no credential, or one that is not valid (401).
	KindUnauthenticated Kind = "unauthenticated"
	// KindForbidden: the credential is valid but may not do this (403).
	KindForbidden Kind = "forbidden"
	// KindNotFound: no such thing, or another tenant's, whose existence must not leak (404).
	KindNotFound Kind = "not_found"
	// KindMethodNotAllowed: the route exists but not with this method (405).
	KindMethodNotAllowed Kind = "method_not_allowed"
	// KindConflict: the thing is in a state that refuses the change, or changed
	// concurrently (409).
	KindConflict Kind = "conflict"
	// KindTooLarge: the body or module exceeds a size limit (413).
	KindTooLarge Kind = "too_large"
	// KindUnsupportedMedia: the body is not of a content type the route reads (415).
	KindUnsupportedMedia Kind = "unsupported_media"
	// KindUnprocessable: well-formed input that cannot be carried out as asked: an
	// entrypoint that exits at start, a plugin that traps (422).
	KindUnprocessable Kind = "unprocessable"
	// KindQuota: a tenant's quota or rate limit refuses it; retry later or free some (429).
	KindQuota Kind = "quota"
	// KindInternal: the gateway or its runtime failed; not the caller's fault (500).
	KindInternal Kind = "internal"
	// KindUnsupported: this platform (its runtime) cannot do it at all (501).
	KindUnsupported Kind = "unsupported"
	// KindUpstream: something the gateway called (an enforcer, a registry, an agent) did
	// not answer or answered wrong (502).
	KindUpstream Kind = "upstream"
	// KindUnavailable: a dependency (Redis, the plugin host, a warm pool) cannot serve
	// now; a retry may succeed (503).
	KindUnavailable Kind = "unavailable"
	// KindTimeout: the work did not finish within its bound (504).
	KindTimeout Kind = "timeout"
)

// Kinds lists every Kind, for the test that each has a status.
var Kinds = []Kind{KindInvalid, KindUnauthenticated, KindForbidden, KindNotFound, KindMethodNotAllowed,
	KindConflict, KindTooLarge, KindUnsupportedMedia, KindUnprocessable, KindQuota, KindInternal,
	KindUnsupported, KindUpstream, KindUnavailable, KindTimeout}

// Errorf builds an *Error.
func Errorf(kind Kind, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Message: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) *Error {
	return Errorf(KindInvalid, CodeInvalidParameter, format, args...)
}

func notFound(id string) *Error {
	return Errorf(KindNotFound, CodeNotFound, "sandbox %s not found", id)
}

// AsError extracts an *Error from err's chain.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

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
