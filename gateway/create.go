package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/createreq"
	"github.com/sandgate/sandgate/gateway/egress"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/state"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
	"github.com/sandgate/sandgate/runtimes"
)

// The create's body and its image, declared in the leaf package gateway/createreq so
// that the pool feature can take a template.
type (
	// ImageSpec names the image of a sandbox.
	ImageSpec = createreq.ImageSpec
	// ImageAuth holds registry credentials (used only when pulling is enabled).
	ImageAuth = createreq.ImageAuth
	// CreateRequest is the body of POST /v1/sandboxes.
	CreateRequest = createreq.Request
)

// CreateResponse is the body of a successful create.
type CreateResponse struct {
	ID         string            `json:"id"`
	Status     Status            `json:"status"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
	Entrypoint []string          `json:"entrypoint"`
}

// Create validates req and hands out a sandbox: claimed from a warm pool when
// extensions.poolRef names one, otherwise started cold.
func (s *Service) Create(ctx context.Context, caller Caller, req CreateRequest) (*CreateResponse, error) {
	var rec *store.Sandbox
	err := s.authorizePublic(ctx, caller, req.Extensions)
	if err != nil {
		return nil, err
	}
	if pool := req.Extensions["poolRef"]; pool != "" {
		if req.SnapshotID != "" {
			return nil, invalid("give one of extensions.poolRef and snapshotId, not both")
		}
		rec, err = s.pool.CreateFromPool(ctx, caller, pool, req)
	} else {
		if req, err = s.resolveSnapshot(ctx, caller, req); err != nil {
			return nil, err
		}
		var spec runtimes.Spec
		if spec, err = s.validateCreate(req); err == nil {
			if _, err = s.admission.Admit(ctx, caller, admissionFor(spec, req, 1)); err == nil {
				rec, err = s.createCold(ctx, caller, req, spec, uuid.NewString(), "")
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return createResponse(rec), nil
}

func createResponse(rec *store.Sandbox) *CreateResponse {
	v := View(rec)
	return &CreateResponse{ID: v.ID, Status: v.Status, Metadata: v.Metadata, ExpiresAt: v.ExpiresAt, CreatedAt: v.CreatedAt, Entrypoint: v.Entrypoint}
}

// createCold starts a new container for a validated request, waits for its agent and
// records it under id. batch, when set, is recorded as the sandbox's batch. A sandbox
// whose image is one of the tenant's snapshots records that snapshot, however it was
// asked for (snapshotId, a fork, a batch or pool template of a snapshot).
func (s *Service) createCold(ctx context.Context, caller Caller, req CreateRequest, spec runtimes.Spec, id, batch string) (*store.Sandbox, error) {
	if err := imageBuilding(s.cfg.ImageBuilds, spec.Image); err != nil {
		return nil, err
	}
	// Wait for a create slot first: the record's clock (createdAt, expiry, the
	// reconciler's patience with a Pending record) starts when the work does.
	select {
	case s.creates <- struct{}{}:
		defer func() { <-s.creates }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	q, err := s.admission.TenantQuotas(ctx, caller.Tenant)
	if err != nil {
		return nil, err
	}
	// Limits are always set: the request's, else the tenant's defaults, else the runtime's.
	if spec.CPUMillis == 0 {
		spec.CPUMillis = q.DefaultCPUMillis
	}
	if spec.MemoryBytes == 0 {
		spec.MemoryBytes = q.DefaultMemoryBytes
	}
	// The OCI runtime: the request's, else the one the tenant must use (admission has
	// already refused a request that contradicts the tenant's).
	spec.Runtime = req.Extensions["runtime"]
	if spec.Runtime == "" {
		spec.Runtime = q.Runtime
	}
	now := time.Now().UTC()
	spec.ID = id
	spec.Tenant = caller.Tenant
	spec.CreatedAt = now
	spec.AgentToken = randomToken(24)
	spec.EgressToken = randomToken(24)
	spec.ExpiresAt = expiryFor(now, req.Timeout)
	if err := state.CheckHostPaths(spec.Volumes); err != nil {
		return nil, err
	}
	metadata := req.Metadata
	if batch != "" {
		metadata = withEntry(metadata, MetadataBatch, batch)
	}
	if md, err := json.Marshal(metadata); err == nil && len(metadata) > 0 {
		spec.Labels = map[string]string{labelMetadata: string(md)}
	}
	// credentialProxy's shape was checked with the rest of the request (validateCreate).
	proxy, _ := credentialProxyEnabled(req.CredentialProxy)
	egressSpec, err := s.egress.Spec(ctx, caller.Tenant, id, req.NetworkPolicy, proxy)
	if err != nil {
		return nil, err
	}
	spec.Egress = egressSpec
	if err := s.recovery.LabelCluster(ctx, &spec); err != nil {
		return nil, err
	}
	cluster := spec.Labels[runtimes.LabelCluster]
	if err := state.CheckSnapshotImage(cluster, caller.Tenant, spec.Image); err != nil {
		return nil, err
	}
	snapshotID := state.SnapshotOfImage(cluster, caller.Tenant, spec.Image)
	if snapshotID != "" {
		spec.Labels[labelFromSnapshot] = snapshotID
	}
	spec.Volumes = state.NamespaceVolumes(spec.Labels[runtimes.LabelCluster], caller.Tenant, spec.Volumes)
	stages := s.metrics.Stages(ctx)
	rec := &store.Sandbox{
		ID: spec.ID, Tenant: spec.Tenant, Image: spec.Image, Entrypoint: spec.Entrypoint,
		Metadata: metadata, ResourceLimits: req.ResourceLimits, Extensions: req.Extensions,
		State: StatePending, LastTransitionAt: now, CreatedAt: now, ExpiresAt: spec.ExpiresAt,
		AgentToken: spec.AgentToken, AgentAuth: store.AgentAuthSigned, EgressToken: spec.EgressToken, AccessToken: randomToken(24), Batch: batch,
		SnapshotID:   snapshotID,
		EgressPolicy: egress.PolicyOf(spec.Egress),
		Owner:        s.owner,
	}
	// The record comes first, so that no other gateway adopts the container as an orphan;
	// writing it also enforces the concurrency quota atomically across gateways.
	if err := s.store.CreateSandbox(ctx, rec, q.MaxConcurrent); err != nil {
		if errors.Is(err, store.ErrQuota) {
			return nil, Errorf(KindQuota, CodeQuotaConcur, "concurrent sandboxes quota: tenant %s holds its limit of %d", caller.Tenant, q.MaxConcurrent)
		}
		return nil, err
	}
	stages.Done(metrics.StageStore)
	inst, err := s.runtime.Create(ctx, spec)
	if err != nil {
		if derr := s.store.DeleteSandbox(context.WithoutCancel(ctx), spec.ID); derr != nil {
			s.recovery.RememberGhost(spec.ID)
		}
		return nil, runtimeCreateError(spec.Image, err)
	}
	stages.Done(metrics.StageRuntimeCreate)
	if err := s.waitReady(ctx, inst); err != nil {
		s.discard(context.WithoutCancel(ctx), spec.ID)
		s.state.DiscardVolumes(context.WithoutCancel(ctx), spec)
		return nil, err
	}
	stages.Done(metrics.StageAgentReady)
	started := time.Now().UTC()
	saved, err := s.store.ModifySandbox(ctx, spec.ID, func(sb *store.Sandbox) error {
		sb.State, sb.LastTransitionAt, sb.Address = StateRunning, started, inst.Address
		return nil
	})
	if err != nil {
		s.discard(context.WithoutCancel(ctx), spec.ID)
		return nil, err
	}
	stages.Finish(metrics.StageStore)
	s.emit(ctx, saved, plugins.EventSandboxCreated, map[string]any{"image": saved.Image, "key": caller.KeyID, "source": "cold"})
	s.state.ScheduleIdle(ctx, saved)
	return saved, nil
}

func runtimeCreateError(image string, err error) error {
	if verr := state.VolumeCreateError(err); verr != nil {
		return verr
	}
	if errors.Is(err, errors.ErrUnsupported) {
		return &Error{Kind: KindInvalid, Code: CodeUnsupported, Message: err.Error(), Cause: err}
	}
	if errors.Is(err, runtimes.ErrEnforcementMismatch) {
		return &Error{Kind: KindUnprocessable, Code: CodeEnforcementMismatch,
			Message: "the sandbox's egress enforcer did not report the policy it was given, so the sandbox was not started; the image may not be one sandgate can enforce", Cause: err}
	}
	if errors.Is(err, runtimes.ErrImageNotFound) {
		return &Error{Kind: KindInvalid, Code: CodeImageNotFound,
			Message: fmt.Sprintf("image %q is not present on this host and this gateway does not pull (SANDGATE_PULL=never); build or load it first", image), Cause: err}
	}
	var rr *runtimes.RegistryRefusedError
	if errors.As(err, &rr) {
		return &Error{Kind: KindForbidden, Code: CodeImageRegistryRefused, Message: fmt.Sprintf(
			"image %q would be pulled from registry %s, an address of the platform itself (loopback, link-local, private or this host's); the operator lists such registries in SANDGATE_IMAGE_REGISTRIES", image, rr.Registry), Cause: err}
	}
	var pe *runtimes.PullError
	if errors.As(err, &pe) {
		// The reason is one of the runtime's fixed ones: enough to fix the name or the
		// credentials, never the registry's (or whatever answered for it) own text.
		kind := KindUpstream
		if pe.Denied {
			kind = KindInvalid
		}
		return &Error{Kind: kind, Code: CodeImagePullFailed, Message: fmt.Sprintf("pulling image %q failed: %s", image, pe.Reason), Cause: err}
	}
	if engineRefused(err) {
		return &Error{Kind: KindInvalid, Code: CodeInvalidParameter, Message: "the engine refused the request: " + err.Error(), Cause: err}
	}
	return &Error{Kind: KindInternal, Code: CodeRuntimeError, Message: "the runtime could not start the sandbox", Cause: err}
}

// validateEnv refuses variable names a process cannot carry and the reserved SANDGATE_ ones.
func validateEnv(env map[string]string) error {
	for k := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return invalid("env: invalid variable name %q", k)
		}
		if strings.HasPrefix(k, "SANDGATE_") {
			return invalid("env: names starting with SANDGATE_ are reserved (%q)", k)
		}
	}
	return nil
}

// withEntry returns a copy of m with k set to v.
func withEntry(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for mk, mv := range m {
		out[mk] = mv
	}
	out[k] = v
	return out
}

// Metadata keys sandgate writes itself (under the reserved prefix).
const (
	MetadataBatch = "sandgate.io/batch"
	MetadataPool  = "sandgate.io/pool"
)

// Labels of the runtime object that carry what adoption rebuilds a record from, beside
// the runtime's own: the sandbox's metadata, and the snapshot it was created from.
const (
	labelMetadata     = "sandgate.io/metadata"
	labelFromSnapshot = "sandgate.io/from-snapshot"
)

func (s *Service) discard(ctx context.Context, id string) {
	if err := s.runtime.Delete(ctx, id); err != nil {
		s.log.Warn("remove failed sandbox", "id", id, "err", err)
	}
	if err := s.store.DeleteSandbox(ctx, id); err != nil {
		// The store is unreachable: delete the record once it answers again.
		s.recovery.RememberGhost(id)
	}
}

func (s *Service) validateCreate(req CreateRequest) (runtimes.Spec, error) {
	var spec runtimes.Spec
	if req.SnapshotID != "" {
		// resolveSnapshot turns a snapshotId into its image before validation, where the
		// caller's tenant is known; one left here came by a path without snapshots.
		return spec, invalid("snapshotId: not accepted here; create from a snapshot with POST /v1/sandboxes")
	}
	if req.Image == nil || strings.TrimSpace(req.Image.URI) == "" {
		return spec, invalid("image.uri is required")
	}
	if len(req.Entrypoint) == 0 || req.Entrypoint[0] == "" {
		return spec, invalid("entrypoint is required with image: a non-empty array such as [\"tail\",\"-f\",\"/dev/null\"]")
	}
	if err := s.validateCreateInput(req); err != nil {
		return spec, err
	}
	for k, v := range req.ResourceLimits {
		switch k {
		case "cpu":
			n, err := ParseCPU(v)
			if err != nil {
				return spec, invalid("resourceLimits.%v", err)
			}
			spec.CPUMillis = n
		case "memory":
			n, err := ParseMemory(v)
			if err != nil {
				return spec, invalid("resourceLimits.%v", err)
			}
			spec.MemoryBytes = n
		case "gpu", "nvidia.com/gpu":
			if v != "" && v != "0" {
				return spec, invalid("resourceLimits.gpu: this host has no GPUs to give")
			}
		default:
			return spec, invalid("resourceLimits: unknown resource %q (known: cpu, memory, gpu)", k)
		}
	}
	for k, v := range req.Extensions {
		switch k {
		case access.ExtensionRenewExtend:
			n, err := strconv.Atoi(v)
			if err != nil || n < 300 || n > 86400 {
				return spec, invalid("extensions[%q] = %q: want whole seconds from 300 to 86400", k, v)
			}
		case "runtime":
			if v != "runc" && v != "runsc" {
				return spec, invalid("extensions[%q] = %q: want \"runc\" or \"runsc\" (gVisor)", k, v)
			}
		case ExtensionPauseAtExpiry:
			if v != "true" && v != "false" {
				return spec, invalid("extensions[%q] = %q: want \"true\" or \"false\"", k, v)
			}
		case access.ExtensionPublic:
			if v != "true" && v != "false" {
				return spec, invalid("extensions[%q] = %q: want \"true\" or \"false\"", k, v)
			}
		case ExtensionIdlePause:
			if err := s.state.ValidateIdlePause(v); err != nil {
				return spec, err
			}
		}
	}
	vols, err := state.ParseVolumes(req.Volumes, ParseMemory)
	if err != nil {
		return spec, err
	}
	spec.Volumes = vols
	if req.Platform != nil && req.Platform.OS != "" && req.Platform.OS != "linux" {
		return spec, invalid("platform.os %q: only linux is supported", req.Platform.OS)
	}
	spec.Image = strings.TrimSpace(req.Image.URI)
	if a := req.Image.Auth; a != nil && (a.Username != "" || a.Password != "") {
		if a.Username == "" || a.Password == "" {
			return spec, invalid("image.auth: username and password are both required")
		}
		if _, err := reference.ParseNormalizedNamed(spec.Image); err != nil {
			return spec, invalid("image.uri %q: %v", spec.Image, err)
		}
		spec.ImageAuth = &runtimes.ImageAuth{Username: a.Username, Password: a.Password}
	}
	spec.Entrypoint = req.Entrypoint
	spec.Env = req.Env
	return spec, nil
}

// startSettle is how long a sandbox's agent must keep answering after its first answer
// before the sandbox counts as started: an entrypoint that exits at once takes the agent
// down with it within this window, and the create then fails instead of handing out a
// sandbox that is already dead.
const startSettle = 100 * time.Millisecond

// waitReady polls the agent's /ping until it answers twice, startSettle apart (once
// when the runtime already saw the entrypoint settle: inst.Settled), failing fast when
// the container stops and within ReadyTimeout otherwise.
func (s *Service) waitReady(ctx context.Context, inst runtimes.Instance) error {
	deadline := time.Now().Add(s.cfg.ReadyTimeout)
	delay := 5 * time.Millisecond
	answered := false
	for attempt := 0; ; attempt++ {
		if inst.Address != "" && s.pingAgent(ctx, inst.Address, inst.AgentToken, time.Second) == nil {
			if answered || inst.Settled {
				return nil
			}
			answered = true
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(startSettle):
			}
			continue
		}
		if answered || attempt%4 == 3 || inst.Address == "" {
			cur, err := s.runtime.Inspect(ctx, inst.ID)
			if err != nil && !errors.Is(err, runtimes.ErrNotFound) {
				return &Error{Kind: KindInternal, Code: CodeRuntimeError, Message: "the runtime lost the sandbox while it started", Cause: err}
			}
			if err != nil || cur.State == runtimes.StateExited {
				logs, _ := s.runtime.Logs(context.WithoutCancel(ctx), inst.ID, 20)
				msg := "the sandbox stopped before it became ready"
				if err == nil {
					msg = fmt.Sprintf("the entrypoint exited with code %d before the sandbox became ready", cur.ExitCode)
				}
				if logs != "" {
					msg += "; last output: " + truncate(logs, 500)
				}
				return &Error{Kind: KindUnprocessable, Code: CodeStartFailed, Message: msg}
			}
			inst.Address = cur.Address
		}
		if time.Now().After(deadline) {
			return &Error{Kind: KindTimeout, Code: CodeStartFailed,
				Message: fmt.Sprintf("the sandbox's agent did not answer within %s", s.cfg.ReadyTimeout)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
