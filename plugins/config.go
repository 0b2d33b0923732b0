package plugins

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"time"
)

// Hook names: the exports a plugin provides and declares in Config.Hooks.
const (
	// HookOnEvent receives every event of the plugin's tenant (audit).
	HookOnEvent = "on_event"
	// HookDecideTTL decides a sandbox's new expiry on activity or renew.
	HookDecideTTL = "decide_ttl"
)

// Plugin is one tenant's plugin as the gateway stored it.
type Plugin struct {
	// Tenant owns the plugin; it only ever sees this tenant's events.
	Tenant string
	// Name identifies the plugin within its tenant; loading the same name
	// again replaces the previous version.
	Name string
	// Version is a free-form label (for example the upload's hash or a
	// counter) shown in List and Stats; the module's SHA-256 when empty.
	Version string
	// Module is the WebAssembly binary.
	Module []byte
	// Config is what the owner declared for the module.
	Config Config
}

// Config is a plugin's declaration: which hooks it implements, its limits
// and its settings.
type Config struct {
	// Hooks lists the hooks the module implements (HookOnEvent, HookDecideTTL).
	Hooks []string `json:"hooks"`
	// Limits bound each instance; zero fields take the host's defaults.
	Limits Limits `json:"limits,omitempty"`
	// Settings is a JSON object handed to the plugin (sandgate_configure and
	// the "settings" field of decide_ttl's input); "{}" when empty.
	Settings json.RawMessage `json:"settings,omitempty"`
}

// Limits bound one plugin. Zero means the host's default; values above the
// host's ceilings are refused rather than silently lowered.
type Limits struct {
	// MemoryMiB caps each instance's linear memory.
	MemoryMiB int `json:"memoryMiB,omitempty"`
	// TimeoutMs is the deadline of one hook call.
	TimeoutMs int `json:"timeoutMs,omitempty"`
	// PoolSize is the number of instances that may run concurrently.
	PoolSize int `json:"poolSize,omitempty"`
}

// maxTimeout caps Limits.TimeoutMs: a hook sits on the request path.
const maxTimeout = 5 * time.Second

// maxSettings caps the settings: they are copied into every decide_ttl input.
const maxSettings = 64 << 10

// maxPoolSize caps Limits.PoolSize; each instance holds its own memory.
const maxPoolSize = 64

var namePattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]{0,62})$`)

// resolved is a Config checked and completed with the host's defaults.
type resolved struct {
	onEvent, decideTTL bool
	hooks              []string
	memoryPages        uint32
	timeout            time.Duration
	poolSize           int
	settings           []byte
}

func (h *Host) resolve(cfg Config) (resolved, error) {
	var r resolved
	for _, hook := range cfg.Hooks {
		switch hook {
		case HookOnEvent:
			if r.onEvent {
				return r, newError(CodeInvalidConfig, nil, "hook %q declared twice", hook)
			}
			r.onEvent = true
		case HookDecideTTL:
			if r.decideTTL {
				return r, newError(CodeInvalidConfig, nil, "hook %q declared twice", hook)
			}
			r.decideTTL = true
		default:
			return r, newError(CodeInvalidConfig, nil, "unknown hook %q (want %q or %q)", hook, HookOnEvent, HookDecideTTL)
		}
	}
	if !r.onEvent && !r.decideTTL {
		return r, newError(CodeInvalidConfig, nil, "no hooks declared (want %q and/or %q)", HookOnEvent, HookDecideTTL)
	}
	if r.onEvent {
		r.hooks = append(r.hooks, HookOnEvent)
	}
	if r.decideTTL {
		r.hooks = append(r.hooks, HookDecideTTL)
	}

	lim := cfg.Limits
	switch maxMiB := int(h.opts.MaxMemoryPages / pagesPerMiB); {
	case lim.MemoryMiB < 0 || lim.MemoryMiB > maxMiB:
		return r, newError(CodeInvalidConfig, nil, "limits.memoryMiB %d out of range 1-%d", lim.MemoryMiB, maxMiB)
	case lim.MemoryMiB == 0:
		r.memoryPages = h.opts.MaxMemoryPages
	default:
		r.memoryPages = uint32(lim.MemoryMiB) * pagesPerMiB
	}
	switch {
	case lim.TimeoutMs < 0 || time.Duration(lim.TimeoutMs)*time.Millisecond > maxTimeout:
		return r, newError(CodeInvalidConfig, nil, "limits.timeoutMs %d out of range 1-%d", lim.TimeoutMs, maxTimeout.Milliseconds())
	case lim.TimeoutMs == 0:
		r.timeout = h.opts.DefaultDeadline
	default:
		r.timeout = time.Duration(lim.TimeoutMs) * time.Millisecond
	}
	switch {
	case lim.PoolSize < 0 || lim.PoolSize > maxPoolSize:
		return r, newError(CodeInvalidConfig, nil, "limits.poolSize %d out of range 1-%d", lim.PoolSize, maxPoolSize)
	case lim.PoolSize == 0:
		r.poolSize = h.opts.PoolSize
	default:
		r.poolSize = lim.PoolSize
	}

	settings := bytes.TrimSpace(cfg.Settings)
	if len(settings) == 0 || bytes.Equal(settings, []byte("null")) {
		settings = []byte("{}")
	}
	if len(settings) > maxSettings {
		return r, newError(CodeInvalidConfig, nil, "settings of %d bytes exceed %d", len(settings), maxSettings)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(settings, &obj); err != nil {
		return r, newError(CodeInvalidConfig, nil, "settings must be a JSON object: %v", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, settings); err != nil {
		return r, newError(CodeInvalidConfig, nil, "settings: %v", err)
	}
	r.settings = compact.Bytes()
	return r, nil
}

func checkIdentity(tenant, name string) error {
	if tenant == "" {
		return newError(CodeInvalidConfig, nil, "tenant is empty")
	}
	if !namePattern.MatchString(name) {
		return newError(CodeInvalidConfig, nil, "plugin name %q must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

func (r resolved) String() string {
	return fmt.Sprintf("hooks=%v memory=%dMiB timeout=%s pool=%d", r.hooks, r.memoryPages/pagesPerMiB, r.timeout, r.poolSize)
}
