package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/gateway"
)

// Signed file URLs of the E2B door. E2B's SDKs' download_url() and upload_url() give a
// URL of envd's /files that needs no header: its query carries path, username,
// signature and, optionally, signature_expiration, where signature is "v1_" and the
// unpadded base64 of SHA-256 over "path:operation:username:envdAccessToken" (with
// ":expiration" appended when there is one), operation being "read" for GET and
// "write" for POST. The gateway checks it against the sandbox's envd token (derived,
// e2b_tokens.go) before the call goes in, and removes both signature parameters: the
// agent sees an authenticated call for that path and user, never a credential. Such a
// URL names its sandbox only by host ({port}-{id}.<preview domain>, e2bHost) or by the
// door's headers; E2B_SANDBOX_URL alone gives a URL without either.

// Query parameters of a signed file URL.
const (
	e2bSignatureParam           = "signature"
	e2bSignatureExpirationParam = "signature_expiration"
)

// e2bFilesPath is envd's file route, the only one a signature opens.
const e2bFilesPath = "/files"

// e2bFileOperations are the operations a signature names, by method.
var e2bFileOperations = map[string]string{
	http.MethodGet:  "read",
	http.MethodPost: "write",
}

// e2bFileSignature is the signature E2B's SDKs compute for a file URL of sb; "" for a
// sandbox without an envd token, which no signature opens.
func e2bFileSignature(sb *gateway.SandboxRecord, path, operation, username, expiration string) string {
	token := e2bToken(sb, e2bPurposeEnvd)
	if token == "" {
		return ""
	}
	material := path + ":" + operation + ":" + username + ":" + token
	if expiration != "" {
		material += ":" + expiration
	}
	sum := sha256.Sum256([]byte(material))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// e2bCheckFileSignature checks the signed file URL r is, for envd of sb, at now: a
// wrong signature (for another path, operation, user, expiry or sandbox) is 403, one
// that is right but past its expiry 401, as envd answers it. The signature is judged
// before the expiry, so a forger learns nothing of the latter.
func e2bCheckFileSignature(r *http.Request, sb *gateway.SandboxRecord, now time.Time) error {
	operation, ok := e2bFileOperations[r.Method]
	if !ok || r.URL.Path != e2bFilesPath {
		return gateway.Errorf(gateway.KindForbidden, gateway.CodeForbidden, "a signed URL opens only GET and POST %s of sandbox %s", e2bFilesPath, sb.ID)
	}
	q := r.URL.Query()
	expiration := q.Get(e2bSignatureExpirationParam)
	want := e2bFileSignature(sb, q.Get("path"), operation, q.Get("username"), expiration)
	got := q.Get(e2bSignatureParam)
	if want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return gateway.Errorf(gateway.KindForbidden, gateway.CodeForbidden, "invalid signature for this file operation of sandbox %s", sb.ID)
	}
	if expiration != "" {
		expiresAt, err := strconv.ParseInt(expiration, 10, 64)
		if err != nil {
			return gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "signature_expiration %q: want unix seconds", expiration)
		}
		if expiresAt < now.Unix() {
			return gateway.Errorf(gateway.KindUnauthenticated, gateway.CodeMissingAPIKey, "signature is already expired")
		}
	}
	return nil
}

// stripE2BFileSignature removes a signed file URL's parameters from r's query; the
// rest is written anew from what the gateway read, so that the agent reads the very
// path and user the signature was checked for.
func stripE2BFileSignature(r *http.Request) {
	q := r.URL.Query()
	if !q.Has(e2bSignatureParam) && !q.Has(e2bSignatureExpirationParam) {
		return
	}
	q.Del(e2bSignatureParam)
	q.Del(e2bSignatureExpirationParam)
	r.URL.RawQuery = q.Encode()
}
