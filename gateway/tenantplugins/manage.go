package tenantplugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
)

// CodeDisabled answers plugin routes of a gateway built without a plugin host.
const CodeDisabled = "PLUGIN::DISABLED"

// MaxUploadBytes bounds a whole upload request (module, config and multipart framing);
// the plugin host bounds the module itself (plugins.HostOptions.MaxModuleBytes).
const MaxUploadBytes = plugins.DefaultMaxModuleBytes + 1<<20

// Stats is how one plugin's calls went on the replica that answers: the host's
// counters as they are, durations in milliseconds.
type Stats struct {
	plugins.Calls
	P50Ms       float64    `json:"p50Ms"`
	P99Ms       float64    `json:"p99Ms"`
	LastError   string     `json:"lastError,omitempty"`
	LastErrorAt *time.Time `json:"lastErrorAt,omitempty"`
}

// Status is a plugin as the API shows it: what was stored and how it runs here.
type Status struct {
	Name      string          `json:"name"`
	Version   string          `json:"version"`
	Hash      string          `json:"hash"`
	Hooks     []string        `json:"hooks"`
	Limits    plugins.Limits  `json:"limits"`
	Settings  json.RawMessage `json:"settings,omitempty"`
	UpdatedAt time.Time       `json:"updatedAt"`
	// Loaded says whether this replica runs the stored version; LoadError says why not.
	Loaded    bool   `json:"loaded"`
	LoadError string `json:"loadError,omitempty"`
	Stats     *Stats `json:"stats,omitempty"`
}

// attached is the error of a management operation on a Manager without a host.
func (m *Manager) attached() error {
	if m.host == nil {
		return fault.Errorf(fault.KindUnavailable, CodeDisabled, "this gateway runs without a plugin host")
	}
	return nil
}

// pluginError maps a plugins error to its kind, keeping the plugin's stable code.
func pluginError(err error) error {
	var pe *plugins.Error
	if !errors.As(err, &pe) {
		// Anything else comes from the plugin store, that is from Redis.
		return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	kind := fault.KindUnprocessable
	switch pe.Code {
	case plugins.CodeInvalidConfig:
		kind = fault.KindInvalid
	case plugins.CodeHookConflict, plugins.CodeTooManyPlugins, plugins.CodeTenantMemory:
		kind = fault.KindConflict
	case plugins.CodeModuleTooLarge:
		kind = fault.KindTooLarge
	case plugins.CodeNotFound:
		kind = fault.KindNotFound
	case plugins.CodeClosed:
		kind = fault.KindUnavailable
	case plugins.CodeTimeout, plugins.CodeTrap, plugins.CodeMemoryLimit, plugins.CodeBadOutput:
		kind = fault.KindUnprocessable
	}
	return &fault.Error{Kind: kind, Code: pe.Code, Message: pe.Message, Cause: err}
}

// Put validates a module and its configuration (JSON {"hooks","limits","settings"}),
// loads it on this replica (replacing the tenant's plugin of that name without losing
// queued events) and stores it so that every replica loads it.
func (m *Manager) Put(ctx context.Context, caller principal.Caller, name string, module, config []byte) (*Status, error) {
	if err := m.attached(); err != nil {
		return nil, err
	}
	var cfg plugins.Config
	dec := json.NewDecoder(strings.NewReader(string(config)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fault.Errorf(fault.KindInvalid, plugins.CodeInvalidConfig, "the config part is not the JSON object {\"hooks\",\"limits\",\"settings\"}: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if len(module) == 0 {
		return nil, fault.Errorf(fault.KindInvalid, plugins.CodeInvalidModule, "the module part is missing or empty")
	}
	if max := m.host.MaxModuleBytes(); len(module) > max {
		return nil, fault.Errorf(fault.KindTooLarge, plugins.CodeModuleTooLarge, "the module has %d bytes; at most %d are allowed", len(module), max)
	}
	// The store is what every replica loads, so it is what the count is checked against.
	stored, err := m.store.List(ctx, caller.Tenant)
	if err != nil {
		return nil, pluginError(err)
	}
	if max := m.host.MaxPluginsPerTenant(); len(stored) >= max && !slices.ContainsFunc(stored, func(sp plugins.StoredPlugin) bool { return sp.Name == name }) {
		return nil, fault.Errorf(fault.KindConflict, plugins.CodeTooManyPlugins, "the tenant already has %d plugins, the most allowed; remove one first", max)
	}
	// Load validates as Validate would, so the module is compiled once, not twice.
	p := plugins.Plugin{Tenant: caller.Tenant, Name: name, Version: version(module, cfg), Module: module, Config: cfg}
	if err := m.host.Load(ctx, p); err != nil {
		return nil, pluginError(err)
	}
	if _, err := m.store.Put(ctx, p); err != nil {
		// Put bumps the revision before announcing; whatever landed, make this replica
		// match the store again.
		_ = m.store.Apply(context.WithoutCancel(ctx), m.host, caller.Tenant, name)
		return nil, pluginError(err)
	}
	m.mu.Lock()
	m.tenants[caller.Tenant] = true
	delete(m.loadErrors, caller.Tenant+"/"+name)
	m.mu.Unlock()
	m.log.Info("plugin stored", "tenant", caller.Tenant, "plugin", name, "version", p.Version, "key", caller.KeyID)
	return m.Get(ctx, caller, name)
}

// version names a module and configuration together, so that replicas reload a plugin
// whose settings changed even when its bytes did not.
func version(module []byte, cfg plugins.Config) string {
	h := sha256.New()
	h.Write(module)
	c, _ := json.Marshal(cfg)
	h.Write(c)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// List returns the caller's tenant's plugins with this replica's statistics.
func (m *Manager) List(ctx context.Context, caller principal.Caller) ([]Status, error) {
	if err := m.attached(); err != nil {
		return nil, err
	}
	stored, err := m.store.List(ctx, caller.Tenant)
	if err != nil {
		return nil, pluginError(err)
	}
	out := make([]Status, 0, len(stored))
	for _, sp := range stored {
		out = append(out, m.status(caller.Tenant, sp))
	}
	return out, nil
}

// Get returns one plugin of the caller's tenant.
func (m *Manager) Get(ctx context.Context, caller principal.Caller, name string) (*Status, error) {
	if err := m.attached(); err != nil {
		return nil, err
	}
	stored, err := m.store.List(ctx, caller.Tenant)
	if err != nil {
		return nil, pluginError(err)
	}
	for _, sp := range stored {
		if sp.Name == name {
			st := m.status(caller.Tenant, sp)
			return &st, nil
		}
	}
	return nil, fault.Errorf(fault.KindNotFound, plugins.CodeNotFound, "no plugin %q for this tenant", name)
}

// Delete removes a plugin from the store (so from every replica) and from this one.
func (m *Manager) Delete(ctx context.Context, caller principal.Caller, name string) error {
	if err := m.attached(); err != nil {
		return err
	}
	if _, err := m.store.Delete(ctx, caller.Tenant, name); err != nil {
		return pluginError(err)
	}
	if err := m.host.Remove(caller.Tenant, name); err != nil && !errors.Is(err, plugins.ErrNotFound) {
		m.log.Warn("unload plugin", "tenant", caller.Tenant, "plugin", name, "err", err)
	}
	m.mu.Lock()
	delete(m.loadErrors, caller.Tenant+"/"+name)
	m.mu.Unlock()
	m.log.Info("plugin deleted", "tenant", caller.Tenant, "plugin", name, "key", caller.KeyID)
	return nil
}

func (m *Manager) status(tenant string, sp plugins.StoredPlugin) Status {
	st := Status{Name: sp.Name, Version: sp.Version, Hash: sp.Hash, Hooks: sp.Config.Hooks, Limits: sp.Config.Limits,
		Settings: sp.Config.Settings, UpdatedAt: sp.UpdatedAt}
	if st.Hooks == nil {
		st.Hooks = []string{}
	}
	if stats, err := m.host.Stats(tenant, sp.Name); err == nil {
		st.Loaded = stats.Version == sp.Version
		calls := &Stats{Calls: stats.Calls,
			P50Ms: float64(stats.P50.Microseconds()) / 1000, P99Ms: float64(stats.P99.Microseconds()) / 1000, LastError: stats.LastError}
		if !stats.LastErrorAt.IsZero() {
			at := stats.LastErrorAt.UTC()
			calls.LastErrorAt = &at
		}
		st.Stats = calls
	}
	m.mu.Lock()
	st.LoadError = m.loadErrors[tenant+"/"+sp.Name]
	m.mu.Unlock()
	return st
}
