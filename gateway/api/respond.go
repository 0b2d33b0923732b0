package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/store"
)

// errorBody is the one error shape every response uses.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError is the one place where errors become HTTP statuses and codes.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	if e, ok := gateway.AsError(err); ok {
		if e.Status >= 500 {
			slog.Error("request failed", "code", e.Code, "err", e, "path", r.URL.Path, "request_id", r.Header.Get("X-Request-ID"))
		}
		writeJSON(w, e.Status, errorBody{Code: e.Code, Message: e.Message})
		return
	}
	switch {
	case errors.Is(err, store.ErrUnavailable):
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Code: gateway.CodeStoreUnavailable, Message: "the state store (Redis) is unreachable; retry shortly"})
	case errors.Is(err, store.ErrNotFound):
		writeJSON(w, http.StatusNotFound, errorBody{Code: gateway.CodeNotFound, Message: "not found"})
	case errors.Is(err, store.ErrConflict):
		writeJSON(w, http.StatusConflict, errorBody{Code: "SANDBOX::CONFLICT", Message: "the sandbox changed concurrently; retry"})
	default:
		slog.Error("request failed", "err", err, "path", r.URL.Path, "request_id", r.Header.Get("X-Request-ID"))
		writeJSON(w, http.StatusInternalServerError, errorBody{Code: gateway.CodeInternal, Message: "internal error (request " + r.Header.Get("X-Request-ID") + ")"})
	}
}

// maxBodyBytes bounds JSON request bodies.
const maxBodyBytes = 1 << 20

// decodeJSON reads a JSON body into v, turning every failure into a precise 400.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxBodyBytes)
	dec := json.NewDecoder(body)
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return gateway.Errorf(400, gateway.CodeInvalidParameter, "the body must hold exactly one JSON value")
	}
	return nil
}

func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, io.EOF):
		return gateway.Errorf(400, gateway.CodeInvalidParameter, "the request body is empty; a JSON object is required")
	case errors.As(err, &syn):
		return gateway.Errorf(400, gateway.CodeInvalidParameter, "malformed JSON at byte %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "the body"
		}
		return gateway.Errorf(400, gateway.CodeInvalidParameter, "%s: expected %s, got JSON %s", field, jsonKind(typ.Type.String()), typ.Value)
	case errors.As(err, &tooBig):
		return gateway.Errorf(http.StatusRequestEntityTooLarge, gateway.CodeInvalidParameter, "the request body exceeds %d bytes", tooBig.Limit)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return gateway.Errorf(400, gateway.CodeInvalidParameter, "malformed JSON: the body ends too early")
	}
	return gateway.Errorf(400, gateway.CodeInvalidParameter, "invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

func jsonKind(goType string) string {
	switch {
	case strings.HasPrefix(goType, "map["), strings.HasPrefix(goType, "*struct"), strings.HasPrefix(goType, "struct"), strings.Contains(goType, "Spec"):
		return "an object"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.Contains(goType, "int"), strings.Contains(goType, "float"):
		return "a number"
	case strings.Contains(goType, "string"):
		return "a string"
	case strings.Contains(goType, "bool"):
		return "a boolean"
	}
	return fmt.Sprintf("a %s", goType)
}
