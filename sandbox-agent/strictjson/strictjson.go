// Package strictjson decodes the request bodies that the gateway judges and the egress
// enforcer obeys (egress policies and credential vault changes). Both sides decode with
// this one function, so that a body one side reads the other reads the same way and a
// body one side refuses the other refuses too: a check in the gateway can never be
// skipped by a body that only the enforcer understands. It is a leaf: it imports
// nothing of sandgate, so that sandbox-agent and the gateway may both use it.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrTrailingData is the error of a body with anything but white space after its JSON
// value: a second value, or a stray closing bracket.
var ErrTrailingData = errors.New("trailing data after the JSON value")

// Decode decodes data, which must hold exactly one JSON value, into v. Object fields v
// does not declare are refused, and so is anything after the value but white space
// (ErrTrailingData). json.Decoder.More alone does not do that: it reports false before
// a stray '}' or ']', so "{...}}" would pass.
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return ErrTrailingData
	}
	return nil
}

// Reason describes an error of Decode without echoing the body (a vault body holds
// credential values): the position of a syntax error, the field of a type error, the
// name of an unknown field.
func Reason(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.Is(err, ErrTrailingData):
		return err.Error()
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be a %s", te.Field, te.Type)
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d", se.Offset)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return err.Error()
	case errors.Is(err, io.EOF):
		return "empty body"
	}
	return "malformed JSON"
}
