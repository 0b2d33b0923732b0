// Package runtimes defines the plug point between sandgate's core and the engines that
// actually run sandboxes (Docker on one machine, Kubernetes for fleets). The interface
// speaks only in sandgate's own terms so that either engine can stand behind it.
package runtimes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
)

// Label keys carried by every sandbox the runtime creates. They are what lets the gateway
// rebuild its records from the runtime alone after a restart.
const (
	LabelID        = "sandgate.io/id"
	LabelTenant    = "sandgate.io/tenant"
	LabelExpiresAt = "sandgate.io/expires-at"
	LabelPool      = "sandgate.io/pool"
	LabelCreatedAt = "sandgate.io/created-at"
	// LabelCluster names the store (the deployment) that owns a sandbox: a gateway adopts
	// and removes only the sandboxes of its own cluster, never another's on the same engine.
	LabelCluster = "sandgate.io/cluster"
	// LabelAgentAuth is "signed" on a sandbox whose agent takes signed calls (package
	// agentauth); a sandbox made before them has none, and its agent takes its token.
	LabelAgentAuth = "sandgate.io/agent-auth"
	// LabelCredentialProxy marks a sandbox whose enforcer runs the credential vault (a
	// Docker label, a Kubernetes annotation; both in Instance.Labels).
	LabelCredentialProxy = "sandgate.io/credential-proxy"
	// LabelSnapshot marks an image that is a tenant's snapshot (its value the snapshot's
	// id, beside LabelTenant): no other tenant's create runs it, whatever name reaches it.
	LabelSnapshot = "sandgate.io/snapshot"
)

// AgentPort is the port of the in-sandbox agent API; EgressPort the egress enforcer's.
const (
	AgentPort  = agentproto.AgentPort
	EgressPort = agentproto.EgressPort
)

// Errors a runtime returns so the core can map them without knowing the engine.
var (
	ErrNotFound      = errors.New("sandbox not found in runtime")
	ErrImageNotFound = errors.New("image not found")
	// ErrImagePull wraps a pull the registry refused or that failed (see PullError).
	ErrImagePull   = errors.New("image pull failed")
	ErrUnavailable = errors.New("runtime unavailable")
	// ErrVolumeNotFound is a claim that does not exist and was not to be created.
	ErrVolumeNotFound = errors.New("volume not found")
	// ErrVolumeExists is a named volume made by name that exists already.
	ErrVolumeExists = errors.New("volume exists")
	// ErrVolumeForeign is a claim of the right name that belongs to another tenant.
	ErrVolumeForeign = errors.New("volume belongs to another tenant")
	// ErrVolumeUnsupported is a kind of volume (or an option of one) this runtime cannot mount.
	ErrVolumeUnsupported = errors.New("volume not supported by this runtime")
	// ErrVolumeHostChanged is a host volume whose path no longer leads where it was
	// judged (a symlink appeared on its way): nothing was mounted.
	ErrVolumeHostChanged = errors.New("host volume path changed")
	// ErrVolumeSubPathSymlink is a named volume's subPath that leads through a symlink
	// inside the volume (whose content the workload writes): nothing was mounted.
	ErrVolumeSubPathSymlink = errors.New("volume subPath leads through a symlink")
	// ErrInUse is an object (a snapshot's image) that sandboxes still use.
	ErrInUse = errors.New("in use by sandboxes")
	// ErrEnforcementMismatch is an egress enforcer whose signed report of the policy it
	// enforces is not the policy it was given: the sandbox must not run behind it.
	ErrEnforcementMismatch = errors.New("the egress enforcer does not enforce the policy it was given")
	// ErrWrongState is a pause of a sandbox the engine has paused already (or that is
	// not running), or a resume of one it has not paused.
	ErrWrongState = errors.New("the sandbox is not in a state that allows the change")
)

// Spec is what the core asks a runtime to start.
type Spec struct {
	ID     string
	Tenant string
	Pool   string
	Image  string
	// ImageAuth, when set, are the registry credentials for pulling Image for this
	// create only: a runtime never stores them (not in labels, records or logs).
	ImageAuth  *ImageAuth
	Entrypoint []string
	Env        map[string]string
	// Labels are extra labels; the runtime adds the sandgate.io/* ones itself.
	Labels map[string]string
	// CPUMillis and MemoryBytes are hard limits; zero means the runtime's default.
	CPUMillis   int64
	MemoryBytes int64
	// AgentToken is the secret the agent demands on every call.
	AgentToken string
	// EgressToken is the secret the egress enforcer demands on its API.
	EgressToken string
	ExpiresAt   *time.Time
	CreatedAt   time.Time
	// Egress, when set, runs the egress enforcer in front of the sandbox's network.
	Egress *EgressSpec
	// Runtime names the OCI runtime the engine starts this sandbox with ("runc",
	// "runsc" for gVisor); empty uses the runtime's configured default. The core sets it
	// from the tenant's settings or an admitted create request, never from raw input.
	Runtime string
	// Volumes are the sandbox's mounts, validated by the core: host paths resolved and
	// admitted, claim names already namespaced per tenant.
	Volumes []Volume
}

// Volume is one mount of a sandbox. Exactly one of HostPath and Claim is set.
type Volume struct {
	// Name is the request's name of the volume (unique in the sandbox).
	Name      string
	MountPath string
	ReadOnly  bool
	// HostPath is the bind source on the engine's host: absolute, symlinks resolved,
	// the request's subPath already joined.
	HostPath string
	// Claim is the engine's name of the volume (a Docker named volume, a
	// PersistentVolumeClaim), namespaced per tenant by the core; SubPath is a relative
	// directory inside it.
	Claim   string
	SubPath string
	// CreateIfNotExists makes the runtime create the claim when it is missing;
	// DeleteOnTermination removes it with the sandbox, only when this create made it.
	CreateIfNotExists   bool
	DeleteOnTermination bool
	// StorageClass, StorageBytes and AccessModes shape a claim the runtime creates.
	StorageClass string
	StorageBytes int64
	AccessModes  []string
}

// ImageAuth are registry credentials (OpenSandbox's image.auth).
type ImageAuth struct {
	Username string
	Password string
}

// PullError is a pull that failed: Reason is one of a fixed set of explanations the
// runtime maps the engine's error to (never the engine's text, which quotes what the
// registry answered), safe to show the caller. Denied is true
// when the registry refused (bad credentials, unknown repository or tag), false when it
// could not be reached or the pull broke off.
type PullError struct {
	Image  string
	Reason string
	Denied bool
}

func (e *PullError) Error() string { return fmt.Sprintf("pull %s: %s", e.Image, e.Reason) }

// Unwrap makes errors.Is(err, ErrImagePull) true.
func (e *PullError) Unwrap() error { return ErrImagePull }

// RegistryRefusedError is a pull refused before it started: the image's registry is an
// address of the platform itself (loopback, link-local, private, the host's own) that
// the operator did not list among the registries to pull from.
type RegistryRefusedError struct {
	Image    string
	Registry string
}

func (e *RegistryRefusedError) Error() string {
	return fmt.Sprintf("pull %s: registry %s is an address of the platform itself and is not listed among the registries to pull from", e.Image, e.Registry)
}

// PullProgress is what a pull reports while it runs: its layers, how many are done, and
// the bytes so far of those whose size the engine knows.
type PullProgress struct {
	Layers         int   `json:"layers"`
	LayersDone     int   `json:"layersDone"`
	BytesTotal     int64 `json:"bytesTotal"`
	BytesCompleted int64 `json:"bytesCompleted"`
}

// EgressSpec is what the runtime needs to start a sandbox's egress enforcer.
type EgressSpec struct {
	// Policy is the effective policy JSON ({"defaultAction", "egress"}) decided by Rego.
	Policy []byte
	// PlatformDeny lists targets the enforcer denies whatever it is told later.
	PlatformDeny []string
	// CredentialProxy turns on the credential vault: the runtime makes the sandbox a CA,
	// gives its key to the enforcer only and installs its certificate in the workload's
	// trust store (see CredentialProxyRuntime).
	CredentialProxy bool
}

// State is the runtime's view of a sandbox's process.
type State string

// States a runtime reports.
const (
	StateRunning State = "running"
	StatePaused  State = "paused"
	StateExited  State = "exited"
	StateCreated State = "created"
	StateMissing State = "missing"
)

// Instance is what the runtime knows about one sandbox.
type Instance struct {
	ID         string
	Tenant     string
	Pool       string
	Image      string
	Entrypoint []string
	State      State
	ExitCode   int
	// OOMKilled reports that a stopped sandbox was killed for want of memory (its
	// memory limit reached), as the engine recorded it.
	OOMKilled bool
	// Evicted reports that the platform stopped or removed the sandbox rather than its
	// workload ending (on Kubernetes: an eviction, by the API as a drain makes it or by
	// the kubelet under node pressure, a preemption, a taint).
	Evicted bool
	// Address is the host (IP) at which the sandbox's ports are reachable from the gateway.
	Address     string
	AgentToken  string
	EgressToken string
	Labels      map[string]string
	ExpiresAt   *time.Time
	CreatedAt   time.Time
	// Message carries the runtime's explanation when the sandbox stopped (exit code, OOM, logs).
	Message string
	// Complete reports, from the runtime's own evidence, that the sandbox's create went
	// all the way: its entrypoint was started and, when it has an egress enforcer, the
	// enforcer runs. A runtime sets it in Inspect (List may leave it false). A sandbox that
	// is not complete was left half-made by a create that died, and must never be
	// adopted as it is.
	Complete bool
	// EnforcerRunning reports that the sandbox's egress enforcer runs, for a runtime that
	// runs it apart from the workload (an EnforcerRestorer): List reads it from the same
	// listing as State, so that MissingEnforcers needs no engine call of its own, and
	// Inspect from its own look at the enforcer.
	EnforcerRunning bool
	// Settled is set by Create when the runtime has already seen the entrypoint past its
	// start (running and asleep waiting for something, or alive for a settle window):
	// the caller need not wait out a settle of its own to tell an entrypoint that exits
	// at once from one that runs.
	Settled bool
}

// Runtime runs sandboxes. Implementations must be safe for concurrent use.
type Runtime interface {
	// Name identifies the engine ("docker", "kubernetes").
	Name() string
	// Create starts a sandbox and returns once its process is started (not necessarily
	// answering yet); a failure leaves nothing behind.
	Create(ctx context.Context, spec Spec) (Instance, error)
	// Inspect returns the current view of one sandbox, ErrNotFound when it is gone. A
	// runtime may answer for a sandbox the platform evicted and removed (State exited,
	// Evicted) for a while after it is gone, so that its death is reported as what it was.
	Inspect(ctx context.Context, id string) (Instance, error)
	// List returns every sandbox this runtime holds with sandgate's labels.
	List(ctx context.Context) ([]Instance, error)
	// Delete stops and removes a sandbox; deleting a missing one is not an error.
	Delete(ctx context.Context, id string) error
	// Pause freezes every process of the sandbox (on Kubernetes every one but its agent,
	// which the gateway keeps from answering a paused sandbox's callers); Resume thaws them.
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	// Logs returns the tail of the sandbox's main process output, for failure messages.
	Logs(ctx context.Context, id string, lines int) (string, error)
	// Close releases the runtime's clients.
	Close() error
}
