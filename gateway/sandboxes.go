package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// Sandbox states of the OpenSandbox protocol.
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

// CreateRequest is the body of POST /v1/sandboxes.
type CreateRequest struct {
	Image          *ImageSpec        `json:"image"`
	Entrypoint     []string          `json:"entrypoint"`
	Timeout        *int64            `json:"timeout"`
	ResourceLimits map[string]string `json:"resourceLimits"`
	Env            map[string]string `json:"env"`
	Metadata       map[string]string `json:"metadata"`
	NetworkPolicy  json.RawMessage   `json:"networkPolicy,omitempty"`
	Volumes        json.RawMessage   `json:"volumes,omitempty"`
	Platform       *struct {
		OS   string `json:"os"`
		Arch string `json:"arch"`
	} `json:"platform,omitempty"`
	SnapshotID   string            `json:"snapshotId,omitempty"`
	SecureAccess bool              `json:"secureAccess,omitempty"`
	Extensions   map[string]string `json:"extensions"`
	// CredentialProxy asks for the credential vault; refused while there is none.
	CredentialProxy json.RawMessage `json:"credentialProxy,omitempty"`
}

// Status is a sandbox's state with its explanation.
type Status struct {
	State            string     `json:"state"`
	Reason           string     `json:"reason,omitempty"`
	Message          string     `json:"message,omitempty"`
	LastTransitionAt *time.Time `json:"lastTransitionAt,omitempty"`
}

// Sandbox is the API view of a sandbox.
type Sandbox struct {
	ID         string            `json:"id"`
	Image      ImageSpec         `json:"image"`
	Status     Status            `json:"status"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Entrypoint []string          `json:"entrypoint"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
}

// CreateResponse is the body of a successful create.
type CreateResponse struct {
	ID         string            `json:"id"`
	Status     Status            `json:"status"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
	Entrypoint []string          `json:"entrypoint"`
}

// Endpoint tells a client where one port of a sandbox is reached and with which headers.
type Endpoint struct {
	Endpoint string            `json:"endpoint"`
	Headers  map[string]string `json:"headers,omitempty"`
	// URL is a signed browser link (only when expires was asked for).
	URL       string     `json:"url,omitempty"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// Caller is who makes a request, as authenticated by the HTTP layer.
type Caller struct {
	Tenant string
	// Admin sees every tenant.
	Admin bool
	// KeyID names the credential for audit ("admin" for the configured key).
	KeyID string
	// KeyRole is the key's role within its tenant (tenant-admin, member, viewer).
	KeyRole string
}

// View turns a record into its API form.
func View(sb *store.Sandbox) Sandbox {
	t := sb.LastTransitionAt
	return Sandbox{
		ID:         sb.ID,
		Image:      ImageSpec{URI: sb.Image},
		Status:     Status{State: sb.State, Reason: sb.Reason, Message: sb.Message, LastTransitionAt: &t},
		Metadata:   sb.Metadata,
		Entrypoint: sb.Entrypoint,
		ExpiresAt:  sb.ExpiresAt,
		CreatedAt:  sb.CreatedAt,
	}
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
		rec, err = s.createFromPool(ctx, caller, pool, req)
	} else {
		var spec runtimes.Spec
		if spec, err = s.validateCreate(req); err == nil {
			if _, err = s.admit(ctx, caller, admissionFor(spec, req, 1)); err == nil {
				rec, err = s.createCold(ctx, caller, req, spec, uuid.NewString(), "")
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return createResponse(rec), nil
}

// admissionFor describes a create of count sandboxes of spec for the admission policy.
func admissionFor(spec runtimes.Spec, req CreateRequest, count int) admissionRequest {
	return admissionRequest{Image: spec.Image, CPUMillis: spec.CPUMillis, MemoryBytes: spec.MemoryBytes, Timeout: req.Timeout, Count: count, Runtime: req.Extensions["runtime"]}
}

func createResponse(rec *store.Sandbox) *CreateResponse {
	v := View(rec)
	return &CreateResponse{ID: v.ID, Status: v.Status, Metadata: v.Metadata, ExpiresAt: v.ExpiresAt, CreatedAt: v.CreatedAt, Entrypoint: v.Entrypoint}
}

// createCold starts a new container for a validated request, waits for its agent and
// records it under id. batch, when set, is recorded as the sandbox's batch.
func (s *Service) createCold(ctx context.Context, caller Caller, req CreateRequest, spec runtimes.Spec, id, batch string) (*store.Sandbox, error) {
	// Wait for a create slot first: the record's clock (createdAt, expiry, the
	// reconciler's patience with a Pending record) starts when the work does.
	select {
	case s.creates <- struct{}{}:
		defer func() { <-s.creates }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	q, err := s.tenantQuotas(ctx, caller.Tenant)
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
	spec.ExpiresAt = s.expiryFor(now, req.Timeout, q)
	metadata := req.Metadata
	if batch != "" {
		metadata = withEntry(metadata, MetadataBatch, batch)
	}
	if md, err := json.Marshal(metadata); err == nil && len(metadata) > 0 {
		spec.Labels = map[string]string{labelMetadata: string(md)}
	}
	egress, err := s.egressSpec(ctx, caller, id, req)
	if err != nil {
		return nil, err
	}
	spec.Egress = egress
	if err := s.labelCluster(ctx, &spec); err != nil {
		return nil, err
	}
	rec := &store.Sandbox{
		ID: spec.ID, Tenant: spec.Tenant, Image: spec.Image, Entrypoint: spec.Entrypoint,
		Metadata: metadata, ResourceLimits: req.ResourceLimits, Extensions: req.Extensions,
		State: StatePending, LastTransitionAt: now, CreatedAt: now, ExpiresAt: spec.ExpiresAt,
		AgentToken: spec.AgentToken, EgressToken: spec.EgressToken, AccessToken: randomToken(24), Batch: batch,
		EgressPolicy: egressPolicyOf(spec.Egress),
		Owner:        s.owner,
	}
	// The record comes first, so that no other gateway adopts the container as an orphan;
	// writing it also enforces the concurrency quota atomically across gateways.
	if err := s.store.CreateSandbox(ctx, rec, q.MaxConcurrent); err != nil {
		if errors.Is(err, store.ErrQuota) {
			return nil, Errorf(http.StatusTooManyRequests, CodeQuotaConcur, "concurrent sandboxes quota: tenant %s holds its limit of %d", caller.Tenant, q.MaxConcurrent)
		}
		return nil, err
	}
	inst, err := s.runtime.Create(ctx, spec)
	if err != nil {
		if derr := s.store.DeleteSandbox(context.WithoutCancel(ctx), spec.ID); derr != nil {
			s.rememberGhost(spec.ID)
		}
		return nil, runtimeCreateError(spec.Image, err)
	}
	if err := s.waitReady(ctx, inst); err != nil {
		s.discard(context.WithoutCancel(ctx), spec.ID)
		return nil, err
	}
	started := time.Now().UTC()
	saved, err := s.store.ModifySandbox(ctx, spec.ID, func(sb *store.Sandbox) error {
		sb.State, sb.LastTransitionAt, sb.Address = StateRunning, started, inst.Address
		return nil
	})
	if err != nil {
		s.discard(context.WithoutCancel(ctx), spec.ID)
		return nil, err
	}
	s.emit(ctx, saved, "sandbox.created", map[string]any{"image": saved.Image, "key": caller.KeyID, "source": "cold"})
	return saved, nil
}

func runtimeCreateError(image string, err error) error {
	if errors.Is(err, errors.ErrUnsupported) {
		return &Error{Status: http.StatusBadRequest, Code: "SANDBOX::UNSUPPORTED", Message: err.Error(), Cause: err}
	}
	if errors.Is(err, runtimes.ErrImageNotFound) {
		return &Error{Status: http.StatusBadRequest, Code: CodeImageNotFound,
			Message: fmt.Sprintf("image %q is not present on this host and this gateway does not pull (SANDGATE_PULL=never); build or load it first", image), Cause: err}
	}
	var pe *runtimes.PullError
	if errors.As(err, &pe) {
		// The registry's reason goes to the caller: it is what they need to fix the
		// name or the credentials (which it never contains).
		status := http.StatusBadGateway
		if pe.Denied {
			status = http.StatusBadRequest
		}
		return &Error{Status: status, Code: CodeImagePullFailed, Message: fmt.Sprintf("pulling image %q failed: %s", image, pe.Reason), Cause: err}
	}
	if engineRefused(err) {
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidParameter, Message: "the engine refused the request: " + err.Error(), Cause: err}
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeRuntimeError, Message: "the runtime could not start the sandbox", Cause: err}
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

// labelMetadata carries a sandbox's metadata on the runtime object for adoption.
const labelMetadata = "sandgate.io/metadata"

func (s *Service) discard(ctx context.Context, id string) {
	if err := s.runtime.Delete(ctx, id); err != nil {
		s.log.Warn("remove failed sandbox", "id", id, "err", err)
	}
	if err := s.store.DeleteSandbox(ctx, id); err != nil {
		// The store is unreachable: delete the record once it answers again.
		s.rememberGhost(id)
	}
}

func (s *Service) validateCreate(req CreateRequest) (runtimes.Spec, error) {
	var spec runtimes.Spec
	if req.SnapshotID != "" {
		return spec, invalid("snapshotId: snapshots are not supported by this gateway yet; give an image")
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
		case ExtensionRenewExtend:
			n, err := strconv.Atoi(v)
			if err != nil || n < 300 || n > 86400 {
				return spec, invalid("extensions[%q] = %q: want whole seconds from 300 to 86400", k, v)
			}
		case "runtime":
			if v != "runc" && v != "runsc" {
				return spec, invalid("extensions[%q] = %q: want \"runc\" or \"runsc\" (gVisor)", k, v)
			}
		case ExtensionPublic:
			if v != "true" && v != "false" {
				return spec, invalid("extensions[%q] = %q: want \"true\" or \"false\"", k, v)
			}
		}
	}
	if len(req.Volumes) > 0 && string(req.Volumes) != "null" && string(req.Volumes) != "[]" {
		return spec, invalid("volumes: host and PVC volumes are not enabled on this gateway")
	}
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

// waitReady polls the agent's /ping until it answers twice, startSettle apart, failing
// fast when the container stops and within ReadyTimeout otherwise.
func (s *Service) waitReady(ctx context.Context, inst runtimes.Instance) error {
	deadline := time.Now().Add(s.cfg.ReadyTimeout)
	delay := 5 * time.Millisecond
	answered := false
	for attempt := 0; ; attempt++ {
		if inst.Address != "" && s.pingAgent(ctx, inst.Address, inst.AgentToken, time.Second) == nil {
			if answered {
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
				return &Error{Status: 500, Code: CodeRuntimeError, Message: "the runtime lost the sandbox while it started", Cause: err}
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
				return &Error{Status: http.StatusUnprocessableEntity, Code: CodeStartFailed, Message: msg}
			}
			inst.Address = cur.Address
		}
		if time.Now().After(deadline) {
			return &Error{Status: http.StatusGatewayTimeout, Code: CodeStartFailed,
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

// pingAgent calls the agent's /ping with its token.
func (s *Service) pingAgent(ctx context.Context, addr, token string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s:%d/ping", addr, runtimes.AgentPort), nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-EXECD-ACCESS-TOKEN", token)
	resp, err := s.agentHTTP.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("agent ping: %s", resp.Status)
	}
	return nil
}

// Lookup returns the record of a sandbox the caller may see; another tenant's is not found.
func (s *Service) Lookup(ctx context.Context, caller Caller, id string) (*store.Sandbox, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, notFound(id)
	}
	sb, err := s.store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, err
	}
	if !caller.Admin && sb.Tenant != caller.Tenant {
		return nil, notFound(id)
	}
	return sb, nil
}

// Get returns one sandbox.
func (s *Service) Get(ctx context.Context, caller Caller, id string) (*Sandbox, error) {
	sb, err := s.Lookup(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	v := View(sb)
	return &v, nil
}

// ListQuery filters and pages a list.
type ListQuery struct {
	States   []string
	Metadata map[string]string
	Page     int
	PageSize int
}

// Pagination describes one page of a list.
type Pagination struct {
	Page        int  `json:"page"`
	PageSize    int  `json:"pageSize"`
	TotalItems  int  `json:"totalItems"`
	TotalPages  int  `json:"totalPages"`
	HasNextPage bool `json:"hasNextPage"`
}

// ListResponse is the body of GET /v1/sandboxes.
type ListResponse struct {
	Items      []Sandbox  `json:"items"`
	Pagination Pagination `json:"pagination"`
}

// List returns the caller's sandboxes, newest first, filtered and paged.
func (s *Service) List(ctx context.Context, caller Caller, q ListQuery) (*ListResponse, error) {
	tenant := caller.Tenant
	if caller.Admin {
		tenant = ""
	}
	all, err := s.store.ListSandboxes(ctx, tenant)
	if err != nil {
		return nil, err
	}
	states := map[string]bool{}
	for _, st := range q.States {
		states[strings.ToLower(st)] = true
	}
	items := make([]Sandbox, 0)
	for _, sb := range all {
		if len(states) > 0 && !states[strings.ToLower(sb.State)] {
			continue
		}
		match := true
		for k, v := range q.Metadata {
			if got, ok := sb.Metadata[k]; !ok || got != v {
				match = false
				break
			}
		}
		if match {
			items = append(items, View(sb))
		}
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].CreatedAt.After(items[j].CreatedAt) })
	total := len(items)
	pages := (total + q.PageSize - 1) / q.PageSize
	start := (q.Page - 1) * q.PageSize
	if start > total {
		start = total
	}
	end := min(start+q.PageSize, total)
	return &ListResponse{
		Items: items[start:end],
		Pagination: Pagination{Page: q.Page, PageSize: q.PageSize, TotalItems: total, TotalPages: pages,
			HasNextPage: q.Page < pages},
	}, nil
}

// Delete removes a sandbox and its record.
func (s *Service) Delete(ctx context.Context, caller Caller, id string) error {
	sb, err := s.Lookup(ctx, caller, id)
	if err != nil {
		return err
	}
	if err := s.runtime.Delete(ctx, id); err != nil {
		return &Error{Status: 500, Code: CodeRuntimeError, Message: "the runtime could not remove the sandbox", Cause: err}
	}
	s.routes.drop(id)
	if err := s.store.DeleteSandbox(ctx, id); err != nil {
		return err
	}
	s.emit(ctx, sb, "sandbox.deleted", map[string]any{"key": caller.KeyID})
	return nil
}

// PatchMetadata applies a JSON merge patch (null deletes a key) to the metadata.
func (s *Service) PatchMetadata(ctx context.Context, caller Caller, id string, patch map[string]*string) (*Sandbox, error) {
	if _, err := s.Lookup(ctx, caller, id); err != nil {
		return nil, err
	}
	for k, v := range patch {
		if err := validateMetadataKey(k, false); err != nil {
			return nil, err
		}
		if v != nil {
			if err := validateMetadata(map[string]string{k: *v}, false); err != nil {
				return nil, err
			}
		}
	}
	sb, err := s.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
		if sb.Metadata == nil {
			sb.Metadata = map[string]string{}
		}
		for k, v := range patch {
			if v == nil {
				delete(sb.Metadata, k)
			} else {
				sb.Metadata[k] = *v
			}
		}
		if len(sb.Metadata) == 0 {
			sb.Metadata = nil
		}
		return validateMetadataSize(sb.Metadata)
	})
	if err != nil {
		return nil, s.mapStoreErr(id, err)
	}
	v := View(sb)
	return &v, nil
}

// Renew moves the expiry to expiresAt, which must lie in the future and within MaxTimeout.
func (s *Service) Renew(ctx context.Context, caller Caller, id string, expiresAt time.Time) (time.Time, error) {
	if _, err := s.Lookup(ctx, caller, id); err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	if !expiresAt.After(now) {
		return time.Time{}, Errorf(400, CodeInvalidExpiration, "expiresAt %s is not in the future", expiresAt.UTC().Format(time.RFC3339))
	}
	if expiresAt.Sub(now) > s.cfg.MaxTimeout {
		return time.Time{}, Errorf(400, CodeInvalidExpiration, "expiresAt %s is more than the maximum lifetime of %s away", expiresAt.UTC().Format(time.RFC3339), s.cfg.MaxTimeout)
	}
	exp := expiresAt.UTC()
	// A tenant's decide_ttl plugin may shorten, move or refuse the renewal; when it
	// fails, the request is granted as asked.
	if cur, err := s.Lookup(ctx, caller, id); err == nil && s.ttlDecider != nil && cur.ExpiresAt != nil {
		maxExp := now.Add(s.cfg.MaxTimeout)
		got, ok, err := s.ttlDecider(ctx, cur, TTLActivity{Renew: true, Requested: exp}, exp, maxExp)
		switch {
		case err != nil:
			s.log.Warn("TTL plugin failed on renew; granting the request", "sandbox", id, "err", err)
		case !ok:
			return *cur.ExpiresAt, nil
		case got.After(now):
			if got.After(maxExp) {
				got = maxExp
			}
			exp = got.UTC()
		}
	}
	sb, err := s.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
		if sb.State == StateFailed || sb.State == StateTerminated {
			return Errorf(409, CodeNotRunning, "sandbox %s is %s and cannot be renewed", id, sb.State)
		}
		sb.ExpiresAt = &exp
		return nil
	})
	if err != nil {
		return time.Time{}, s.mapStoreErr(id, err)
	}
	return *sb.ExpiresAt, nil
}

// Pause freezes a running sandbox.
func (s *Service) Pause(ctx context.Context, caller Caller, id string) error {
	return s.transition(ctx, caller, id, StateRunning, CodeNotRunning, StatePaused, s.runtime.Pause)
}

// Resume thaws a paused sandbox.
func (s *Service) Resume(ctx context.Context, caller Caller, id string) error {
	return s.transition(ctx, caller, id, StatePaused, CodeNotPaused, StateRunning, s.runtime.Resume)
}

func (s *Service) transition(ctx context.Context, caller Caller, id, from, code, to string, act func(context.Context, string) error) error {
	sb, err := s.Lookup(ctx, caller, id)
	if err != nil {
		return err
	}
	if sb.State != from {
		return Errorf(http.StatusConflict, code, "sandbox %s is %s, not %s", id, sb.State, from)
	}
	if err := act(ctx, id); err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			// Not every engine can freeze a sandbox (Kubernetes cannot): the caller's to know.
			return &Error{Status: http.StatusNotImplemented, Code: "SANDBOX::UNSUPPORTED", Message: err.Error(), Cause: err}
		}
		return &Error{Status: 500, Code: CodeRuntimeError, Message: "the runtime refused the change", Cause: err}
	}
	_, err = s.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
		sb.State, sb.LastTransitionAt = to, time.Now().UTC()
		return nil
	})
	return s.mapStoreErr(id, err)
}

func (s *Service) mapStoreErr(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return notFound(id)
	}
	return err
}

// Credential headers: the SDKs send exactly these names to the agent and to the enforcer.
const (
	HeaderAgentToken  = "X-EXECD-ACCESS-TOKEN"
	HeaderEgressToken = "OPENSANDBOX-EGRESS-AUTH"
	HeaderAccessToken = "X-Sandgate-Access-Token"
)

// AccessHeaderFor names the header that carries a sandbox's access credential for port.
func AccessHeaderFor(port int) string {
	switch port {
	case runtimes.AgentPort:
		return HeaderAgentToken
	case runtimes.EgressPort:
		return HeaderEgressToken
	}
	return HeaderAccessToken
}

// LinkQueryParam carries a signed link's token in a URL.
const LinkQueryParam = "sandgate_token"

// EndpointQuery are the options of an endpoint request.
type EndpointQuery struct {
	// RequestHost is the Host the caller used, the fallback for PublicAddress.
	RequestHost string
	// Scheme is how the caller reached the gateway ("http" or "https").
	Scheme string
	// Expires, when set, asks for a signed browser link valid until then.
	Expires *time.Time
}

// GetEndpoint returns the gateway route to port of a sandbox and the headers to send.
// Agent and egress ports always use path mode, so that SDKs need no wildcard DNS; other
// ports use host mode when a preview domain is configured. With Expires, URL carries a
// signed link a browser can open without any header.
func (s *Service) GetEndpoint(ctx context.Context, caller Caller, id string, port int, q EndpointQuery) (*Endpoint, error) {
	if port < 1 || port > 65535 {
		return nil, invalid("port %d: must be 1-65535", port)
	}
	sb, err := s.Lookup(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	host := s.cfg.PublicAddress
	if host == "" {
		host = q.RequestHost
	}
	value, err := s.accessHeaderValue(ctx, sb, caller.KeyID)
	if err != nil {
		return nil, err
	}
	ep := &Endpoint{Headers: map[string]string{AccessHeaderFor(port): value}}
	if s.cfg.PreviewDomain != "" && port != runtimes.AgentPort && port != runtimes.EgressPort {
		ep.Endpoint = fmt.Sprintf("%s-%d.%s", sb.ID, port, s.cfg.PreviewDomain)
		if _, p, err := net.SplitHostPort(host); err == nil {
			ep.Endpoint += ":" + p
		}
	} else {
		ep.Endpoint = fmt.Sprintf("%s/sandboxes/%s/proxy/%d", host, sb.ID, port)
	}
	if q.Expires != nil {
		if !q.Expires.After(time.Now()) {
			return nil, invalid("expires %d is not in the future", q.Expires.Unix())
		}
		if q.Expires.Sub(time.Now()) > s.cfg.MaxTimeout {
			return nil, invalid("expires %d is more than %s away", q.Expires.Unix(), s.cfg.MaxTimeout)
		}
		tok, err := s.SignLink(ctx, sb.ID, port, *q.Expires)
		if err != nil {
			return nil, err
		}
		scheme := q.Scheme
		if scheme == "" {
			scheme = "http"
		}
		exp := q.Expires.UTC()
		ep.URL = fmt.Sprintf("%s://%s/?%s=%s", scheme, ep.Endpoint, LinkQueryParam, tok)
		ep.ExpiresAt = &exp
	}
	return ep, nil
}

func (s *Service) emit(ctx context.Context, sb *store.Sandbox, typ string, data map[string]any) {
	ev := store.Event{Type: typ, Tenant: sb.Tenant, SandboxID: sb.ID, Time: time.Now().UTC(), Data: data}
	if _, err := s.store.AppendEvent(context.WithoutCancel(ctx), ev); err != nil {
		s.log.Warn("append event", "type", typ, "sandbox", sb.ID, "err", err)
	}
	s.publishEvent(ev)
}

// emitAll writes several events in one round trip (a batch claim's sandbox.created).
func (s *Service) emitAll(ctx context.Context, evs []store.Event) {
	if len(evs) == 0 {
		return
	}
	if err := s.store.AppendEvents(context.WithoutCancel(ctx), evs); err != nil {
		s.log.Warn("append events", "count", len(evs), "type", evs[0].Type, "err", err)
	}
	s.publishEvents(evs)
}
