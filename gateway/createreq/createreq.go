// Package createreq holds the body of a sandbox create (POST /v1/sandboxes), which is
// also a pool's template and a batch's: a leaf of the core's vocabulary, so that the
// features that take a template (gateway/pool) can name it without importing the core.
// Package gateway re-exports it (gateway.CreateRequest) and checks it; this package
// only declares it.
package createreq

import "encoding/json"

// ImageSpec names the image of a sandbox.
type ImageSpec struct {
	URI  string     `json:"uri"`
	Auth *ImageAuth `json:"auth,omitempty"`
}

// ImageAuth holds registry credentials (used only when pulling is enabled).
type ImageAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// Request is the body of POST /v1/sandboxes.
type Request struct {
	Image          *ImageSpec        `json:"image"`
	Entrypoint     []string          `json:"entrypoint,omitempty"`
	Timeout        *int64            `json:"timeout,omitempty"`
	ResourceLimits map[string]string `json:"resourceLimits,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	NetworkPolicy  json.RawMessage   `json:"networkPolicy,omitempty"`
	Volumes        json.RawMessage   `json:"volumes,omitempty"`
	Platform       *struct {
		OS   string `json:"os"`
		Arch string `json:"arch"`
	} `json:"platform,omitempty"`
	SnapshotID   string            `json:"snapshotId,omitempty"`
	SecureAccess bool              `json:"secureAccess,omitempty"`
	Extensions   map[string]string `json:"extensions,omitempty"`
	// CredentialProxy asks for the credential vault; refused while there is none.
	CredentialProxy json.RawMessage `json:"credentialProxy,omitempty"`
}
