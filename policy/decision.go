package policy

import (
	"log/slog"
	"strings"
)

// Stable decision codes. Rego policies may add their own; these are the ones
// the default policy and the engine produce.
const (
	// CodeOK marks an allowed decision.
	CodeOK = "OK"
	// CodeDenied: the principal may not perform the action.
	CodeDenied = "POLICY::DENIED"
	// CodeNotFound: the resource belongs to another tenant; answer 404 so
	// that its existence does not leak.
	CodeNotFound = "POLICY::NOT_FOUND"
	// CodeInvalidAction: the action is not of the form area.verb.
	CodeInvalidAction = "POLICY::INVALID_ACTION"
	// CodeTenantSuspended: the operator listed the tenant in
	// data.sandgate.platform.suspended_tenants.
	CodeTenantSuspended = "POLICY::TENANT_SUSPENDED"
	// CodeRoleEscalation: a non-admin tried to create a key with the admin
	// role (request.body.role of key.create or key.update).
	CodeRoleEscalation = "POLICY::ROLE_ESCALATION"
	// CodeEvaluationFailed: the policy could not be evaluated; fail closed.
	CodeEvaluationFailed = "POLICY::EVALUATION_FAILED"

	// Admission quotas (Outcome Limited): what the tenant holds or asks for passes
	// Quotas' bound. CodeQuotaConcurrent counts live sandboxes; CPU and memory count the
	// live sandboxes' limits plus the request's; CodeQuotaTimeout bounds one sandbox's
	// lifetime (a request without expiry included) and is Outcome Invalid: the same
	// request never passes later, so waiting is no remedy; CodeQuotaBatchSize bounds one
	// batch's count.
	CodeQuotaConcurrent = "QUOTA::CONCURRENT_SANDBOXES"
	CodeQuotaCPU        = "QUOTA::CPU"
	CodeQuotaMemory     = "QUOTA::MEMORY"
	CodeQuotaTimeout    = "QUOTA::TIMEOUT"
	CodeQuotaBatchSize  = "QUOTA::BATCH_SIZE"

	// CodeImageNotAllowed: the image is not in Quotas.AllowedImages, or is on the
	// platform's denied_images (a registry it does not allow is the default Rego's
	// ADMISSION::REGISTRY_NOT_ALLOWED).
	CodeImageNotAllowed = "ADMISSION::IMAGE_NOT_ALLOWED"
	// CodeRuntimeRequired: the tenant must run under Quotas.Runtime (runsc) and asked
	// for another.
	CodeRuntimeRequired = "ADMISSION::RUNTIME_REQUIRED"
	// CodeInvalidRequest: the admission input itself is unusable (Outcome Invalid).
	CodeInvalidRequest = "ADMISSION::INVALID_REQUEST"
	// CodeInvalidEgress: a networkPolicy the egress policy cannot read (Outcome Invalid).
	CodeInvalidEgress = "EGRESS::INVALID_POLICY"

	evaluationFailedText = "the request could not be checked against the policy, so it was denied"
)

// Decision is the answer to one policy question. Code and Message are safe
// to show to the caller; Cause is for logs only.
type Decision struct {
	Allow   bool   `json:"allow"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// DecisionID identifies this decision in logs and the audit stream.
	DecisionID string `json:"decisionId"`
	// InputHash is the hex SHA-256 of the JSON input the policy saw.
	InputHash string `json:"inputHash"`
	// PolicyVersion is Engine.Version at the time of the decision.
	PolicyVersion string `json:"policyVersion"`
	// Violations lists every admission denial (Code and Message repeat the
	// first one); empty for other decisions.
	Violations []Violation `json:"violations,omitempty"`
	// Cause is the internal reason of a CodeEvaluationFailed denial.
	Cause error `json:"-"`
}

// LogValue makes a decision log as the audit stream wants it: id, input
// hash, result, policy version, and the internal cause when there is one.
func (d Decision) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("decision_id", d.DecisionID),
		slog.String("input_hash", d.InputHash),
		slog.Bool("allow", d.Allow),
		slog.String("code", d.Code),
		slog.String("policy_version", d.PolicyVersion),
	}
	if d.Cause != nil {
		attrs = append(attrs, slog.String("cause", d.Cause.Error()))
	}
	return slog.GroupValue(attrs...)
}

var _ slog.LogValuer = Decision{}

// Violation is one reason an admission policy denies a request.
type Violation struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Outcome is what a decision means for the request, whatever the protocol that answers
// it (gateway/api maps outcomes to HTTP statuses through the core's error kinds).
type Outcome int

// The outcomes of a decision.
const (
	// Allowed: the request goes on.
	Allowed Outcome = iota
	// Denied: the principal may not do this; policy errors too (fail closed, and
	// nothing about the failure leaks).
	Denied
	// Hidden: the resource is another tenant's; answer as if it did not exist, so that
	// its existence does not leak (CodeNotFound).
	Hidden
	// Limited: a quota refuses it (a QUOTA:: code).
	Limited
	// Invalid: the input itself is wrong (CodeInvalidEgress, CodeInvalidRequest,
	// CodeInvalidAction, CodeQuotaTimeout).
	Invalid
)

// Outcome classifies the decision by its code.
func (d Decision) Outcome() Outcome {
	switch {
	case d.Allow:
		return Allowed
	case d.Code == CodeNotFound:
		return Hidden
	case d.Code == CodeInvalidEgress || d.Code == CodeInvalidRequest || d.Code == CodeInvalidAction || d.Code == CodeQuotaTimeout:
		return Invalid
	case strings.HasPrefix(d.Code, "QUOTA::"):
		return Limited
	default:
		return Denied
	}
}

// Principal is who makes a request.
type Principal struct {
	// Kind is api_key, session (console login), sandbox_token, signed_link,
	// cookie or anonymous.
	Kind   string `json:"kind"`
	ID     string `json:"id,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	// Role is admin, tenant-admin, member or viewer (api_key and session).
	Role string `json:"role,omitempty"`
	// Sandbox and Port bind sandbox_token, signed_link and cookie
	// credentials; Port 0 means any port of the sandbox.
	Sandbox string `json:"sandbox,omitempty"`
	Port    int    `json:"port,omitempty"`
}

// Resource is what an action applies to. Tenant is its owner.
type Resource struct {
	Kind   string `json:"kind,omitempty"`
	ID     string `json:"id,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	Public bool   `json:"public,omitempty"`
	Port   int    `json:"port,omitempty"`
}

// Request is the HTTP request behind an action, for policies that look at it.
type Request struct {
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	Body   any    `json:"body,omitempty"`
}

// AccessInput is the input of the access policy.
type AccessInput struct {
	Principal Principal `json:"principal"`
	// Tenant is the tenant the request acts in (from the URL or the key).
	Tenant string `json:"tenant,omitempty"`
	// Action is "<area>.<verb>": sandbox.create, sandbox.get, sandbox.list,
	// sandbox.delete, sandbox.update, sandbox.proxy, pool.*, batch.*,
	// snapshot.*, plugin.*, tenant.*, key.*, audit.read, policy.read,
	// policy.write.
	Action   string   `json:"action"`
	Resource Resource `json:"resource"`
	Request  Request  `json:"request"`
}

// Quotas are a tenant's limits; a zero value is omitted and so unlimited.
type Quotas struct {
	MaxConcurrent     int64    `json:"maxConcurrent,omitempty"`
	MaxCPUMillis      int64    `json:"maxCpuMillis,omitempty"`
	MaxMemoryBytes    int64    `json:"maxMemoryBytes,omitempty"`
	MaxTimeoutSeconds int64    `json:"maxTimeoutSeconds,omitempty"`
	MaxBatchSize      int64    `json:"maxBatchSize,omitempty"`
	AllowedImages     []string `json:"allowedImages,omitempty"`
	// Runtime, when set, is the only OCI runtime the tenant may use (runsc).
	Runtime string `json:"runtime,omitempty"`
	// MaxVolumes and MaxVolumeBytes bound one sandbox's volumes: their number and the
	// storage its pvc volumes ask for in total.
	MaxVolumes     int64 `json:"maxVolumes,omitempty"`
	MaxVolumeBytes int64 `json:"maxVolumeBytes,omitempty"`
	// HostVolumePrefixes, when set, narrows the platform's host volume prefixes for the
	// tenant; DenyHostVolumes refuses the tenant every host volume.
	HostVolumePrefixes []string `json:"hostVolumePrefixes,omitempty"`
	DenyHostVolumes    bool     `json:"denyHostVolumes,omitempty"`
}

// TenantQuotas names a tenant and its quotas.
type TenantQuotas struct {
	ID     string `json:"id"`
	Quotas Quotas `json:"quotas"`
}

// Usage is what a tenant consumes now, across its live sandboxes.
type Usage struct {
	Sandboxes   int64 `json:"sandboxes"`
	CPUMillis   int64 `json:"cpuMillis"`
	MemoryBytes int64 `json:"memoryBytes"`
}

// CreateRequest is the admission view of a create request; CPUMillis and
// MemoryBytes are per sandbox, Count sandboxes are created (0 means 1).
type CreateRequest struct {
	Image       string `json:"image"`
	CPUMillis   int64  `json:"cpuMillis"`
	MemoryBytes int64  `json:"memoryBytes"`
	// TimeoutSeconds nil means the sandbox never expires.
	TimeoutSeconds *int64         `json:"timeoutSeconds,omitempty"`
	Count          int            `json:"count,omitempty"`
	NetworkPolicy  *NetworkPolicy `json:"networkPolicy,omitempty"`
	// Runtime is the runtime the sandbox will really run with (the gateway
	// fills in its default when the caller names none).
	Runtime string `json:"runtime,omitempty"`
	// ImageRegistry is the registry host the image is named under ("docker.io" for a
	// bare name such as python:3.12); ImageLocal is true when the create will not pull
	// (the engine holds the image, or the gateway never pulls). The registries rule
	// (platform data allowed_registries) applies only to images that will be pulled.
	ImageRegistry string `json:"imageRegistry,omitempty"`
	ImageLocal    bool   `json:"imageLocal,omitempty"`
	// Volumes are the sandbox's mounts; a host volume's path is already resolved
	// (symlinks, ..) to where it really leads.
	Volumes []Volume `json:"volumes,omitempty"`
}

// Volume is the admission view of one volume of a create.
type Volume struct {
	Name      string `json:"name"`
	Type      string `json:"type"` // "host" or "pvc"
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
	// HostPath is the resolved host path (type host).
	HostPath string `json:"hostPath,omitempty"`
	// ClaimName is the tenant's claim name and StorageBytes its size (type pvc).
	ClaimName    string `json:"claimName,omitempty"`
	StorageBytes int64  `json:"storageBytes,omitempty"`
}

// AdmissionInput is the input of the admission policy.
type AdmissionInput struct {
	Tenant  TenantQuotas  `json:"tenant"`
	Usage   Usage         `json:"usage"`
	Request CreateRequest `json:"request"`
}

// EgressInput is the input of the egress policy. A nil NetworkPolicy means
// the sandbox asked for none and gets the platform default.
type EgressInput struct {
	Tenant        string         `json:"tenant"`
	Sandbox       string         `json:"sandbox"`
	NetworkPolicy *NetworkPolicy `json:"networkPolicy,omitempty"`
}
