// Package egressauth signs the gateway's requests to a sandbox's egress enforcer and the
// enforcer's answers, with the per-sandbox enforcer token as the HMAC key.
//
// Why signatures and not the token itself: the enforcer's API listens in the sandbox's
// network namespace, which the workload shares. While the enforcer restarts, a hostile
// workload can bind port 18080 and read whatever the gateway sends there. The gateway
// therefore never sends the token: each request carries a timestamp, a random nonce and
// an HMAC over method, path, query, body hash, timestamp and nonce. The enforcer refuses
// a bad signature, a timestamp outside its freshness window or older than its own start,
// and a nonce it has seen, so a captured request is useless: it cannot be replayed
// (same nonce, or sent before the enforcer that would accept it started) and tells
// nothing about the key. The enforcer signs its answer over the request's nonce, status
// and body hash, so that a fake enforcer on that port cannot make the gateway believe a
// policy change happened (or report a policy that is not in force).
//
// The package is stdlib only, and shared by both ends so that they cannot drift.
package egressauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Headers of a signed request and of a signed response.
const (
	HeaderTimestamp = "X-Sandgate-Egress-Timestamp" // Unix milliseconds
	HeaderNonce     = "X-Sandgate-Egress-Nonce"     // 32 hex digits, random
	HeaderSignature = "X-Sandgate-Egress-Signature" // hex HMAC-SHA256 of the request
	// HeaderResponseSignature is the enforcer's HMAC over the request's nonce, the
	// status and the body it answers with.
	HeaderResponseSignature = "X-Sandgate-Egress-Response-Signature"
)

// MaxSkew is how far a request's timestamp may be from the enforcer's clock.
const MaxSkew = 2 * time.Minute

// Errors a verification returns; their text is safe to show to the caller.
var (
	ErrMissing  = errors.New("request is not signed")
	ErrStale    = errors.New("request timestamp is outside the freshness window")
	ErrBadSig   = errors.New("request signature does not match")
	ErrReplayed = errors.New("request nonce was already used")
)

func bodyHash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

func requestMAC(key []byte, method, pathAndQuery, ts, nonce string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, part := range []string{"sandgate-egress-request-v1", method, pathAndQuery, bodyHash(body), ts, nonce} {
		m.Write([]byte(part))
		m.Write([]byte{'\n'})
	}
	return m.Sum(nil)
}

func responseMAC(key []byte, nonce string, status int, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, part := range []string{"sandgate-egress-response-v1", nonce, strconv.Itoa(status), bodyHash(body)} {
		m.Write([]byte(part))
		m.Write([]byte{'\n'})
	}
	return m.Sum(nil)
}

// requestTarget is the path and raw query the signature covers.
func requestTarget(r *http.Request) string {
	p := r.URL.EscapedPath()
	if p == "" {
		p = "/"
	}
	if r.URL.RawQuery != "" {
		p += "?" + r.URL.RawQuery
	}
	return p
}

// Sign sets the signature headers of r, whose body is body (nil for none), and returns
// the nonce the answer must be verified against.
func Sign(r *http.Request, key string, body []byte, now time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	nonce := hex.EncodeToString(b[:])
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	r.Header.Set(HeaderTimestamp, ts)
	r.Header.Set(HeaderNonce, nonce)
	r.Header.Set(HeaderSignature, hex.EncodeToString(requestMAC([]byte(key), r.Method, requestTarget(r), ts, nonce, body)))
	return nonce
}

// SignResponse returns the value of HeaderResponseSignature for an answer to the request
// with the given nonce.
func SignResponse(key, nonce string, status int, body []byte) string {
	return hex.EncodeToString(responseMAC([]byte(key), nonce, status, body))
}

// VerifyResponse reports whether sig is the enforcer's signature of this answer.
func VerifyResponse(key, nonce string, status int, body []byte, sig string) bool {
	got, err := hex.DecodeString(sig)
	return err == nil && hmac.Equal(got, responseMAC([]byte(key), nonce, status, body))
}

// Verifier checks signed requests at the enforcer. It remembers the nonces of the
// freshness window, and refuses every request signed before it was made: a request
// captured while this enforcer was not running (a workload holding its port) cannot be
// replayed to it.
type Verifier struct {
	key       []byte
	notBefore time.Time

	mu   sync.Mutex
	seen map[string]time.Time // nonce → when it may be forgotten
}

// NewVerifier returns a verifier for key that accepts requests signed at or after
// notBefore (the enforcer's start).
func NewVerifier(key string, notBefore time.Time) *Verifier {
	return &Verifier{key: []byte(key), notBefore: notBefore, seen: map[string]time.Time{}}
}

// maxNonces bounds the remembered nonces; beyond it new requests are refused until old
// ones expire (fail closed rather than forget and allow a replay).
const maxNonces = 100000

// ErrBusy: too many requests in one freshness window.
var ErrBusy = errors.New("too many signed requests in the freshness window")

// Verify checks r (whose body is body) at time now. The returned nonce is the one to
// sign the answer with; it is returned (when present) even on failure, so that error
// answers are signed too.
func (v *Verifier) Verify(r *http.Request, body []byte, now time.Time) (string, error) {
	ts, nonce, sig := r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderNonce), r.Header.Get(HeaderSignature)
	if ts == "" || nonce == "" || sig == "" {
		return nonce, ErrMissing
	}
	if len(nonce) < 16 || len(nonce) > 64 {
		return nonce, ErrBadSig
	}
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nonce, ErrStale
	}
	signed := time.UnixMilli(ms)
	if signed.Before(v.notBefore) || signed.Before(now.Add(-MaxSkew)) || signed.After(now.Add(MaxSkew)) {
		return nonce, ErrStale
	}
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, requestMAC(v.key, r.Method, requestTarget(r), ts, nonce, body)) {
		return nonce, ErrBadSig
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for n, until := range v.seen {
		if now.After(until) {
			delete(v.seen, n)
		}
	}
	if _, dup := v.seen[nonce]; dup {
		return nonce, ErrReplayed
	}
	if len(v.seen) >= maxNonces {
		return nonce, ErrBusy
	}
	v.seen[nonce] = signed.Add(2 * MaxSkew)
	return nonce, nil
}
