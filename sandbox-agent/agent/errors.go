package agent

import (
	"errors"
	"io/fs"
	"net/http"
	"syscall"
)

// Stable error codes of the agent API. Clients match on these, never on messages.
const (
	CodeInvalidRequest   = "INVALID_REQUEST_BODY"
	CodeMissingQuery     = "MISSING_QUERY"
	CodeUnauthorized     = "UNAUTHORIZED"
	CodeNotFound         = "NOT_FOUND"
	CodeFileNotFound     = "FILE_NOT_FOUND"
	CodePermissionDenied = "PERMISSION_DENIED"
	CodeFileExists       = "FILE_ALREADY_EXISTS"
	CodeNotADirectory    = "NOT_A_DIRECTORY"
	CodeIsADirectory     = "IS_A_DIRECTORY"
	CodeRangeNotSatisfy  = "RANGE_NOT_SATISFIABLE"
	CodeRuntime          = "RUNTIME_ERROR"
	CodeNotSupported     = "NOT_SUPPORTED"
	CodeContextNotFound  = "CONTEXT_NOT_FOUND"
	CodeConflict         = "CONFLICT"
	CodeBadGateway       = "BAD_GATEWAY"
)

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, errorBody{Code: code, Message: message})
}

// requiredQuery answers the query parameter name, or refuses the request (400) when it
// is missing or empty.
func requiredQuery(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	v := r.URL.Query().Get(name)
	if v == "" {
		writeError(w, http.StatusBadRequest, CodeMissingQuery, "missing query parameter "+name)
	}
	return v, v != ""
}

// writeFSError maps a filesystem error to its status and stable code.
func writeFSError(w http.ResponseWriter, err error) {
	status, code := fsErrorStatus(err)
	writeError(w, status, code, err.Error())
}

func fsErrorStatus(err error) (int, string) {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound, CodeFileNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return http.StatusForbidden, CodePermissionDenied
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTEMPTY):
		return http.StatusConflict, CodeFileExists
	case errors.Is(err, syscall.ENOTDIR):
		return http.StatusBadRequest, CodeNotADirectory
	case errors.Is(err, syscall.EISDIR):
		return http.StatusBadRequest, CodeIsADirectory
	case errors.Is(err, errBadRequest):
		return http.StatusBadRequest, CodeInvalidRequest
	default:
		return http.StatusInternalServerError, CodeRuntime
	}
}

// errBadRequest marks a caller mistake found deep in a file operation.
var errBadRequest = errors.New("invalid request")
