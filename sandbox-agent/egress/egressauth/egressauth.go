// Package egressauth signs the gateway's requests to a sandbox's egress enforcer and the
// enforcer's answers, with the per-sandbox enforcer token as the HMAC key: the
// signedhttp scheme "Egress" (see package signedhttp for why signatures and not the
// token). The enforcer's API listens in the sandbox's network namespace, which the
// workload shares: while the enforcer restarts, a hostile workload can bind port 18080
// and read whatever the gateway sends there, and must not be believed.
//
// The package is stdlib only, and shared by both ends so that they cannot drift.
package egressauth

import (
	"net/http"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/signedhttp"
)

// MaxSkew is how far a request's timestamp may be from the enforcer's clock.
const MaxSkew = 2 * time.Minute

// scheme is the enforcer's signing scheme.
var scheme = signedhttp.NewScheme("Egress", MaxSkew)

// Headers of a signed request and of a signed response.
var (
	HeaderTimestamp = scheme.HeaderTimestamp // Unix milliseconds
	HeaderNonce     = scheme.HeaderNonce     // 32 hex digits, random
	HeaderSignature = scheme.HeaderSignature // hex HMAC-SHA256 of the request
	// HeaderResponseSignature is the enforcer's HMAC over the request's nonce, the
	// status and the body it answers with.
	HeaderResponseSignature = scheme.HeaderResponseSignature
)

// Errors a verification returns; their text is safe to show to the caller.
var (
	ErrMissing  = signedhttp.ErrMissing
	ErrStale    = signedhttp.ErrStale
	ErrBadSig   = signedhttp.ErrBadSig
	ErrReplayed = signedhttp.ErrReplayed
	ErrBusy     = signedhttp.ErrBusy
)

// Sign sets the signature headers of r, whose body is body (nil for none), and returns
// the nonce the answer must be verified against.
func Sign(r *http.Request, key string, body []byte, now time.Time) string {
	return scheme.Sign(r, key, body, now)
}

// SignResponse returns the value of HeaderResponseSignature for an answer to the request
// with the given nonce.
func SignResponse(key, nonce string, status int, body []byte) string {
	return scheme.SignResponse(key, nonce, status, body)
}

// VerifyResponse reports whether sig is the enforcer's signature of this answer.
func VerifyResponse(key, nonce string, status int, body []byte, sig string) bool {
	return scheme.VerifyResponse(key, nonce, status, body, sig)
}

// Verifier checks signed requests at the enforcer.
type Verifier = signedhttp.Verifier

// maxNonces bounds the nonces the enforcer remembers (its API is called rarely).
const maxNonces = 100000

// NewVerifier returns a verifier for key that accepts requests signed at or after
// notBefore (the enforcer's start).
func NewVerifier(key string, notBefore time.Time) *Verifier {
	return scheme.NewVerifier(key, notBefore, maxNonces)
}
