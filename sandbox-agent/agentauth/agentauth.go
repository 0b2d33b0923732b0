// Package agentauth is how the gateway and a sandbox's agent authenticate each other,
// with the sandbox's agent token as the key (the signedhttp scheme "Agent"): the
// gateway signs each request it sends to the agent, the agent refuses any request that
// is unsigned, stale, replayed or signed with another key, and signs each answer, which
// the gateway checks before it believes or relays anything.
//
// So the token never travels: a neighbour that takes the sandbox's address on the
// bridge receives requests that are worth nothing to it (no secret, no replay), and
// cannot answer in the agent's place. Bodies are not covered, because they stream
// (uploads, command output, PTY frames): the head of each request and answer is.
package agentauth

import (
	"net/http"
	"strings"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/signedhttp"
)

// MaxSkew is how far a request's timestamp may be from the agent's clock. It is short
// because the agent is called often: it remembers every nonce for twice as long.
const MaxSkew = 30 * time.Second

// maxNonces bounds the nonces an agent remembers per 2×MaxSkew: beyond about 1600
// requests a second sustained for a minute it refuses requests until old ones are
// forgotten.
const maxNonces = 100000

// Scheme is the agent's signing scheme.
var Scheme = signedhttp.NewScheme("Agent", MaxSkew)

// Sign signs r (its head: the body is not covered) with token and returns the nonce the
// answer must be verified against.
func Sign(r *http.Request, token string, now time.Time) string {
	return Scheme.Sign(r, token, nil, now)
}

// Answered reports whether resp is the agent's answer to the request signed with nonce.
func Answered(resp *http.Response, token, nonce string) bool {
	return Scheme.VerifyResponse(token, nonce, resp.StatusCode, nil, resp.Header.Get(Scheme.HeaderResponseSignature))
}

// SignAnswer returns the value of Scheme.HeaderResponseSignature for an answer with
// status to the request signed with nonce.
func SignAnswer(token, nonce string, status int) string {
	return Scheme.SignResponse(token, nonce, status, nil)
}

// NewVerifier returns the agent's verifier of requests signed with token at or after
// notBefore (the agent's start).
func NewVerifier(token string, notBefore time.Time) *signedhttp.Verifier {
	return Scheme.NewVerifier(token, notBefore, maxNonces)
}

// A credential is what the gateway holds to call one sandbox's agent: its token, or,
// for an agent that predates signed calls (a sandbox made before an upgrade, whose agent
// binary is older than the gateway), its token marked by Legacy. A legacy agent is sent
// the token itself in the token header and answers unsigned, as before. Whether an
// agent is legacy comes from the gateway's own record of the sandbox, never from what
// answers at its address: an unsigned answer never makes the gateway send the token.

// legacyMark starts a legacy credential.
const legacyMark = "legacy-unsigned:"

// Legacy is the credential of a legacy agent with token.
func Legacy(token string) string { return legacyMark + token }

// Credential returns the token of credential and whether its agent is legacy.
func Credential(credential string) (token string, legacy bool) {
	if t, ok := strings.CutPrefix(credential, legacyMark); ok {
		return t, true
	}
	return credential, false
}

// StripRequest removes the signature headers from r (what the agent passes on to a
// server in the sandbox must not carry them).
func StripRequest(h http.Header) {
	h.Del(Scheme.HeaderTimestamp)
	h.Del(Scheme.HeaderNonce)
	h.Del(Scheme.HeaderSignature)
}
