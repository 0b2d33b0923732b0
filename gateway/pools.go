package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// Pool error codes.
const (
	CodePoolNotFound = "POOL::NOT_FOUND"
	CodePoolExists   = "POOL::ALREADY_EXISTS"
	CodePoolInvalid  = "POOL::INVALID_PARAMETER"
	CodePoolEmpty    = "POOL::EMPTY"
)

// PoolRequest is the body of POST /v1/pools and PUT /v1/pools/{name}.
type PoolRequest struct {
	Name         string         `json:"name"`
	Template     *CreateRequest `json:"template"`
	CapacitySpec store.Capacity `json:"capacitySpec"`
}

// PoolStatus are a pool's live numbers.
type PoolStatus struct {
	Total     int64 `json:"total"`
	Allocated int64 `json:"allocated"`
	Available int64 `json:"available"`
	Starting  int64 `json:"starting"`
	// Image is the pull of the template's image that the pool's creation started (on
	// the gateway that took it); absent when the image was already on the engine.
	Image *PoolImagePull `json:"image,omitempty"`
}

// PoolImagePull is the progress of a pool's one pull of its image: state Pulling, Ready
// or Failed (message then has the registry's reason; the pool makes no members).
type PoolImagePull struct {
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
	runtimes.PullProgress
}

// Pool image pull states.
const (
	PoolImagePulling = "Pulling"
	PoolImageReady   = "Ready"
	PoolImageFailed  = "Failed"
)

// PoolView is the API form of a pool.
type PoolView struct {
	Name         string          `json:"name"`
	Template     json.RawMessage `json:"template"`
	CapacitySpec store.Capacity  `json:"capacitySpec"`
	Status       PoolStatus      `json:"status"`
	CreatedAt    string          `json:"createdAt"`
	UpdatedAt    string          `json:"updatedAt,omitempty"`
}

var poolNameRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func (s *Service) validatePool(req PoolRequest) error {
	if !poolNameRe.MatchString(req.Name) {
		return Errorf(400, CodePoolInvalid, "name %q: 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit", req.Name)
	}
	if req.Template == nil {
		return Errorf(400, CodePoolInvalid, "template is required (the fields of a create request: image, entrypoint, resourceLimits, env, metadata)")
	}
	if req.Template.Extensions["poolRef"] != "" {
		return Errorf(400, CodePoolInvalid, "template.extensions.poolRef: a pool's template cannot claim from a pool")
	}
	if _, err := s.validateCreate(*req.Template); err != nil {
		return err
	}
	c := req.CapacitySpec
	switch {
	case c.BufferMin < 0 || c.BufferMax < 0 || c.PoolMin < 0 || c.PoolMax < 0:
		return Errorf(400, CodePoolInvalid, "capacitySpec: numbers must not be negative")
	case c.BufferMin > c.BufferMax:
		return Errorf(400, CodePoolInvalid, "capacitySpec: bufferMin %d exceeds bufferMax %d", c.BufferMin, c.BufferMax)
	case c.PoolMin > c.PoolMax:
		return Errorf(400, CodePoolInvalid, "capacitySpec: poolMin %d exceeds poolMax %d", c.PoolMin, c.PoolMax)
	case c.BufferMax > c.PoolMax:
		return Errorf(400, CodePoolInvalid, "capacitySpec: bufferMax %d exceeds poolMax %d", c.BufferMax, c.PoolMax)
	case c.PoolMax > s.cfg.MaxPoolSize:
		return Errorf(400, CodePoolInvalid, "capacitySpec: poolMax %d exceeds this gateway's limit of %d", c.PoolMax, s.cfg.MaxPoolSize)
	}
	return nil
}

// CreatePool defines a pool; the manager fills it in the background.
func (s *Service) CreatePool(ctx context.Context, caller Caller, req PoolRequest) (*PoolView, error) {
	if err := s.validatePool(req); err != nil {
		return nil, err
	}
	pull, err := s.poolImage(ctx, req.Template)
	if err != nil {
		return nil, err
	}
	tmpl, _ := json.Marshal(withoutImageAuth(req.Template))
	now := time.Now().UTC().Format(time.RFC3339Nano)
	p := &store.Pool{Tenant: caller.Tenant, Name: req.Name, Template: tmpl, Capacity: req.CapacitySpec, Version: 1, CreatedAt: now, UpdatedAt: now}
	if err := s.store.PutPool(ctx, p, true); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, Errorf(http.StatusConflict, CodePoolExists, "pool %q already exists", req.Name)
		}
		return nil, err
	}
	if pull != nil {
		s.startPoolPull(store.PoolKey(p.Tenant, p.Name), req.Template, pull)
	} else {
		s.kickPools()
	}
	return s.poolView(ctx, p)
}

// withoutImageAuth is a template as it is stored: registry credentials are used for the
// pool's pull only and never written to the store.
func withoutImageAuth(t *CreateRequest) *CreateRequest {
	if t == nil || t.Image == nil || t.Image.Auth == nil {
		return t
	}
	c := *t
	c.Image = &ImageSpec{URI: t.Image.URI}
	return &c
}

// imagePuller is a runtime that pulls images itself (Docker).
type imagePuller interface {
	HasImage(ctx context.Context, image string) (bool, error)
	Pull(ctx context.Context, image string, auth *runtimes.ImageAuth, progress func(runtimes.PullProgress)) error
}

// poolImage decides how a new pool gets its image: nil when it is on the engine (or the
// runtime pulls on its own nodes), a puller when this gateway must pull it first, and
// IMAGE_NOT_FOUND when it is missing and pulling is off.
func (s *Service) poolImage(ctx context.Context, tmpl *CreateRequest) (imagePuller, error) {
	image := tmpl.Image.URI
	ip, ok := s.runtime.(imagePuller)
	if !ok || !s.cfg.PullImages {
		return nil, s.checkImage(ctx, image)
	}
	if !s.cfg.PullAlways {
		if has, err := ip.HasImage(ctx, image); err == nil && has {
			return nil, nil
		}
	}
	return ip, nil
}

// startPoolPull pulls a new pool's image once, in the background, with the template's
// credentials; the pool's status shows the progress, and the manager fills the pool only
// once the pull is done.
func (s *Service) startPoolPull(key string, tmpl *CreateRequest, ip imagePuller) {
	st := &PoolImagePull{State: PoolImagePulling}
	s.pools.mu.Lock()
	if s.pools.pulls == nil {
		s.pools.pulls = map[string]*PoolImagePull{}
	}
	s.pools.pulls[key] = st
	s.pools.mu.Unlock()
	var auth *runtimes.ImageAuth
	if a := tmpl.Image.Auth; a != nil && a.Username != "" {
		auth = &runtimes.ImageAuth{Username: a.Username, Password: a.Password}
	}
	image := tmpl.Image.URI
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		err := ip.Pull(ctx, image, auth, func(p runtimes.PullProgress) {
			s.pools.mu.Lock()
			st.PullProgress = p
			s.pools.mu.Unlock()
		})
		s.pools.mu.Lock()
		if err != nil {
			st.State = PoolImageFailed
			st.Message = runtimeCreateError(image, err).Error()
		} else {
			st.State = PoolImageReady
		}
		s.pools.mu.Unlock()
		if err != nil {
			s.log.Warn("pool image pull failed", "pool", key, "image", image, "err", err)
		}
		s.kickPools()
	}()
}

// poolPull is a copy of a pool's pull status (nil when it made none).
func (s *Service) poolPull(key string) *PoolImagePull {
	s.pools.mu.Lock()
	defer s.pools.mu.Unlock()
	st, ok := s.pools.pulls[key]
	if !ok {
		return nil
	}
	c := *st
	return &c
}

// checkImage fails early when a pool's image is not on the host.
func (s *Service) checkImage(ctx context.Context, image string) error {
	type imageChecker interface {
		HasImage(ctx context.Context, image string) (bool, error)
	}
	if ic, ok := s.runtime.(imageChecker); ok {
		has, err := ic.HasImage(ctx, image)
		if err == nil && !has {
			return runtimeCreateError(image, runtimes.ErrImageNotFound)
		}
	}
	return nil
}

// UpdatePool replaces a pool's template and capacity; warm sandboxes of the old template
// are replaced in the background.
func (s *Service) UpdatePool(ctx context.Context, caller Caller, name string, req PoolRequest) (*PoolView, error) {
	if req.Name == "" {
		req.Name = name
	}
	if req.Name != name {
		return nil, Errorf(400, CodePoolInvalid, "name %q in the body differs from %q in the path", req.Name, name)
	}
	if err := s.validatePool(req); err != nil {
		return nil, err
	}
	p, err := s.lookupPool(ctx, caller, name)
	if err != nil {
		return nil, err
	}
	tmpl, _ := json.Marshal(withoutImageAuth(req.Template))
	var pull imagePuller
	changed := string(tmpl) != string(p.Template)
	if changed {
		if pull, err = s.poolImage(ctx, req.Template); err != nil {
			return nil, err
		}
		p.Version++
		p.Template = tmpl
	}
	p.Capacity = req.CapacitySpec
	p.UpdatedAt = time.Now().UTC().Format(time.RFC3339Nano)
	if err := s.store.PutPool(ctx, p, false); err != nil {
		return nil, err
	}
	if pull != nil {
		s.startPoolPull(store.PoolKey(p.Tenant, p.Name), req.Template, pull)
	} else {
		if changed {
			// A new template without a pull of its own: an older pull no longer applies.
			s.clearPoolPull(store.PoolKey(p.Tenant, p.Name))
		}
		s.kickPools()
	}
	return s.poolView(ctx, p)
}

// clearPoolPull forgets a pool's pull status.
func (s *Service) clearPoolPull(key string) {
	s.pools.mu.Lock()
	delete(s.pools.pulls, key)
	s.pools.mu.Unlock()
}

func (s *Service) lookupPool(ctx context.Context, caller Caller, name string) (*store.Pool, error) {
	p, err := s.store.GetPool(ctx, caller.Tenant, name)
	if errors.Is(err, store.ErrNotFound) && caller.Admin && caller.Tenant != DefaultTenant {
		p, err = s.store.GetPool(ctx, DefaultTenant, name)
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(http.StatusNotFound, CodePoolNotFound, "pool %q not found", name)
	}
	return p, err
}

// GetPool returns one pool with its live numbers.
func (s *Service) GetPool(ctx context.Context, caller Caller, name string) (*PoolView, error) {
	p, err := s.lookupPool(ctx, caller, name)
	if err != nil {
		return nil, err
	}
	return s.poolView(ctx, p)
}

// ListPools returns the caller's pools.
func (s *Service) ListPools(ctx context.Context, caller Caller) ([]PoolView, error) {
	pools, err := s.store.ListPools(ctx, caller.Tenant)
	if err != nil {
		return nil, err
	}
	out := make([]PoolView, 0, len(pools))
	for _, p := range pools {
		v, err := s.poolView(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, *v)
	}
	return out, nil
}

// DeletePool removes a pool and its warm (unclaimed) sandboxes; claimed ones live on.
func (s *Service) DeletePool(ctx context.Context, caller Caller, name string) error {
	p, err := s.lookupPool(ctx, caller, name)
	if err != nil {
		return err
	}
	ids, err := s.store.DeletePool(ctx, p.Tenant, p.Name)
	if err != nil {
		return err
	}
	s.clearPoolPull(store.PoolKey(p.Tenant, p.Name))
	s.removeWarm(ctx, p, ids)
	return nil
}

func (s *Service) removeWarm(ctx context.Context, p *store.Pool, ids []string) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			_, _ = s.store.RemoveWarm(ctx, p.Tenant, p.Name, id)
			_ = s.store.DeleteSandbox(ctx, id)
			if err := s.runtime.Delete(ctx, id); err != nil {
				s.log.Warn("remove warm sandbox", "pool", p.Name, "id", id, "err", err)
			}
		}(id)
	}
	wg.Wait()
}

func (s *Service) poolView(ctx context.Context, p *store.Pool) (*PoolView, error) {
	c, err := s.store.CountPool(ctx, p.Tenant, p.Name)
	if err != nil {
		return nil, err
	}
	// The count the pool manager publishes, so that every replica reports the same.
	starting, err := s.store.StartingCount(ctx, store.PoolKey(p.Tenant, p.Name))
	if err != nil {
		return nil, err
	}
	return &PoolView{
		Name: p.Name, Template: p.Template, CapacitySpec: p.Capacity,
		Status: PoolStatus{Total: c.Available + c.Allocated + starting, Allocated: c.Allocated, Available: c.Available, Starting: starting,
			Image: s.poolPull(store.PoolKey(p.Tenant, p.Name))},
		CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}, nil
}

// ---- the pool manager ------------------------------------------------------------

// poolState is this gateway's view of the pools it manages.
type poolState struct {
	mu       sync.Mutex
	starting map[string]int            // pool key → warm creates in flight
	pulls    map[string]*PoolImagePull // pool key → the pull its creation started here
	kick     chan struct{}
	sem      chan struct{}
	// lastHealth is when warm members were last compared with the runtime.
	lastHealth time.Time
}

// publishStarting shares this manager's counts of starting members with every replica;
// they lapse within startingTTL of the manager's death.
func (s *Service) publishStarting(ctx context.Context) {
	s.pools.mu.Lock()
	counts := make(map[string]int, len(s.pools.starting))
	for k, n := range s.pools.starting {
		counts[k] = n
	}
	s.pools.mu.Unlock()
	if err := s.store.PublishStarting(ctx, counts, startingTTL); err != nil {
		s.log.Debug("publish starting pool members", "err", err)
	}
}

// startingTTL bounds how long a dead pool manager's starting counts are reported.
const startingTTL = 3 * time.Second

func (s *Service) startingCount(key string) int {
	s.pools.mu.Lock()
	defer s.pools.mu.Unlock()
	return s.pools.starting[key]
}

// kickPools asks the manager for a pass now instead of at its next tick.
func (s *Service) kickPools() {
	select {
	case s.pools.kick <- struct{}{}:
	default:
	}
}

// runPoolManager keeps every pool within its bounds while this gateway holds the lease.
func (s *Service) runPoolManager() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(s.cfg.PoolInterval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			case <-s.pools.kick:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			s.managePoolsOnce(ctx)
			cancel()
		}
	}()
}

func (s *Service) managePoolsOnce(ctx context.Context) {
	ok, err := s.store.AcquireLease(ctx, "pools", s.owner, 10*time.Second)
	if err != nil || !ok {
		return
	}
	pools, err := s.store.ListPools(ctx, "")
	if err != nil {
		return
	}
	s.publishStarting(ctx)
	if len(pools) == 0 {
		return
	}
	var live map[string]runtimes.Instance
	if time.Since(s.pools.lastHealth) > s.cfg.SyncInterval {
		if insts, err := s.runtime.List(ctx); err == nil {
			live = make(map[string]runtimes.Instance, len(insts))
			for _, in := range insts {
				live[in.ID] = in
			}
			s.pools.lastHealth = time.Now()
		}
	}
	for _, p := range pools {
		s.managePool(ctx, p, live)
	}
}

func (s *Service) managePool(ctx context.Context, p *store.Pool, live map[string]runtimes.Instance) {
	key := store.PoolKey(p.Tenant, p.Name)
	if pull := s.poolPull(key); pull != nil && pull.State != PoolImageReady {
		// Members wait for the pool's one pull (and a failed pull makes none).
		return
	}
	ready, err := s.store.ReadyMembers(ctx, p.Tenant, p.Name)
	if err != nil {
		return
	}
	// Dead or outdated warm sandboxes leave the pool and are replaced.
	var stale []string
	if live != nil {
		for _, id := range ready {
			if in, ok := live[id]; !ok || in.State != runtimes.StateRunning {
				stale = append(stale, id)
			}
		}
	}
	if len(stale) == 0 {
		stale = s.outdatedMembers(ctx, p, ready)
	}
	if len(stale) > 0 {
		s.log.Info("replacing warm sandboxes", "pool", p.Name, "count", len(stale))
		s.removeWarm(ctx, p, stale)
		ready, _ = s.store.ReadyMembers(ctx, p.Tenant, p.Name)
	}
	counts, err := s.store.CountPool(ctx, p.Tenant, p.Name)
	if err != nil {
		return
	}
	starting := int64(s.startingCount(key))
	available := counts.Available + starting
	total := counts.Available + counts.Allocated + starting
	c := p.Capacity
	want := int64(0)
	if available < int64(c.BufferMin) || available < int64(c.BufferMax) {
		want = int64(c.BufferMax) - available
	}
	if need := int64(c.PoolMin) - total; need > want {
		want = need
	}
	if room := int64(c.PoolMax) - total; want > room {
		want = room
	}
	if want > 0 {
		s.fillPool(p, int(want))
		return
	}
	// Too many idle: shrink to bufferMax, never below poolMin.
	excess := counts.Available - int64(c.BufferMax)
	if floor := total - int64(c.PoolMin); excess > floor {
		excess = floor
	}
	if excess > 0 && int64(len(ready)) >= excess {
		s.removeWarm(ctx, p, ready[len(ready)-int(excess):])
	}
}

// outdatedMembers samples the warm records for ones built from an older template.
func (s *Service) outdatedMembers(ctx context.Context, p *store.Pool, ready []string) []string {
	var out []string
	for _, id := range ready {
		sb, err := s.store.GetSandbox(ctx, id)
		if err == nil && sb.PoolVersion != 0 && sb.PoolVersion != p.Version {
			out = append(out, id)
		}
	}
	return out
}

// fillPool starts n warm sandboxes in the background, bounded by PoolConcurrency.
func (s *Service) fillPool(p *store.Pool, n int) {
	key := store.PoolKey(p.Tenant, p.Name)
	var req CreateRequest
	if err := json.Unmarshal(p.Template, &req); err != nil {
		s.log.Error("pool template does not decode", "pool", key, "err", err)
		return
	}
	spec, err := s.validateCreate(req)
	if err != nil {
		s.log.Error("pool template is invalid", "pool", key, "err", err)
		return
	}
	s.pools.mu.Lock()
	s.pools.starting[key] += n
	s.pools.mu.Unlock()
	for i := 0; i < n; i++ {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.pools.mu.Lock()
				s.pools.starting[key]--
				s.pools.mu.Unlock()
			}()
			select {
			case s.pools.sem <- struct{}{}:
			case <-s.stop:
				return
			}
			defer func() { <-s.pools.sem }()
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ReadyTimeout+30*time.Second)
			defer cancel()
			if err := s.startWarm(ctx, p, req, spec); err != nil {
				s.log.Warn("warm sandbox failed to start", "pool", key, "err", err)
			}
		}()
	}
}

// startWarm starts one pool member and, once its agent answers, makes it available.
func (s *Service) startWarm(ctx context.Context, p *store.Pool, req CreateRequest, spec runtimes.Spec) error {
	// The pool may have been deleted or changed while this start waited for its turn.
	if cur, err := s.store.GetPool(ctx, p.Tenant, p.Name); err != nil || cur.Version != p.Version {
		return nil
	}
	now := time.Now().UTC()
	spec.ID = uuid.NewString()
	spec.Tenant = p.Tenant
	spec.Pool = p.Name
	spec.CreatedAt = now
	spec.AgentToken = randomToken(24)
	spec.EgressToken = randomToken(24)
	// Warm members start behind an enforcer with the template's policy (the platform
	// default without one); a claim's own networkPolicy replaces it (bindClaimEgress).
	egress, err := s.egressSpec(ctx, Caller{Tenant: p.Tenant}, spec.ID, req)
	if err != nil {
		return err
	}
	spec.Egress = egress
	if err := s.labelCluster(ctx, &spec); err != nil {
		return err
	}
	inst, err := s.runtime.Create(ctx, spec)
	if err != nil {
		return err
	}
	if err := s.waitReady(ctx, inst); err != nil {
		_ = s.runtime.Delete(context.WithoutCancel(ctx), spec.ID)
		return err
	}
	rec := &store.Sandbox{
		ID: spec.ID, Tenant: p.Tenant, Image: spec.Image, Entrypoint: spec.Entrypoint,
		Metadata: req.Metadata, ResourceLimits: req.ResourceLimits, State: StateRunning,
		LastTransitionAt: now, CreatedAt: now, Address: inst.Address,
		AgentToken: spec.AgentToken, EgressToken: spec.EgressToken, AccessToken: randomToken(24),
		Pool: p.Name, PoolVersion: p.Version, EgressPolicy: egressPolicyOf(spec.Egress),
	}
	added, err := s.store.AddWarm(ctx, rec)
	if err != nil || !added {
		_ = s.runtime.Delete(context.WithoutCancel(ctx), spec.ID)
		if err == nil {
			err = fmt.Errorf("pool %s was deleted while a member started", p.Name)
		}
		return err
	}
	return nil
}

// ---- claims ----------------------------------------------------------------------

// createFromPool claims one warm sandbox of the named pool for the caller, waiting up to
// PoolWait for a refill when the pool is empty, then falling back to a cold create (or
// failing, as configured).
func (s *Service) createFromPool(ctx context.Context, caller Caller, poolName string, req CreateRequest) (*store.Sandbox, error) {
	p, tmpl, err := s.claimTarget(ctx, caller, poolName, req)
	if err != nil {
		return nil, err
	}
	if err := s.admitClaim(ctx, caller, tmpl, req, 1); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(s.cfg.PoolWait)
	for {
		got, err := s.claim(ctx, caller, p, tmpl, req, 1, "")
		if err != nil {
			return nil, err
		}
		if len(got) == 1 {
			return got[0], nil
		}
		s.kickPools()
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if s.cfg.PoolFallback == "fail" {
		return nil, Errorf(http.StatusServiceUnavailable, CodePoolEmpty, "pool %q has no warm sandbox and none came within %s", poolName, s.cfg.PoolWait)
	}
	return s.coldFromTemplate(ctx, caller, tmpl, req, uuid.NewString(), "")
}

// claimTarget loads the pool and merges the request into its template for validation.
func (s *Service) claimTarget(ctx context.Context, caller Caller, poolName string, req CreateRequest) (*store.Pool, CreateRequest, error) {
	var tmpl CreateRequest
	p, err := s.lookupPool(ctx, caller, poolName)
	if err != nil {
		return nil, tmpl, err
	}
	if err := json.Unmarshal(p.Template, &tmpl); err != nil {
		return nil, tmpl, fmt.Errorf("decode pool template: %w", err)
	}
	if err := s.validateClaimInput(req); err != nil {
		return nil, tmpl, err
	}

	if err := s.ValidateEgressRequest(ctx, caller, req); err != nil {
		return nil, tmpl, err
	}
	if req.Image != nil && req.Image.URI != "" && req.Image.URI != tmpl.Image.URI {
		return nil, tmpl, invalid("image %q differs from pool %q's image %q", req.Image.URI, poolName, tmpl.Image.URI)
	}
	return p, tmpl, nil
}

// admitClaim runs the admission policy for count sandboxes of a pool's template.
func (s *Service) admitClaim(ctx context.Context, caller Caller, tmpl, req CreateRequest, count int) error {
	merged := tmpl
	merged.Timeout = req.Timeout
	merged.Extensions = req.Extensions
	spec, err := s.validateCreate(merged)
	if err != nil {
		return err
	}
	_, err = s.admit(ctx, caller, admissionFor(spec, merged, count))
	return err
}

// coldFromTemplate starts a sandbox of a pool's template (with the claim's fields) cold.
func (s *Service) coldFromTemplate(ctx context.Context, caller Caller, tmpl, req CreateRequest, id, batch string) (*store.Sandbox, error) {
	merged := tmpl
	merged.Metadata = mergeMaps(tmpl.Metadata, req.Metadata)
	merged.Env = mergeMaps(tmpl.Env, req.Env)
	if len(req.Entrypoint) > 0 {
		merged.Entrypoint = req.Entrypoint
	}
	merged.Timeout = req.Timeout
	merged.Extensions = req.Extensions
	if len(req.NetworkPolicy) > 0 {
		merged.NetworkPolicy = req.NetworkPolicy
	}
	spec, err := s.validateCreate(merged)
	if err != nil {
		return nil, err
	}
	return s.createCold(ctx, caller, merged, spec, id, batch)
}

func mergeMaps(a, b map[string]string) map[string]string {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// claim binds up to n warm members in one script, applies the claim's late-bound settings
// through each agent, and replaces members that turn out dead. It returns what it got.
func (s *Service) claim(ctx context.Context, caller Caller, p *store.Pool, tmpl, req CreateRequest, n int, batch string) ([]*store.Sandbox, error) {
	now := time.Now().UTC()
	metadata := withEntry(mergeMaps(tmpl.Metadata, req.Metadata), MetadataPool, p.Name)
	if batch != "" {
		metadata[MetadataBatch] = batch
	}
	patch := store.ClaimPatch{
		"tenant": caller.Tenant, "metadata": metadata, "createdAt": now, "lastTransitionAt": now,
		"state": StateRunning, "extensions": req.Extensions,
	}
	if batch != "" {
		patch["batch"] = batch
	}
	expires := ""
	if req.Timeout != nil {
		exp := now.Add(time.Duration(*req.Timeout) * time.Second)
		patch["expiresAt"] = exp
		expires = fmt.Sprint(exp.UnixMilli())
	} else if tmpl.Timeout != nil {
		exp := now.Add(time.Duration(*tmpl.Timeout) * time.Second)
		patch["expiresAt"] = exp
		expires = fmt.Sprint(exp.UnixMilli())
	} else if exp, err := s.defaultExpiry(ctx, caller.Tenant, now); err != nil {
		return nil, err
	} else if exp != nil {
		patch["expiresAt"] = *exp
		expires = fmt.Sprint(exp.UnixMilli())
	}
	entrypointChanged := len(req.Entrypoint) > 0 && strings.Join(req.Entrypoint, "\x00") != strings.Join(tmpl.Entrypoint, "\x00")
	if entrypointChanged {
		patch["entrypoint"] = req.Entrypoint
	}
	got, err := s.store.Claim(ctx, p.Tenant, p.Name, caller.Tenant, n, patch, now.UnixMilli(), expires)
	if err != nil {
		return nil, err
	}
	if len(got) == 0 {
		return nil, nil
	}
	s.kickPools()
	// Late binding, in parallel: env for every later command, a new main process if asked.
	alive := make([]*store.Sandbox, 0, len(got))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, sb := range got {
		wg.Add(1)
		go func(sb *store.Sandbox) {
			defer wg.Done()
			err := s.bindClaim(ctx, sb, req.Env, entrypointChanged)
			if err == nil {
				err = s.bindClaimEgress(ctx, caller, sb, req)
			}
			if err != nil {
				s.log.Warn("claimed sandbox is dead; replacing it", "id", sb.ID, "pool", p.Name, "err", err)
				s.discard(context.WithoutCancel(ctx), sb.ID)
				return
			}
			mu.Lock()
			alive = append(alive, sb)
			mu.Unlock()
		}(sb)
	}
	wg.Wait()
	created := make([]store.Event, 0, len(alive))
	for _, sb := range alive {
		created = append(created, store.Event{Type: "sandbox.created", Tenant: sb.Tenant, SandboxID: sb.ID, Time: time.Now().UTC(),
			Data: map[string]any{"image": sb.Image, "key": caller.KeyID, "source": "pool", "pool": p.Name}})
	}
	s.emitAll(ctx, created)
	if missing := len(got) - len(alive); missing > 0 {
		more, err := s.claim(ctx, caller, p, tmpl, req, missing, batch)
		if err != nil {
			return alive, nil
		}
		alive = append(alive, more...)
	}
	return alive, nil
}

// memberAlive pings a claimed member's agent. A slow answer on a loaded host is not a
// dead member: when the first ping fails but the runtime still reports the process
// running, it gets a second, longer ping before it is given up.
func (s *Service) memberAlive(ctx context.Context, sb *store.Sandbox) error {
	err := s.pingAgent(ctx, sb.Address, sb.AgentToken, time.Second)
	if err == nil {
		return nil
	}
	inst, ierr := s.runtime.Inspect(ctx, sb.ID)
	if ierr != nil || inst.State != runtimes.StateRunning {
		return err
	}
	return s.pingAgent(ctx, sb.Address, sb.AgentToken, 5*time.Second)
}

// bindClaim applies the claim's env and entrypoint through the agent; with neither, it
// pings, so that a dead member is never handed out.
func (s *Service) bindClaim(ctx context.Context, sb *store.Sandbox, env map[string]string, entrypoint bool) error {
	if len(env) == 0 && !entrypoint {
		return s.memberAlive(ctx, sb)
	}
	if len(env) > 0 {
		if err := s.callAgent(ctx, sb, http.MethodPut, "/sandgate/env", map[string]any{"envs": env}); err != nil {
			return err
		}
	}
	if entrypoint {
		return s.callAgent(ctx, sb, http.MethodPost, "/sandgate/entrypoint", map[string]any{"entrypoint": sb.Entrypoint})
	}
	return nil
}
