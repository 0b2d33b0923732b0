package gateway

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is a failure a user can act on: an HTTP status, a stable namespaced code and a
// message safe to show. Internal causes stay in Cause for the logs.
type Error struct {
	Status  int
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

// Stable error codes. Clients match on these strings; never change one.
const (
	CodeInvalidParameter  = "SANDBOX::INVALID_PARAMETER"
	CodeInvalidMetadata   = "SANDBOX::INVALID_METADATA_LABEL"
	CodeInvalidExpiration = "SANDBOX::INVALID_EXPIRATION"
	CodeNotFound          = "SANDBOX::NOT_FOUND"
	CodeNotRunning        = "SANDBOX::NOT_RUNNING"
	CodeNotPaused         = "SANDBOX::NOT_PAUSED"
	CodeImageNotFound     = "SANDBOX::IMAGE_NOT_FOUND"
	CodeImagePullFailed   = "SANDBOX::IMAGE_PULL_FAILED"
	CodeStartFailed       = "SANDBOX::START_FAILED"
	CodeRuntimeError      = "SANDBOX::RUNTIME_ERROR"
	CodeStoreUnavailable  = "STORE::UNAVAILABLE"
	CodeInternal          = "INTERNAL_ERROR"
	CodeMissingAPIKey     = "MISSING_API_KEY"
	CodeInvalidAPIKey     = "INVALID_API_KEY"
	CodeForbidden         = "FORBIDDEN"
	CodeRouteNotFound     = "ROUTE_NOT_FOUND"
	CodeMethodNotAllowed  = "METHOD_NOT_ALLOWED"
	CodeUpstreamError     = "SANDBOX::UPSTREAM_UNREACHABLE"
)

// Errorf builds an *Error.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) *Error {
	return Errorf(http.StatusBadRequest, CodeInvalidParameter, format, args...)
}

func notFound(id string) *Error {
	return Errorf(http.StatusNotFound, CodeNotFound, "sandbox %s not found", id)
}

// AsError extracts an *Error from err's chain.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
