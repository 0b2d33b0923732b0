package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"

	"github.com/sandgate/sandgate/gateway"
)

// The two tokens the door hands out with a sandbox, which its SDKs send on every call
// into it: envdAccessToken (X-Access-Token) opens every port of it, envd (49983)
// included; trafficAccessToken (E2B-Traffic-Access-Token) opens every port but envd
// (e2bAuthorize). Both are derived, not stored: an HMAC of the sandbox's id under the
// sandbox's own access secret (the one its OpenSandbox access headers are bound to),
// each with its own purpose. So a token names one sandbox only (a fork or a snapshot's
// copy is another sandbox with a secret of its own), the traffic token never stands for
// the envd token, and rotating the sandbox's access secret (POST
// /v1/sandboxes/{id}/access/rotate) revokes both. The gateway checks them; nothing
// inside the sandbox ever sees them.

// Purposes of the derived tokens.
const (
	e2bPurposeEnvd    = "e2b envd access"
	e2bPurposeTraffic = "e2b traffic access"
)

// e2bToken derives the token of purpose for sb; "" for a sandbox without an access
// secret, which no token opens.
func e2bToken(sb *gateway.SandboxRecord, purpose string) string {
	if sb.AccessToken == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(sb.AccessToken))
	m.Write([]byte(purpose + "\n" + sb.ID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// e2bTokenMatches reports, in constant time, whether got is sb's token of purpose.
func e2bTokenMatches(sb *gateway.SandboxRecord, purpose, got string) bool {
	want := e2bToken(sb, purpose)
	return want != "" && got != "" && hmac.Equal([]byte(got), []byte(want))
}
