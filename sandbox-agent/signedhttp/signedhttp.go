// Package signedhttp signs the gateway's requests to a sandbox's services (its egress
// enforcer, its agent) and their answers, with a per-sandbox token as the HMAC key.
//
// Why signatures and not the token itself: what the gateway talks to listens in the
// sandbox's network namespace, where something else may answer in its place (the
// workload while its enforcer restarts; a neighbour that took the sandbox's address).
// The gateway therefore never sends the token: each request carries a timestamp, a
// random nonce and an HMAC over method, path, query, body hash, timestamp and nonce. The
// service refuses a bad signature, a timestamp outside its freshness window or older
// than its own start, and a nonce it has seen, so a captured request is useless: it
// cannot be replayed and tells nothing about the key. The service signs its answer over
// the request's nonce, status and body hash, so that whatever answers in its place
// cannot make the gateway believe anything.
//
// A Scheme names one use (its header names and the domain its MACs are made in), so
// that a signature made for one service is never valid for another. A caller whose
// bodies stream (the agent's uploads, commands, PTY) signs with a nil body on both
// ends: the head is authenticated, the body is not covered.
//
// The package is stdlib only, and shared by both ends so that they cannot drift.
package signedhttp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Scheme is one use of signed requests: its headers and MAC domain. Make it with
// NewScheme.
type Scheme struct {
	// HeaderTimestamp (Unix milliseconds), HeaderNonce (32 hex digits, random) and
	// HeaderSignature (hex HMAC-SHA256 of the request) are set on a signed request;
	// HeaderResponseSignature on a signed answer.
	HeaderTimestamp, HeaderNonce, HeaderSignature, HeaderResponseSignature string
	// MaxSkew is how far a request's timestamp may be from the service's clock.
	MaxSkew time.Duration

	requestDomain, responseDomain string
}

// NewScheme returns the scheme called name ("Egress", "Agent"): its headers are
// X-Sandgate-<name>-Timestamp, -Nonce, -Signature and -Response-Signature.
func NewScheme(name string, maxSkew time.Duration) Scheme {
	prefix := "X-Sandgate-" + name + "-"
	lower := strings.ToLower(name)
	return Scheme{
		HeaderTimestamp: prefix + "Timestamp", HeaderNonce: prefix + "Nonce", HeaderSignature: prefix + "Signature",
		HeaderResponseSignature: prefix + "Response-Signature",
		MaxSkew:                 maxSkew,
		requestDomain:           "sandgate-" + lower + "-request-v1", responseDomain: "sandgate-" + lower + "-response-v1",
	}
}

// Errors a verification returns; their text is safe to show to the caller.
var (
	ErrMissing  = errors.New("request is not signed")
	ErrStale    = errors.New("request timestamp is outside the freshness window")
	ErrBadSig   = errors.New("request signature does not match")
	ErrReplayed = errors.New("request nonce was already used")
	// ErrBusy: too many requests in one freshness window.
	ErrBusy = errors.New("too many signed requests in the freshness window")
)

func bodyHash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

func (s Scheme) requestMAC(key []byte, method, pathAndQuery, ts, nonce string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, part := range []string{s.requestDomain, method, pathAndQuery, bodyHash(body), ts, nonce} {
		m.Write([]byte(part))
		m.Write([]byte{'\n'})
	}
	return m.Sum(nil)
}

func (s Scheme) responseMAC(key []byte, nonce string, status int, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, part := range []string{s.responseDomain, nonce, strconv.Itoa(status), bodyHash(body)} {
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

// Sign sets the signature headers of r, whose body is body (nil for none, or for a
// body the signature does not cover), and returns the nonce the answer must be
// verified against.
func (s Scheme) Sign(r *http.Request, key string, body []byte, now time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	nonce := hex.EncodeToString(b[:])
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	r.Header.Set(s.HeaderTimestamp, ts)
	r.Header.Set(s.HeaderNonce, nonce)
	r.Header.Set(s.HeaderSignature, hex.EncodeToString(s.requestMAC([]byte(key), r.Method, requestTarget(r), ts, nonce, body)))
	return nonce
}

// SignResponse returns the value of HeaderResponseSignature for an answer to the request
// with the given nonce.
func (s Scheme) SignResponse(key, nonce string, status int, body []byte) string {
	return hex.EncodeToString(s.responseMAC([]byte(key), nonce, status, body))
}

// VerifyResponse reports whether sig is the service's signature of this answer.
func (s Scheme) VerifyResponse(key, nonce string, status int, body []byte, sig string) bool {
	got, err := hex.DecodeString(sig)
	return err == nil && hmac.Equal(got, s.responseMAC([]byte(key), nonce, status, body))
}

// Verifier checks signed requests at the service. It remembers the nonces of the
// freshness window, and refuses every request signed before it was made: a request
// captured while this service was not running cannot be replayed to it.
type Verifier struct {
	scheme    Scheme
	key       []byte
	notBefore time.Time
	maxNonces int

	mu sync.Mutex
	// Nonces are kept in two generations (Verify): forgetting is dropping the older.
	current, previous map[string]struct{}
	rotated           time.Time
}

// NewVerifier returns a verifier for key that accepts requests signed at or after
// notBefore (the service's start; to the millisecond, as timestamps are) and remembers at most maxNonces nonces per
// 2×MaxSkew (beyond it new requests are refused until old ones are forgotten: fail closed rather
// than forget and allow a replay).
func (s Scheme) NewVerifier(key string, notBefore time.Time, maxNonces int) *Verifier {
	notBefore = notBefore.Truncate(time.Millisecond)
	return &Verifier{scheme: s, key: []byte(key), notBefore: notBefore, maxNonces: maxNonces,
		current: map[string]struct{}{}, previous: map[string]struct{}{}, rotated: notBefore}
}

// Verify checks r (whose body is body, nil when the scheme's caller does not cover it)
// at time now. The returned nonce is the one to sign the answer with; it is returned
// (when present) even on failure, so that error answers are signed too.
func (v *Verifier) Verify(r *http.Request, body []byte, now time.Time) (string, error) {
	s := v.scheme
	ts, nonce, sig := r.Header.Get(s.HeaderTimestamp), r.Header.Get(s.HeaderNonce), r.Header.Get(s.HeaderSignature)
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
	if signed.Before(v.notBefore) || signed.Before(now.Add(-s.MaxSkew)) || signed.After(now.Add(s.MaxSkew)) {
		return nonce, ErrStale
	}
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.requestMAC(v.key, r.Method, requestTarget(r), ts, nonce, body)) {
		return nonce, ErrBadSig
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	// A nonce must be known for 2×MaxSkew after it is seen (its timestamp may be up to
	// MaxSkew ahead, and stays fresh MaxSkew after that). Generations are 2×MaxSkew
	// long and a nonce is dropped with the generation after its own: never sooner.
	generation := 2 * s.MaxSkew
	if now.Sub(v.rotated) >= 2*generation {
		v.previous, v.current, v.rotated = map[string]struct{}{}, map[string]struct{}{}, now
	} else if now.Sub(v.rotated) >= generation {
		v.previous, v.current = v.current, map[string]struct{}{}
		v.rotated = v.rotated.Add(generation)
	}
	_, dupCurrent := v.current[nonce]
	_, dupPrevious := v.previous[nonce]
	if dupCurrent || dupPrevious {
		return nonce, ErrReplayed
	}
	if len(v.current) >= v.maxNonces {
		return nonce, ErrBusy
	}
	v.current[nonce] = struct{}{}
	return nonce, nil
}
