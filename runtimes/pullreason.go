package runtimes

import "strings"

// The reasons a failed pull is answered with. The engine's own text is never passed on:
// it quotes what the registry answered (a body's first bytes among it), and whatever
// answered under the registry's name is not the caller's to read.
const (
	PullReasonUnauthorized = "unauthorized: authentication required (the registry refused the credentials, or wants some)"
	PullReasonDenied       = "denied: the registry refused access to the repository"
	PullReasonNotFound     = "not found: manifest unknown (the registry has no such repository or tag)"
	PullReasonInvalidName  = "invalid reference format: the registry does not accept the image's name"
	PullReasonNoPlatform   = "no matching manifest: the image has no variant for this host's platform"
	PullReasonUnreachable  = "unreachable: the registry could not be reached"
	PullReasonBadAnswer    = "bad answer: the registry's answer is not a usable image"
)

// PullReason maps an engine's pull error (its HTTP-like code, 0 when none, and its
// message: Docker's, or the kubelet's from containerd) to one of the fixed reasons, and
// tells a refusal (the caller's to fix) from an outage or an answer that is no image.
func PullReason(code int, msg string) (reason string, denied bool) {
	m := strings.ToLower(msg)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(m, s) {
				return true
			}
		}
		return false
	}
	switch {
	case code == 401 || has("unauthorized", "authentication required", "no basic auth credentials", "incorrect username or password"):
		return PullReasonUnauthorized, true
	case code == 404 || has("manifest unknown", "not found", "name unknown", "repository does not exist"):
		return PullReasonNotFound, true
	case code == 403 || has("denied", "forbidden"):
		return PullReasonDenied, true
	case has("invalid reference format", "repository name must", "name invalid"):
		return PullReasonInvalidName, true
	case has("no matching manifest"):
		return PullReasonNoPlatform, true
	case code == 400:
		return PullReasonInvalidName, true
	case has("connection refused", "no such host", "i/o timeout", "timeout", "network is unreachable",
		"no route to host", "connection reset", "tls:", "x509:", "server gave http response to https client"):
		return PullReasonUnreachable, false
	}
	return PullReasonBadAnswer, false
}
