// Package linksign makes and checks the tokens of signed preview links and of the
// preview session cookies they are exchanged for: "kid.exp.mac", an HMAC-SHA256 bound to
// a purpose ("link", "cookie"), a sandbox, a port and an expiry, under one of several
// keys named by kid so that keys can rotate. It holds no keys and no state: the core
// keeps the keys (in the store) and maps these errors to its codes.
package linksign

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Errors of Verify.
var (
	// ErrMalformed is a token that is not kid.exp.mac.
	ErrMalformed = errors.New("the link token is malformed")
	// ErrInvalid is a token of an unknown key, or whose MAC does not match.
	ErrInvalid = errors.New("the link is not valid for this sandbox and port (or its signing key was rotated out)")
	// ErrExpired is a valid token past its expiry (wrapped in an *ExpiredError).
	ErrExpired = errors.New("the link expired")
)

// ExpiredError is a valid token past its expiry.
type ExpiredError struct{ At time.Time }

func (e *ExpiredError) Error() string {
	return "the link expired at " + e.At.UTC().Format(time.RFC3339)
}

// Unwrap makes errors.Is(err, ErrExpired) true.
func (e *ExpiredError) Unwrap() error { return ErrExpired }

func mac(key []byte, purpose, sandbox string, port int, exp int64) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s|%s|%d|%d", purpose, sandbox, port, exp)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Sign makes a token for purpose, sandbox and port, valid until exp (to the second),
// under key, named kid.
func Sign(kid string, key []byte, purpose, sandbox string, port int, exp time.Time) string {
	return fmt.Sprintf("%s.%d.%s", kid, exp.Unix(), mac(key, purpose, sandbox, port, exp.Unix()))
}

// Verify checks a token made by Sign against keys (kid → key) at now and returns its expiry.
func Verify(keys map[string][]byte, purpose, token, sandbox string, port int, now time.Time) (time.Time, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, ErrMalformed
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return time.Time{}, ErrMalformed
	}
	key, ok := keys[parts[0]]
	if !ok || !hmac.Equal([]byte(parts[2]), []byte(mac(key, purpose, sandbox, port, exp))) {
		return time.Time{}, ErrInvalid
	}
	expires := time.Unix(exp, 0)
	if now.After(expires) {
		return time.Time{}, &ExpiredError{At: expires}
	}
	return expires, nil
}

// WellFormed reports whether token has the shape of a token, before any key is read.
func WellFormed(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	_, err := strconv.ParseInt(parts[1], 10, 64)
	return err == nil
}
