package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
)

// Bounds of a sandbox's metadata: it travels on every list answer, in a runtime label
// and in every event, so it is kept small.
const (
	MaxMetadataKeys  = 64
	MaxMetadataBytes = 16 << 10
)

// ParsePort parses a port written canonically ("8080", never "08080", "+8080" or
// " 8080"). Every route that takes a port uses it, so that a policy rule about a port
// number sees the same number whatever spelling the client used.
func ParsePort(s string) (int, error) {
	// Canonical: 1 to 5 digits, the first not 0 (no regexp: every proxied request
	// parses its port).
	if len(s) >= 1 && len(s) <= 5 && s[0] != '0' {
		n := 0
		for i := 0; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			n = n*10 + int(s[i]-'0')
			if i == len(s)-1 && n <= 65535 {
				return n, nil
			}
		}
	}
	return 0, Errorf(KindInvalid, CodeInvalidParameter, "port %q: want a number from 1 to 65535, written without sign, spaces or leading zeros", s)
}

// imageIDRe matches an image given by its full id, which reference parsing refuses but
// the engine accepts. A shorter id (a prefix) is not an id here: the engine would match
// it against every image it holds.
var imageIDRe = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// validateImageRef accepts a full reference (name[:tag][@digest]) or a full
// sha256:<64 hex> id, before any record or container exists. A name that looks like hex
// ("b2") is a name (docker.io/library/b2), which the runtime hands the engine in full so
// that it is never read as an id prefix.
func validateImageRef(uri string) error {
	if imageIDRe.MatchString(uri) {
		return nil
	}
	if strings.HasPrefix(uri, "sha256:") {
		// Also a reference (repository "sha256", a tag), but meant as a short id.
		return invalid("image.uri %q: an image id must be given in full, \"sha256:<64 hex>\"", uri)
	}
	if _, err := reference.ParseNormalizedNamed(uri); err != nil {
		return invalid("image.uri %q is not a valid image reference (%v); want a name such as \"python:3.11-slim\" or \"registry.example.com/team/app:1.2\", or a full id \"sha256:<64 hex>\"", uri, err)
	}
	return nil
}

// validateProcessStrings refuses NUL bytes in what becomes a process's argv or
// environment: the kernel cannot carry them.
func validateProcessStrings(entrypoint []string, env map[string]string) error {
	for i, arg := range entrypoint {
		if strings.ContainsRune(arg, 0) {
			return invalid("entrypoint[%d]: contains a NUL byte", i)
		}
	}
	for k, v := range env {
		if strings.ContainsRune(v, 0) {
			return invalid("env[%q]: the value contains a NUL byte", k)
		}
	}
	return nil
}

// validateMetadataSize bounds the number of keys and their total size.
func validateMetadataSize(md map[string]string) error {
	if len(md) > MaxMetadataKeys {
		return Errorf(KindInvalid, CodeInvalidMetadata, "metadata has %d keys; at most %d are allowed", len(md), MaxMetadataKeys)
	}
	size := 0
	for k, v := range md {
		size += len(k) + len(v)
	}
	if size > MaxMetadataBytes {
		return Errorf(KindInvalid, CodeInvalidMetadata, "metadata holds %d bytes of keys and values; at most %d are allowed", size, MaxMetadataBytes)
	}
	return nil
}

// validateTimeoutSeconds checks a requested lifetime in whole seconds against the
// configured bounds. It compares seconds, never durations: a duration of 2^64 seconds
// wraps around int64 nanoseconds into a short lifetime.
func (s *Service) validateTimeoutSeconds(timeout *int64) error {
	if timeout == nil {
		return nil
	}
	lo, hi := int64(s.cfg.MinTimeout/time.Second), int64(s.cfg.MaxTimeout/time.Second)
	if *timeout < lo {
		return invalid("timeout %d s is below the minimum of %d s", *timeout, lo)
	}
	if *timeout > hi {
		return invalid("timeout %d s is above the maximum of %d s", *timeout, hi)
	}
	return nil
}

// credentialProxyEnabled reads credentialProxy: absent, null or {"enabled": false}
// is off.
func credentialProxyEnabled(raw json.RawMessage) (bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return false, nil
	}
	var cp struct {
		Enabled *bool `json:"enabled"`
	}
	if err := json.Unmarshal(raw, &cp); err != nil {
		return false, invalid("credentialProxy: want an object like {\"enabled\": true}")
	}
	return cp.Enabled != nil && *cp.Enabled, nil
}

// validateCredentialProxy checks credentialProxy's shape.
func validateCredentialProxy(raw json.RawMessage) error {
	_, err := credentialProxyEnabled(raw)
	return err
}

// validateCredentialProxyCreate refuses credentialProxy.enabled without a
// networkPolicy, or on a gateway whose runtime cannot intercept.
func (s *Service) validateCredentialProxyCreate(req CreateRequest) error {
	on, err := credentialProxyEnabled(req.CredentialProxy)
	if err != nil || !on {
		return err
	}
	if np := bytes.TrimSpace(req.NetworkPolicy); len(np) == 0 || bytes.Equal(np, []byte("null")) {
		return Errorf(KindInvalid, CodeCredentialProxyNeedsPolicy,
			"credentialProxy.enabled needs a networkPolicy: the credential vault lives in the sandbox's egress enforcer; add e.g. \"networkPolicy\": {\"defaultAction\": \"deny\", \"egress\": [{\"action\": \"allow\", \"target\": \"api.example.com\"}]}")
	}
	if !s.egress.RunsCredentialProxy() {
		return Errorf(KindInvalid, CodeCredentialProxyUnsupported,
			"credentialProxy.enabled: this gateway's runtime has no credential vault (egress enforcement is off or the runtime cannot intercept), so the sandbox's credentials could not be kept out of it; create it without credentialProxy")
	}
	return nil
}

// claimCredentialProxy refuses a claim that asks for the credential proxy from a pool
// whose warm sandboxes were started without it.
func claimCredentialProxy(tmpl, req CreateRequest) error {
	want, err := credentialProxyEnabled(req.CredentialProxy)
	if err != nil || !want {
		return err
	}
	if have, _ := credentialProxyEnabled(tmpl.CredentialProxy); !have {
		return Errorf(KindInvalid, CodeCredentialProxyNotInPool,
			"credentialProxy.enabled: the pool's template starts its sandboxes without the credential proxy; enable it in the pool's template")
	}
	return nil
}

// engineRefused reports whether the engine refused a create for a parameter of the
// request (a CPU limit above the host's, a reference it cannot parse): the client's
// mistake, answered 400 with the engine's reason.
func engineRefused(err error) bool {
	return cerrdefs.IsInvalidArgument(err) && !errors.Is(err, errors.ErrUnsupported)
}

// validateCreateInput checks the fields of a create that need no runtime: the image
// reference, then what a claim checks too.
func (s *Service) validateCreateInput(req CreateRequest) error {
	if err := validateImageRef(strings.TrimSpace(req.Image.URI)); err != nil {
		return err
	}
	if err := s.validateCredentialProxyCreate(req); err != nil {
		return err
	}
	return s.validateClaimInput(req)
}

// validateClaimInput checks what a pool claim (or a batch's claim) adds to its pool's
// template: timeout, metadata, env, entrypoint, credentialProxy.
func (s *Service) validateClaimInput(req CreateRequest) error {
	if err := s.validateTimeoutSeconds(req.Timeout); err != nil {
		return err
	}
	if err := validateMetadata(req.Metadata, false); err != nil {
		return err
	}
	if err := validateMetadataSize(req.Metadata); err != nil {
		return err
	}
	if err := validateEnv(req.Env); err != nil {
		return err
	}
	if err := validateProcessStrings(req.Entrypoint, req.Env); err != nil {
		return err
	}
	return validateCredentialProxy(req.CredentialProxy)
}

// expiryFor is when a sandbox created at now with timeout (seconds, validated) expires:
// never (nil) for a timeout of null, as OpenSandbox specifies. Admission has already
// refused a null the operator does not allow (admission.Manager.CheckNoExpiry, the tenant's
// maxTimeoutSeconds).
func expiryFor(now time.Time, timeout *int64) *time.Time {
	if timeout == nil {
		return nil
	}
	exp := now.Add(time.Duration(*timeout) * time.Second)
	return &exp
}
