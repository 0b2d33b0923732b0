package gateway

// Tenants' WASM plugins, seen from the service: the management operations behind
// /v1/plugins, the fan-out of every event to the tenant's on_event plugins, the
// decide_ttl hook behind renew-on-access, the per-tenant audit stream that plugins'
// emit_audit records end in, and the loop that keeps this replica's plugin host in line
// with the plugins stored in Redis. The host itself (wazero) lives in plugins/.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
)

// pluginSyncInterval is how often a replica compares the store's revision with the one
// it last applied, to catch changes announced while its subscription was down.
const pluginSyncInterval = 5 * time.Second

// pluginState is one Service's plugin wiring. It lives outside the Service struct (keyed
// by the Service in attachedPlugins) so that the core's struct stays the lead's; the one
// lookup per event costs tens of nanoseconds.
type pluginState struct {
	host  *plugins.Host
	store *plugins.Store

	// loadErrors holds, per "tenant/name", why this replica could not load a stored plugin.
	mu         sync.Mutex
	loadErrors map[string]string
	// tenants are those whose plugins this replica has loaded, so that a tenant whose last
	// plugin was deleted while the subscription was down is emptied by the periodic sync.
	tenants map[string]bool

	// audit records wait here for the writer; full means dropped and counted.
	audit        chan auditEntry
	auditDropped atomic.Int64
	// auditWake is closed (and replaced) after each batch written, waking SSE readers.
	wakeMu    sync.Mutex
	auditWake chan struct{}
}

var attachedPlugins sync.Map // *Service → *pluginState

func (s *Service) pluginState() *pluginState {
	if v, ok := attachedPlugins.Load(s); ok {
		return v.(*pluginState)
	}
	return nil
}

// AttachPlugins wires host into the service: every event of a tenant reaches that
// tenant's on_event plugins, renew-on-access asks the tenant's decide_ttl plugin first,
// plugins' audit records are written to the tenant's audit stream (give host
// RecordAudit as its Audit callback), and the plugins stored in Redis are loaded now and
// kept in sync in the background. Call it once, before Start; Stop ends the background
// work, after which the caller closes host.
func (s *Service) AttachPlugins(ctx context.Context, host *plugins.Host) {
	ps := s.ensurePluginState()
	ps.host = host
	ps.store = plugins.NewStore(s.store.Client(), s.store.Key(""))
	s.access.SetTTLDecider(s.pluginTTLDecider)
	if rev, err := ps.store.Sync(ctx, host); err != nil {
		s.log.Warn("some stored plugins did not load", "revision", rev, "err", err)
	}
	s.noteLoaded(ctx)
	s.runPluginSync(ctx)
}

// ensurePluginState creates the state the audit writer needs; RecordAudit may be called
// (by the host) before AttachPlugins returns.
func (s *Service) ensurePluginState() *pluginState {
	v, loaded := attachedPlugins.LoadOrStore(s, &pluginState{
		loadErrors: map[string]string{},
		tenants:    map[string]bool{},
		audit:      make(chan auditEntry, 8192),
		auditWake:  make(chan struct{}),
	})
	ps := v.(*pluginState)
	if !loaded {
		s.runAuditWriter(ps)
	}
	return ps
}

// pluginTTLDecider asks the sandbox's tenant's decide_ttl plugin. A tenant without one
// gets the built-in rule without a warning; any other failure is returned so that
// the access feature logs it and applies the built-in rule (on an explicit renewal,
// Renew grants the request as asked).
func (s *Service) pluginTTLDecider(ctx context.Context, sb *store.Sandbox, act access.TTLActivity, builtin, maxExp time.Time) (time.Time, bool, error) {
	ps := s.pluginState()
	if ps == nil || ps.host == nil || sb.ExpiresAt == nil {
		return builtin, true, nil
	}
	in := plugins.TTLInput{
		SandboxID:        sb.ID,
		Reason:           plugins.ReasonActivity,
		Now:              act.At,
		CurrentExpiresAt: *sb.ExpiresAt,
		MaxExpiresAt:     maxExp,
		Activity:         &plugins.Activity{Port: act.Port, Method: act.Method, Path: act.Path},
	}
	if act.Renew {
		in.Reason, in.RequestedExpiresAt, in.Activity = plugins.ReasonRenew, act.Requested, nil
	}
	exp, changed, err := ps.host.DecideTTL(ctx, sb.Tenant, in)
	if errors.Is(err, plugins.ErrNotFound) {
		return builtin, true, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	return exp, changed, nil
}

// ---- management -----------------------------------------------------------------------

// PluginStats is how one plugin's calls went on the replica that answers: the host's
// counters as they are, durations in milliseconds.
type PluginStats struct {
	plugins.Calls
	P50Ms       float64    `json:"p50Ms"`
	P99Ms       float64    `json:"p99Ms"`
	LastError   string     `json:"lastError,omitempty"`
	LastErrorAt *time.Time `json:"lastErrorAt,omitempty"`
}

// PluginStatus is a plugin as the API shows it: what was stored and how it runs here.
type PluginStatus struct {
	Name      string          `json:"name"`
	Version   string          `json:"version"`
	Hash      string          `json:"hash"`
	Hooks     []string        `json:"hooks"`
	Limits    plugins.Limits  `json:"limits"`
	Settings  json.RawMessage `json:"settings,omitempty"`
	UpdatedAt time.Time       `json:"updatedAt"`
	// Loaded says whether this replica runs the stored version; LoadError says why not.
	Loaded    bool         `json:"loaded"`
	LoadError string       `json:"loadError,omitempty"`
	Stats     *PluginStats `json:"stats,omitempty"`
}

// MaxPluginUploadBytes bounds a whole upload request (module, config and multipart
// framing); the plugin host bounds the module itself (plugins.HostOptions.MaxModuleBytes).
const MaxPluginUploadBytes = plugins.DefaultMaxModuleBytes + 1<<20

func (s *Service) plugins() (*pluginState, error) {
	ps := s.pluginState()
	if ps == nil || ps.host == nil {
		return nil, Errorf(KindUnavailable, CodePluginsDisabled, "this gateway runs without a plugin host")
	}
	return ps, nil
}

// pluginError maps a plugins error to its kind, keeping the plugin's stable code.
func pluginError(err error) error {
	var pe *plugins.Error
	if !errors.As(err, &pe) {
		// Anything else comes from the plugin store, that is from Redis.
		return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	kind := KindUnprocessable
	switch pe.Code {
	case plugins.CodeInvalidConfig:
		kind = KindInvalid
	case plugins.CodeHookConflict, plugins.CodeTooManyPlugins, plugins.CodeTenantMemory:
		kind = KindConflict
	case plugins.CodeModuleTooLarge:
		kind = KindTooLarge
	case plugins.CodeNotFound:
		kind = KindNotFound
	case plugins.CodeClosed:
		kind = KindUnavailable
	case plugins.CodeTimeout, plugins.CodeTrap, plugins.CodeMemoryLimit, plugins.CodeBadOutput:
		kind = KindUnprocessable
	}
	return &Error{Kind: kind, Code: pe.Code, Message: pe.Message, Cause: err}
}

// PutPlugin validates a module and its configuration (JSON {"hooks","limits",
// "settings"}), loads it on this replica (replacing the tenant's plugin of that name
// without losing queued events) and stores it so that every replica loads it.
func (s *Service) PutPlugin(ctx context.Context, caller Caller, name string, module, config []byte) (*PluginStatus, error) {
	ps, err := s.plugins()
	if err != nil {
		return nil, err
	}
	var cfg plugins.Config
	dec := json.NewDecoder(strings.NewReader(string(config)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, Errorf(KindInvalid, plugins.CodeInvalidConfig, "the config part is not the JSON object {\"hooks\",\"limits\",\"settings\"}: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if len(module) == 0 {
		return nil, Errorf(KindInvalid, plugins.CodeInvalidModule, "the module part is missing or empty")
	}
	if max := ps.host.MaxModuleBytes(); len(module) > max {
		return nil, Errorf(KindTooLarge, plugins.CodeModuleTooLarge, "the module has %d bytes; at most %d are allowed", len(module), max)
	}
	// The store is what every replica loads, so it is what the count is checked against.
	stored, err := ps.store.List(ctx, caller.Tenant)
	if err != nil {
		return nil, pluginError(err)
	}
	if max := ps.host.MaxPluginsPerTenant(); len(stored) >= max && !slices.ContainsFunc(stored, func(sp plugins.StoredPlugin) bool { return sp.Name == name }) {
		return nil, Errorf(KindConflict, plugins.CodeTooManyPlugins, "the tenant already has %d plugins, the most allowed; remove one first", max)
	}
	// Load validates as Validate would, so the module is compiled once, not twice.
	p := plugins.Plugin{Tenant: caller.Tenant, Name: name, Version: pluginVersion(module, cfg), Module: module, Config: cfg}
	if err := ps.host.Load(ctx, p); err != nil {
		return nil, pluginError(err)
	}
	if _, err := ps.store.Put(ctx, p); err != nil {
		// Put bumps the revision before announcing; whatever landed, make this replica
		// match the store again.
		_ = ps.store.Apply(context.WithoutCancel(ctx), ps.host, caller.Tenant, name)
		return nil, pluginError(err)
	}
	ps.mu.Lock()
	ps.tenants[caller.Tenant] = true
	delete(ps.loadErrors, caller.Tenant+"/"+name)
	ps.mu.Unlock()
	s.log.Info("plugin stored", "tenant", caller.Tenant, "plugin", name, "version", p.Version, "key", caller.KeyID)
	return s.GetPlugin(ctx, caller, name)
}

// pluginVersion names a module and configuration together, so that replicas reload a
// plugin whose settings changed even when its bytes did not.
func pluginVersion(module []byte, cfg plugins.Config) string {
	h := sha256.New()
	h.Write(module)
	c, _ := json.Marshal(cfg)
	h.Write(c)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// ListPlugins returns the caller's tenant's plugins with this replica's statistics.
func (s *Service) ListPlugins(ctx context.Context, caller Caller) ([]PluginStatus, error) {
	ps, err := s.plugins()
	if err != nil {
		return nil, err
	}
	stored, err := ps.store.List(ctx, caller.Tenant)
	if err != nil {
		return nil, pluginError(err)
	}
	out := make([]PluginStatus, 0, len(stored))
	for _, sp := range stored {
		out = append(out, ps.status(caller.Tenant, sp))
	}
	return out, nil
}

// GetPlugin returns one plugin of the caller's tenant.
func (s *Service) GetPlugin(ctx context.Context, caller Caller, name string) (*PluginStatus, error) {
	ps, err := s.plugins()
	if err != nil {
		return nil, err
	}
	stored, err := ps.store.List(ctx, caller.Tenant)
	if err != nil {
		return nil, pluginError(err)
	}
	for _, sp := range stored {
		if sp.Name == name {
			st := ps.status(caller.Tenant, sp)
			return &st, nil
		}
	}
	return nil, Errorf(KindNotFound, plugins.CodeNotFound, "no plugin %q for this tenant", name)
}

// DeletePlugin removes a plugin from the store (so from every replica) and from this one.
func (s *Service) DeletePlugin(ctx context.Context, caller Caller, name string) error {
	ps, err := s.plugins()
	if err != nil {
		return err
	}
	if _, err := ps.store.Delete(ctx, caller.Tenant, name); err != nil {
		return pluginError(err)
	}
	if err := ps.host.Remove(caller.Tenant, name); err != nil && !errors.Is(err, plugins.ErrNotFound) {
		s.log.Warn("unload plugin", "tenant", caller.Tenant, "plugin", name, "err", err)
	}
	ps.mu.Lock()
	delete(ps.loadErrors, caller.Tenant+"/"+name)
	ps.mu.Unlock()
	s.log.Info("plugin deleted", "tenant", caller.Tenant, "plugin", name, "key", caller.KeyID)
	return nil
}

func (ps *pluginState) status(tenant string, sp plugins.StoredPlugin) PluginStatus {
	st := PluginStatus{Name: sp.Name, Version: sp.Version, Hash: sp.Hash, Hooks: sp.Config.Hooks, Limits: sp.Config.Limits,
		Settings: sp.Config.Settings, UpdatedAt: sp.UpdatedAt}
	if st.Hooks == nil {
		st.Hooks = []string{}
	}
	if stats, err := ps.host.Stats(tenant, sp.Name); err == nil {
		st.Loaded = stats.Version == sp.Version
		calls := &PluginStats{Calls: stats.Calls,
			P50Ms: float64(stats.P50.Microseconds()) / 1000, P99Ms: float64(stats.P99.Microseconds()) / 1000, LastError: stats.LastError}
		if !stats.LastErrorAt.IsZero() {
			at := stats.LastErrorAt.UTC()
			calls.LastErrorAt = &at
		}
		st.Stats = calls
	}
	ps.mu.Lock()
	st.LoadError = ps.loadErrors[tenant+"/"+sp.Name]
	ps.mu.Unlock()
	return st
}

// ---- replicas: keep the host in line with the store ------------------------------------

// runPluginSync applies every announced change at once and, every pluginSyncInterval,
// syncs the whole store when its revision moved without an announcement reaching us.
func (s *Service) runPluginSync(ctx context.Context) {
	ps := s.pluginState()
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var applied atomic.Int64
	if rev, err := ps.store.Revision(ctx); err == nil {
		applied.Store(rev)
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		<-s.stop
		cancel()
	}()
	go func() {
		defer s.wg.Done()
		for ctx.Err() == nil {
			err := ps.store.Watch(ctx, func(c plugins.Change) {
				actx, acancel := context.WithTimeout(ctx, 30*time.Second)
				defer acancel()
				s.recordLoad(c.Tenant, c.Name, ps.store.Apply(actx, ps.host, c.Tenant, c.Name))
				if !c.Deleted {
					ps.mu.Lock()
					ps.tenants[c.Tenant] = true
					ps.mu.Unlock()
				}
			})
			if ctx.Err() != nil {
				return
			}
			s.log.Debug("plugin change subscription ended; resubscribing", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
	s.loop(pluginSyncInterval, func(lctx context.Context) {
		rev, err := ps.store.Revision(lctx)
		if err != nil || rev == applied.Load() {
			return
		}
		if _, err := ps.store.Sync(lctx, ps.host); err != nil {
			s.log.Warn("plugin sync: some plugins did not load", "err", err)
		}
		s.noteLoaded(lctx)
		applied.Store(rev)
	})
}

// noteLoaded records which stored plugins failed to load here, and unloads the plugins
// of tenants that no longer have any in the store (Sync only visits stored tenants).
func (s *Service) noteLoaded(ctx context.Context) {
	ps := s.pluginState()
	tenants, err := ps.store.Tenants(ctx)
	if err != nil {
		return
	}
	stored := map[string]bool{}
	for _, tenant := range tenants {
		stored[tenant] = true
		list, err := ps.store.List(ctx, tenant)
		if err != nil {
			continue
		}
		for _, sp := range list {
			loaded := false
			for _, info := range ps.host.List(tenant) {
				loaded = loaded || (info.Name == sp.Name && info.Version == sp.Version)
			}
			if loaded {
				s.recordLoad(tenant, sp.Name, nil)
			} else {
				s.recordLoad(tenant, sp.Name, ps.store.Apply(ctx, ps.host, tenant, sp.Name))
			}
		}
	}
	ps.mu.Lock()
	var gone []string
	for tenant := range ps.tenants {
		if !stored[tenant] {
			gone = append(gone, tenant)
		}
	}
	for tenant := range stored {
		ps.tenants[tenant] = true
	}
	ps.mu.Unlock()
	for _, tenant := range gone {
		for _, info := range ps.host.List(tenant) {
			_ = ps.host.Remove(tenant, info.Name)
		}
	}
}

func (s *Service) recordLoad(tenant, name string, err error) {
	ps := s.pluginState()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err == nil {
		delete(ps.loadErrors, tenant+"/"+name)
		return
	}
	ps.loadErrors[tenant+"/"+name] = err.Error()
	s.log.Warn("plugin did not load on this replica", "tenant", tenant, "plugin", name, "err", err)
}
