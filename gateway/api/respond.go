package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway"
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

// statusOf is the one place where the kind of an error becomes an HTTP status.
func statusOf(k gateway.Kind) int {
	switch k {
	case gateway.KindInvalid:
		return http.StatusBadRequest
	case gateway.KindUnauthenticated:
		return http.StatusUnauthorized
	case gateway.KindForbidden:
		return http.StatusForbidden
	case gateway.KindNotFound:
		return http.StatusNotFound
	case gateway.KindMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case gateway.KindConflict:
		return http.StatusConflict
	case gateway.KindTooLarge:
		return http.StatusRequestEntityTooLarge
	case gateway.KindUnsupportedMedia:
		return http.StatusUnsupportedMediaType
	case gateway.KindUnprocessable:
		return http.StatusUnprocessableEntity
	case gateway.KindQuota:
		return http.StatusTooManyRequests
	case gateway.KindUnsupported:
		return http.StatusNotImplemented
	case gateway.KindUpstream:
		return http.StatusBadGateway
	case gateway.KindUnavailable:
		return http.StatusServiceUnavailable
	case gateway.KindTimeout:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError // KindInternal, and a kind this switch lacks
}

// writeError answers err as {code, message} with the status of its kind (statusOf). An
// error the core did not classify is an internal one: the caller gets the request id,
// the log gets the cause. Every 5xx is logged with the request id and its cause; a 4xx,
// the caller's own mistake, is not. The log names the route pattern, never the path,
// which may hold a signed link's token.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	id := r.Header.Get(headerRequestID)
	e, ok := gateway.ErrorOf(err)
	if !ok {
		e = &gateway.Error{Kind: gateway.KindInternal, Code: gateway.CodeInternal, Message: "internal error (request " + id + ")", Cause: err}
	}
	status := statusOf(e.Kind)
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	if status >= 500 {
		h.log.Error("request failed", "request_id", id, "status", status, "code", e.Code, "method", r.Method, "route", r.Pattern, "err", err)
	}
	if m := e2bMarkOf(r); m.shape != 0 {
		status, body := e2bErrorAnswer(m, e)
		writeJSON(w, status, body)
		return
	}
	writeJSON(w, status, errorBody{Code: e.Code, Message: e.Message})
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
		return gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "the body must hold exactly one JSON value")
	}
	return nil
}

func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, io.EOF):
		return gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "the request body is empty; a JSON object is required")
	case errors.As(err, &syn):
		return gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "malformed JSON at byte %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "the body"
		}
		return gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "%s: expected %s, got JSON %s", field, jsonKind(typ.Type.String()), typ.Value)
	case errors.As(err, &tooBig):
		return gateway.Errorf(gateway.KindTooLarge, gateway.CodeInvalidParameter, "the request body exceeds %d bytes", tooBig.Limit)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "malformed JSON: the body ends too early")
	}
	return gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
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
