// Package fault is the failure a caller can act on, as the gateway's core and its
// feature packages report it: a Kind (whose fault, what a retry would do), a stable
// code and a message safe to show, with the internal cause kept apart for the logs.
// Package gateway re-exports it (gateway.Error, gateway.Kind, the kinds) and keeps the
// list of every code (gateway/codes.go); gateway/api alone maps a kind to an HTTP
// status. It is a leaf: it imports nothing of sandgate, so that a feature package
// reports its refusals in the core's terms without importing the core.
package fault

import (
	"errors"
	"fmt"
	"time"
)

// Error is a failure a user can act on: what kind of failure it is, a stable namespaced
// code, and a message safe to show. Internal causes stay in Cause for the logs.
type Error struct {
	Kind    Kind
	Code    string
	Message string
	Cause   error
	// RetryAfter, when set, is how long a caller should wait before trying again
	// (an HTTP answer's Retry-After).
	RetryAfter time.Duration
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

// Codes that every part of the core answers with: credentials, a sandbox that does not
// exist or must not be seen, and a request's input the core refuses. gateway/codes.go
// lists them with the rest.
const (
	CodeMissingAPIKey    = "MISSING_API_KEY"
	CodeForbidden        = "FORBIDDEN"
	CodeNotFound         = "SANDBOX::NOT_FOUND"
	CodeInvalidParameter = "SANDBOX::INVALID_PARAMETER"
	// CodeInvalidExpiration: a lifetime (a create's timeout, a renewal's expiresAt) the
	// core refuses.
	CodeInvalidExpiration = "SANDBOX::INVALID_EXPIRATION"
	// CodeInternal: an unexpected failure; the message names the request id to look up.
	CodeInternal = "INTERNAL_ERROR"
	// CodeStoreUnavailable: Redis did not answer.
	CodeStoreUnavailable = "STORE::UNAVAILABLE"
	// CodeRuntimeError: the runtime failed to do what was asked of it.
	CodeRuntimeError = "SANDBOX::RUNTIME_ERROR"
)

// Errorf builds an *Error.
func Errorf(kind Kind, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Message: fmt.Sprintf(format, args...)}
}

// NotFound is the answer about a sandbox that does not exist, or that the caller must
// not learn exists.
func NotFound(id string) *Error {
	return Errorf(KindNotFound, CodeNotFound, "sandbox %s not found", id)
}

// AsError extracts an *Error from err's chain.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
