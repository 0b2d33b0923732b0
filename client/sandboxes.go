package sandgate

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/apiproto"
)

// Sandbox states.
const (
	StatePending    = "Pending"
	StateRunning    = "Running"
	StatePausing    = "Pausing"
	StatePaused     = "Paused"
	StateResuming   = "Resuming"
	StateStopping   = "Stopping"
	StateTerminated = "Terminated"
	StateFailed     = "Failed"
)

// Ports of the services every sandbox runs.
const (
	AgentPort  = 44772
	EgressPort = 18080
)

// Image names a sandbox image.
type Image struct {
	URI  string     `json:"uri"`
	Auth *ImageAuth `json:"auth,omitempty"`
}

// ImageAuth is a registry credential for a private image.
type ImageAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// EgressRule allows or denies one target: a name ("example.com", "*.example.com"), an
// address or a CIDR.
type EgressRule struct {
	Action string `json:"action"`
	Target string `json:"target"`
}

// NetworkPolicy is a sandbox's egress policy; the first matching rule wins.
type NetworkPolicy struct {
	DefaultAction string       `json:"defaultAction,omitempty"`
	Egress        []EgressRule `json:"egress,omitempty"`
}

// Volume mounts storage into a sandbox: exactly one of Host and PVC.
type Volume struct {
	Name      string      `json:"name"`
	MountPath string      `json:"mountPath"`
	ReadOnly  bool        `json:"readOnly,omitempty"`
	SubPath   string      `json:"subPath,omitempty"`
	Host      *HostVolume `json:"host,omitempty"`
	PVC       *PVCVolume  `json:"pvc,omitempty"`
}

// PVCVolume is a named volume (a Docker named volume or a Kubernetes
// PersistentVolumeClaim), private to the tenant: sandboxes of one tenant naming the
// same ClaimName share it.
type PVCVolume struct {
	ClaimName string `json:"claimName"`
	// CreateIfNotExists defaults to true on the server; false refuses a missing claim
	// with ErrVolumeNotFound.
	CreateIfNotExists *bool `json:"createIfNotExists,omitempty"`
	// DeleteOnSandboxTermination removes the volume with the sandbox, if the
	// sandbox's own create made it.
	DeleteOnSandboxTermination bool     `json:"deleteOnSandboxTermination,omitempty"`
	StorageClass               string   `json:"storageClass,omitempty"`
	Storage                    string   `json:"storage,omitempty"` // e.g. "1Gi"
	AccessModes                []string `json:"accessModes,omitempty"`
}

// HostVolume is a host directory (allowed only under operator-configured prefixes).
type HostVolume struct {
	Path string `json:"path"`
}

// CreateRequest asks for a sandbox. Image and Entrypoint default to nothing: the
// gateway requires both unless SnapshotID or a pool (Extensions["poolRef"]) is given.
type CreateRequest struct {
	Image          *Image            `json:"image,omitempty"`
	Entrypoint     []string          `json:"entrypoint,omitempty"`
	Timeout        *int64            `json:"timeout,omitempty"` // seconds; nil = no expiry
	ResourceLimits map[string]string `json:"resourceLimits,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	NetworkPolicy  *NetworkPolicy    `json:"networkPolicy,omitempty"`
	Volumes        []Volume          `json:"volumes,omitempty"`
	SnapshotID     string            `json:"snapshotId,omitempty"`
	SecureAccess   bool              `json:"secureAccess,omitempty"`
	// CredentialProxy gives the sandbox a credential vault (see Client.Vault).
	CredentialProxy *CredentialProxy  `json:"credentialProxy,omitempty"`
	Extensions      map[string]string `json:"extensions,omitempty"`
}

// Seconds returns a pointer to d in whole seconds, for CreateRequest.Timeout.
func Seconds(d time.Duration) *int64 {
	s := int64(d / time.Second)
	return &s
}

// Sandbox is a sandbox as the lifecycle API describes it.
type Sandbox struct {
	ID         string            `json:"id"`
	Image      *Image            `json:"image,omitempty"`
	Status     Status            `json:"status"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
	// SnapshotID is the snapshot the sandbox was created from, if any.
	SnapshotID string `json:"snapshotId,omitempty"`
}

// The gateway answers these in the very form it declares them (package apiproto, a
// leaf that holds nothing of the gateway).
type (
	// Status is where a sandbox, a snapshot or a batch member is in its life.
	Status = apiproto.Status
	// Pagination describes one page of a list.
	Pagination = apiproto.Pagination
)

// SandboxPage is one page of GET /v1/sandboxes.
type SandboxPage struct {
	Items      []Sandbox  `json:"items"`
	Pagination Pagination `json:"pagination"`
}

// ListOptions filter a sandbox list. Zero values ask for the server's defaults.
type ListOptions struct {
	States   []string          // any of these (case-insensitive)
	Metadata map[string]string // all of these
	Page     int               // from 1
	PageSize int               // 1–200
}

// CreateSandbox creates a sandbox and returns it as the gateway answered (Running when
// the gateway waited for the agent, as sandgate does).
func (c *Client) CreateSandbox(ctx context.Context, req CreateRequest) (*Sandbox, error) {
	return call[Sandbox](ctx, c, http.MethodPost, "/sandboxes", nil, req)
}

// GetSandbox returns one sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	return call[Sandbox](ctx, c, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, nil)
}

// ListSandboxes returns one page of the caller's sandboxes, newest first.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) (*SandboxPage, error) {
	q := url.Values{}
	for _, s := range opts.States {
		q.Add("state", s)
	}
	if len(opts.Metadata) > 0 {
		m := url.Values{}
		for k, v := range opts.Metadata {
			m.Set(k, v)
		}
		q.Set("metadata", m.Encode())
	}
	if opts.Page > 0 {
		q.Set("page", strconv.Itoa(opts.Page))
	}
	if opts.PageSize > 0 {
		q.Set("pageSize", strconv.Itoa(opts.PageSize))
	}
	return call[SandboxPage](ctx, c, http.MethodGet, "/sandboxes", q, nil)
}

// ListAllSandboxes walks every page of the list.
func (c *Client) ListAllSandboxes(ctx context.Context, opts ListOptions) ([]Sandbox, error) {
	var all []Sandbox
	opts.Page, opts.PageSize = 1, 200
	for {
		p, err := c.ListSandboxes(ctx, opts)
		if err != nil {
			return nil, err
		}
		all = append(all, p.Items...)
		if !p.Pagination.HasNextPage {
			return all, nil
		}
		opts.Page++
	}
}

// DeleteSandbox removes a sandbox.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil, nil)
}

// PauseSandbox freezes a running sandbox.
func (c *Client) PauseSandbox(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/pause", nil, nil, nil)
}

// ResumeSandbox thaws a paused sandbox.
func (c *Client) ResumeSandbox(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/resume", nil, nil, nil)
}

// RenewSandbox moves a sandbox's expiry to at and returns the new expiry.
func (c *Client) RenewSandbox(ctx context.Context, id string, at time.Time) (time.Time, error) {
	var out struct {
		ExpiresAt time.Time `json:"expiresAt"`
	}
	body := map[string]string{"expiresAt": at.UTC().Format(time.RFC3339Nano)}
	err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/renew-expiration", nil, body, &out)
	return out.ExpiresAt, err
}

// PatchMetadata merges patch into a sandbox's metadata; a nil value deletes the key.
func (c *Client) PatchMetadata(ctx context.Context, id string, patch map[string]*string) (*Sandbox, error) {
	return call[Sandbox](ctx, c, http.MethodPatch, "/sandboxes/"+url.PathEscape(id)+"/metadata", nil, patch)
}

// RotateAccess replaces the sandbox's access secret: headers handed out before stop working.
func (c *Client) RotateAccess(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/access/rotate", nil, nil, nil)
}

// WaitForState polls until the sandbox is in one of states, or fails (Failed and
// Terminated end the wait unless asked for).
func (c *Client) WaitForState(ctx context.Context, id string, states ...string) (*Sandbox, error) {
	for {
		sb, err := c.GetSandbox(ctx, id)
		if err != nil {
			return nil, err
		}
		for _, s := range states {
			if strings.EqualFold(sb.Status.State, s) {
				return sb, nil
			}
		}
		if sb.Status.State == StateFailed || sb.Status.State == StateTerminated {
			return sb, fmt.Errorf("sandgate: sandbox %s is %s: %s", id, sb.Status.State, sb.Status.Message)
		}
		select {
		case <-ctx.Done():
			return sb, ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// Endpoint is how to reach one port of a sandbox: prepend the scheme to Endpoint and
// send Headers with every request. URL is a signed browser link when one was asked for.
type Endpoint = apiproto.Endpoint

// GetEndpoint returns how to reach port of a sandbox through the gateway.
func (c *Client) GetEndpoint(ctx context.Context, id string, port int) (*Endpoint, error) {
	var ep Endpoint
	err := c.do(ctx, http.MethodGet, fmt.Sprintf("/sandboxes/%s/endpoints/%d", url.PathEscape(id), port), nil, nil, &ep)
	if err != nil {
		return nil, err
	}
	return &ep, nil
}

// PreviewLink returns a signed browser link to port of a sandbox, valid for ttl.
func (c *Client) PreviewLink(ctx context.Context, id string, port int, ttl time.Duration) (*Endpoint, error) {
	var ep Endpoint
	q := url.Values{"expires": {strconv.FormatInt(time.Now().Add(ttl).Unix(), 10)}}
	err := c.do(ctx, http.MethodGet, fmt.Sprintf("/sandboxes/%s/endpoints/%d", url.PathEscape(id), port), q, nil, &ep)
	if err != nil {
		return nil, err
	}
	return &ep, nil
}
