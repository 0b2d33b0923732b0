package sandgate

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Error is an error answer of the gateway or of a sandbox's agent.
type Error struct {
	Status    int    // HTTP status
	Code      string // stable code, e.g. "SANDBOX::NOT_FOUND"
	Message   string // human-readable message from the server
	RequestID string // the X-Request-ID of the answer, for the operator's logs
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s", e.Code, e.Message)
	if e.RequestID != "" {
		s += " (request " + e.RequestID + ")"
	}
	return s
}

// Is matches sentinel errors by code: errors.Is(err, sandgate.ErrNotFound).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code != "" && t.Code == e.Code && (t.Status == 0 || t.Status == e.Status)
}

// Sentinel errors, one per stable code a program may want to branch on.
var (
	ErrNotFound          = &Error{Code: "SANDBOX::NOT_FOUND"}
	ErrNotRunning        = &Error{Code: "SANDBOX::NOT_RUNNING"}
	ErrNotPaused         = &Error{Code: "SANDBOX::NOT_PAUSED"}
	ErrInvalidParameter  = &Error{Code: "SANDBOX::INVALID_PARAMETER"}
	ErrInvalidExpiration = &Error{Code: "SANDBOX::INVALID_EXPIRATION"}
	ErrImageNotFound     = &Error{Code: "SANDBOX::IMAGE_NOT_FOUND"}
	ErrMissingAPIKey     = &Error{Code: "MISSING_API_KEY"}
	ErrInvalidAPIKey     = &Error{Code: "INVALID_API_KEY"}
	ErrDenied            = &Error{Code: "POLICY::DENIED"}
	ErrPolicyNotFound    = &Error{Code: "POLICY::NOT_FOUND"}
	ErrStoreUnavailable  = &Error{Code: "STORE::UNAVAILABLE"}
	ErrUnreachable       = &Error{Code: "SANDBOX::UPSTREAM_UNREACHABLE"}

	ErrSnapshotNotFound    = &Error{Code: "SNAPSHOT::NOT_FOUND"}
	ErrSnapshotNotReady    = &Error{Code: "SNAPSHOT::NOT_READY"}
	ErrSnapshotInUse       = &Error{Code: "SNAPSHOT::IN_USE"}
	ErrSnapshotInvalid     = &Error{Code: "SNAPSHOT::INVALID_PARAMETER"}
	ErrSnapshotUnsupported = &Error{Code: "SNAPSHOT::UNSUPPORTED"}

	ErrVolumeNotFound         = &Error{Code: "VOLUME::NOT_FOUND"}
	ErrVolumeInvalid          = &Error{Code: "VOLUME::INVALID_PARAMETER"}
	ErrVolumeUnsupported      = &Error{Code: "VOLUME::UNSUPPORTED"}
	ErrVolumeHostPathNotFound = &Error{Code: "VOLUME::HOST_PATH_NOT_FOUND"}
	ErrVolumeHostNotAllowed   = &Error{Code: "VOLUME::HOST_NOT_ALLOWED"}

	ErrVaultNotFound          = &Error{Code: "VAULT::NOT_FOUND"}
	ErrVaultAlreadyExists     = &Error{Code: "VAULT::ALREADY_EXISTS"}
	ErrVaultInvalidRequest    = &Error{Code: "VAULT::INVALID_REQUEST"}
	ErrVaultRevisionConflict  = &Error{Code: "VAULT::REVISION_CONFLICT"}
	ErrVaultUnknownCredential = &Error{Code: "VAULT::UNKNOWN_CREDENTIAL"}
	ErrVaultProxyNotEnabled   = &Error{Code: "VAULT::PROXY_NOT_ENABLED"}
	ErrVaultHostNotAllowed    = &Error{Code: "VAULT::HOST_NOT_ALLOWED"}
	ErrVaultOverlapping       = &Error{Code: "VAULT::OVERLAPPING_BINDINGS"}
)

// errorFrom reads an error answer. Bodies that are not {code, message} (a proxy's page,
// the egress API's plain text) keep their text as the message under a code derived
// from the status.
func errorFrom(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-ID")}
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &body) == nil && body.Code != "" {
		e.Code, e.Message = body.Code, body.Message
		return e
	}
	e.Code = "HTTP_" + strings.ToUpper(strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "_"))
	e.Message = strings.TrimSpace(string(data))
	if e.Message == "" {
		e.Message = resp.Status
	}
	return e
}
