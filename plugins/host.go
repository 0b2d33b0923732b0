package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
)

// HostOptions configure a Host. Zero fields take the documented defaults.
type HostOptions struct {
	// CacheDir, when set, keeps compiled machine code on disk so that a
	// restarted gateway does not compile the same modules again.
	CacheDir string
	// MaxMemoryPages is the ceiling of any plugin's memory (64 KiB pages)
	// and the default limit for plugins that set none. Default 2048 (128 MiB).
	MaxMemoryPages uint32
	// DefaultDeadline bounds a hook call of a plugin that sets no
	// limits.timeoutMs. Default 100 ms.
	DefaultDeadline time.Duration
	// PoolSize is the default number of instances per plugin. Default 2.
	PoolSize int
	// QueueSize bounds the events waiting for each on_event plugin; more are
	// dropped and counted. Default 1024.
	QueueSize int
	// IdleTimeout, when positive, closes instances that have not been used
	// for that long, to give their memory back (a Go-built instance holds
	// a few MiB); the plugin stays loaded and its next call starts a new
	// instance, which costs milliseconds. Zero keeps instances forever.
	IdleTimeout time.Duration
	// Logger receives the plugins' log lines and the host's own warnings.
	// Default: discard.
	Logger *slog.Logger
	// MaxModuleBytes bounds a module's size: compiling takes time and memory
	// in proportion to it. Default 16 MiB (Go-built plugins weigh 2–4 MiB).
	MaxModuleBytes int
	// CompileTimeout bounds compiling one module; a module that takes longer
	// is refused with CodeCompileTimeout. Default 20 s.
	CompileTimeout time.Duration
	// MaxPluginsPerTenant bounds how many plugins one tenant may have loaded
	// at once. Default 8.
	MaxPluginsPerTenant int
	// MaxTenantMemoryMiB bounds the memory one tenant's plugins may hold at
	// once: the sum over its plugins of poolSize × memory limit. Default
	// 2048 (8 plugins at the default limits).
	MaxTenantMemoryMiB int
	// Audit receives each record a plugin emits with emit_audit, already
	// checked to be JSON and copied. It runs on the plugin's call path, so it
	// must not block; nil drops the records.
	Audit func(tenant string, record []byte)
}

// DefaultMaxModuleBytes is HostOptions.MaxModuleBytes when unset.
const DefaultMaxModuleBytes = 16 << 20

const (
	defaultMaxMemoryPages = 2048
	defaultDeadline       = 100 * time.Millisecond
	defaultPoolSize       = 2
	defaultQueueSize      = 1024
	defaultCompileTimeout = 20 * time.Second
	defaultMaxPlugins     = 8
	defaultTenantMemory   = 2048
	// compileWorkers is the number of goroutines one compilation uses. More
	// than one also makes wazero check the context between functions, which
	// is what lets CompileTimeout stop a compilation.
	compileWorkers = 2
	// initTimeout bounds a module's start function and sandgate_configure:
	// starting the Go runtime takes milliseconds, not the microseconds a
	// hook gets.
	initTimeout = 2 * time.Second
)

// Host runs plugins. It is safe for concurrent use.
type Host struct {
	opts  HostOptions
	cache wazero.CompilationCache

	// ctx is the parent of every event delivery; abort cancels it when
	// Close runs out of time.
	ctx   context.Context
	abort context.CancelFunc

	mu       sync.Mutex // guards the maps below and closed
	engines  map[uint32]*engine
	compiled map[compiledKey]*compiled
	slots    map[slotKey]*slot
	closed   bool

	routes atomic.Pointer[routes]

	// compiling admits one compilation at a time: its memory peaks at many
	// times the module's size, so concurrent uploads must not add up.
	compiling chan struct{}

	// background counts goroutines that use a runtime outside any call
	// (retiring versions, replenishing pools); Close waits for them before
	// closing the runtimes under them.
	background sync.WaitGroup

	stopJanitor chan struct{}
	janitorDone chan struct{}
}

type slotKey struct{ tenant, name string }

// routes is an immutable index rebuilt on every Load and Remove, so the hot
// paths (OnEvent, DecideTTL) take no lock.
type routes struct {
	events map[string][]*slot // tenant → plugins with on_event
	ttl    map[string]*slot   // tenant → its decide_ttl plugin
}

// defaultIfUnset sets *v to def when it is zero or negative (an option left unset).
func defaultIfUnset[T ~int | ~int64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// NewHost creates a host. ctx is used only for setting up.
func NewHost(ctx context.Context, opts HostOptions) (*Host, error) {
	if opts.MaxMemoryPages == 0 {
		opts.MaxMemoryPages = defaultMaxMemoryPages
	}
	if opts.MaxMemoryPages > 65536 {
		return nil, fmt.Errorf("plugins: MaxMemoryPages %d exceeds the 4 GiB of wasm32", opts.MaxMemoryPages)
	}
	if opts.MaxMemoryPages < pagesPerMiB {
		return nil, fmt.Errorf("plugins: MaxMemoryPages %d is below 1 MiB", opts.MaxMemoryPages)
	}
	defaultIfUnset(&opts.DefaultDeadline, defaultDeadline)
	defaultIfUnset(&opts.PoolSize, defaultPoolSize)
	defaultIfUnset(&opts.QueueSize, defaultQueueSize)
	defaultIfUnset(&opts.MaxModuleBytes, DefaultMaxModuleBytes)
	defaultIfUnset(&opts.CompileTimeout, defaultCompileTimeout)
	defaultIfUnset(&opts.MaxPluginsPerTenant, defaultMaxPlugins)
	defaultIfUnset(&opts.MaxTenantMemoryMiB, defaultTenantMemory)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cache := wazero.NewCompilationCache()
	if opts.CacheDir != "" {
		var err error
		if cache, err = wazero.NewCompilationCacheWithDir(opts.CacheDir); err != nil {
			return nil, fmt.Errorf("plugins: compilation cache in %s: %w", opts.CacheDir, err)
		}
	}
	h := &Host{
		opts:     opts,
		cache:    cache,
		engines:  make(map[uint32]*engine),
		compiled: make(map[compiledKey]*compiled),
		slots:    make(map[slotKey]*slot),

		compiling: make(chan struct{}, 1),
	}
	h.ctx, h.abort = context.WithCancel(context.WithoutCancel(ctx))
	h.routes.Store(&routes{})
	h.stopJanitor, h.janitorDone = make(chan struct{}), make(chan struct{})
	go h.janitor()
	return h, nil
}

func (h *Host) now() time.Time { return time.Now() }

// MaxModuleBytes is the largest module the host accepts.
func (h *Host) MaxModuleBytes() int { return h.opts.MaxModuleBytes }

// MaxPluginsPerTenant is how many plugins one tenant may have loaded.
func (h *Host) MaxPluginsPerTenant() int { return h.opts.MaxPluginsPerTenant }

// Validate checks module and cfg the way Load would, without loading
// anything: the module compiles, imports only what the host offers,
// exports the ABI functions and the declared hooks with the right types,
// speaks ABI version 1 and accepts its settings. The error is an *Error
// whose Code says what is wrong.
func (h *Host) Validate(module []byte, cfg Config) error {
	ctx := context.Background()
	r, err := h.resolve(cfg)
	if err != nil {
		return err
	}
	c, err := h.acquireCompiled(ctx, module, r)
	if err != nil {
		return err
	}
	defer h.releaseCompiled(ctx, c)
	probe := &slot{host: h, name: "validate"}
	inst, err := h.instantiate(ctx, c, probe, r.settings)
	if err != nil {
		return err
	}
	inst.close(ctx)
	return nil
}

// Load validates p and makes it the tenant's plugin of that name, replacing
// any previous version: calls already running finish on the old version and
// queued events are delivered by the new one, so none is lost.
func (h *Host) Load(ctx context.Context, p Plugin) error {
	if err := checkIdentity(p.Tenant, p.Name); err != nil {
		return err
	}
	r, err := h.resolve(p.Config)
	if err != nil {
		return err
	}
	key := slotKey{p.Tenant, p.Name}
	// Refuse a plugin over the count before paying for its compilation; the
	// check is made again below, under the lock that publishes it.
	h.mu.Lock()
	err = h.checkTenantRoom(key, r)
	h.mu.Unlock()
	if err != nil {
		return err
	}
	c, err := h.acquireCompiled(ctx, p.Module, r)
	if err != nil {
		return err
	}
	h.mu.Lock()
	s := h.slots[key]
	fresh := s == nil
	if fresh {
		s = &slot{host: h, tenant: p.Tenant, name: p.Name}
	}
	h.mu.Unlock()

	v := &version{
		cfg:      r,
		compiled: c,
		pool:     newPool(r.poolSize),
		info: Info{
			Tenant: p.Tenant, Name: p.Name, Version: p.Version, Hash: c.key.hash,
			Hooks: slices.Clone(r.hooks), LoadedAt: h.now().UTC(),
		},
	}
	if v.info.Version == "" {
		v.info.Version = c.key.hash
	}
	// The first instance proves that the module runs (ABI version,
	// settings) and keeps the pool warm for the first call.
	inst, err := h.instantiate(ctx, c, s, r.settings)
	if err != nil {
		h.releaseCompiled(ctx, c)
		return err
	}
	v.pool.tokens <- struct{}{}

	h.mu.Lock()
	cur := h.slots[key]
	switch {
	case h.closed:
		err = ErrClosed
	case cur == nil && !fresh:
		err = newError(CodeNotFound, nil, "plugin %q was removed while it was loading", p.Name)
	case r.decideTTL:
		for k, other := range h.slots {
			if k.tenant == p.Tenant && k.name != p.Name && other.hasHook(HookDecideTTL) {
				err = newError(CodeHookConflict, nil, "tenant already has a %s plugin (%q); remove it first", HookDecideTTL, k.name)
				break
			}
		}
	}
	if err == nil {
		err = h.checkTenantRoom(key, r)
	}
	if err == nil {
		if cur == nil {
			h.slots[key] = s
			s.start()
		} else {
			s = cur // the same slot, or one a concurrent Load created
		}
	}
	inst.owner, v.slot = s, s
	v.pool.put(inst)
	if err != nil {
		h.mu.Unlock()
		// Never published, so nothing else can hold v: close it here
		// rather than through retire, which Close may no longer wait for.
		v.pool.drain(ctx)
		h.releaseCompiled(ctx, c)
		return err
	}
	old := s.current.Swap(v)
	h.rebuildRoutes()
	if old != nil {
		old.retire()
	}
	h.mu.Unlock()
	h.opts.Logger.Info("plugin loaded", "tenant", p.Tenant, "plugin", p.Name, "version", v.info.Version, "config", r.String())
	return nil
}

// Remove unloads a plugin. Events already queued for it are still
// delivered, in the background; then its instances are closed.
func (h *Host) Remove(tenant, name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.slots[slotKey{tenant, name}]
	if s == nil {
		return newError(CodeNotFound, nil, "no plugin %q for this tenant", name)
	}
	delete(h.slots, slotKey{tenant, name})
	h.rebuildRoutes()
	s.stopWorker()
	return nil
}

// List describes the tenant's loaded plugins, sorted by name.
func (h *Host) List(tenant string) []Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Info
	for k, s := range h.slots {
		if k.tenant != tenant {
			continue
		}
		if v := s.current.Load(); v != nil {
			out = append(out, v.info)
		}
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Stats returns one plugin's statistics.
func (h *Host) Stats(tenant, name string) (Stats, error) {
	h.mu.Lock()
	s := h.slots[slotKey{tenant, name}]
	h.mu.Unlock()
	if s == nil {
		return Stats{}, newError(CodeNotFound, nil, "no plugin %q for this tenant", name)
	}
	var st Stats
	if v := s.current.Load(); v != nil {
		st.Info = v.info
		st.Instances = v.pool.size()
	}
	s.counters.snapshot(&st)
	st.Queued = len(s.queue)
	return st, nil
}

// Close stops accepting events, delivers those already queued until ctx is
// done (then drops the rest), and releases every instance and runtime.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.stopJanitor)
	slots := make([]*slot, 0, len(h.slots))
	for _, s := range h.slots {
		slots = append(slots, s)
		s.stopWorker()
	}
	h.slots = map[slotKey]*slot{}
	h.routes.Store(&routes{})
	h.mu.Unlock()

	var err error
	for _, s := range slots {
		select {
		case <-s.done:
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("plugins: close: %w; dropping queued events", ctx.Err())
				h.abort()
			}
			<-s.done
		}
	}
	<-h.janitorDone
	// Workers retire their versions once drained; wait for those
	// retirements (they wait for calls in flight) and for background
	// instantiations, then cancel whatever still runs.
	idle := make(chan struct{})
	go func() {
		h.background.Wait()
		close(idle)
	}()
	select {
	case <-idle:
	case <-ctx.Done():
		if err == nil {
			err = fmt.Errorf("plugins: close: %w; closing instances in use", ctx.Err())
		}
	}
	h.abort()
	h.mu.Lock()
	engines := h.engines
	h.engines = map[uint32]*engine{}
	h.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	for _, e := range engines {
		err = errors.Join(err, e.rt.Close(bg))
	}
	return errors.Join(err, h.cache.Close(bg))
}

// janitor closes idle instances when HostOptions.IdleTimeout is set.
func (h *Host) janitor() {
	defer close(h.janitorDone)
	if h.opts.IdleTimeout <= 0 {
		<-h.stopJanitor
		return
	}
	tick := time.NewTicker(max(h.opts.IdleTimeout/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-h.stopJanitor:
			return
		case <-tick.C:
		}
		h.mu.Lock()
		slots := make([]*slot, 0, len(h.slots))
		for _, s := range h.slots {
			slots = append(slots, s)
		}
		h.mu.Unlock()
		cutoff := time.Now().Add(-h.opts.IdleTimeout)
		for _, s := range slots {
			if v := s.acquire(); v != nil {
				v.pool.trim(h.ctx, cutoff)
				v.release()
			}
		}
	}
}

// checkTenantRoom refuses a plugin that would take its tenant past the plugin
// count or the memory budget; replacing a plugin counts the new version in
// place of the old. h.mu must be held.
func (h *Host) checkTenantRoom(key slotKey, r resolved) error {
	plugins, pages := 0, uint64(r.poolSize)*uint64(r.memoryPages)
	for k, s := range h.slots {
		if k.tenant != key.tenant || k == key {
			continue
		}
		plugins++
		if v := s.current.Load(); v != nil {
			pages += uint64(v.cfg.poolSize) * uint64(v.cfg.memoryPages)
		}
	}
	if h.slots[key] == nil && plugins >= h.opts.MaxPluginsPerTenant {
		return newError(CodeTooManyPlugins, nil, "the tenant already has %d plugins, the most allowed; remove one first", h.opts.MaxPluginsPerTenant)
	}
	if mib := pages / pagesPerMiB; mib > uint64(h.opts.MaxTenantMemoryMiB) {
		return newError(CodeTenantMemory, nil, "the tenant's plugins would hold up to %d MiB (poolSize × memory limit of each), more than the %d MiB allowed; lower limits.poolSize or limits.memoryMiB", mib, h.opts.MaxTenantMemoryMiB)
	}
	return nil
}

// rebuildRoutes publishes a new routing index; h.mu must be held.
func (h *Host) rebuildRoutes() {
	r := &routes{events: map[string][]*slot{}, ttl: map[string]*slot{}}
	for k, s := range h.slots {
		if s.hasHook(HookOnEvent) {
			r.events[k.tenant] = append(r.events[k.tenant], s)
		}
		if s.hasHook(HookDecideTTL) {
			r.ttl[k.tenant] = s
		}
	}
	h.routes.Store(r)
}

// engineFor returns the runtime for a memory limit, creating it once, and
// takes a reference on it that releaseEngine gives back.
func (h *Host) engineFor(ctx context.Context, pages uint32) (*engine, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if e := h.engines[pages]; e != nil {
		e.refs++
		return e, nil
	}
	e, err := h.newEngine(ctx, pages)
	if err != nil {
		return nil, fmt.Errorf("plugins: runtime for %d pages: %w", pages, err)
	}
	e.refs = 1
	h.engines[pages] = e
	return e, nil
}

// releaseEngine drops a reference taken by engineFor and closes the runtime
// when no compiled module uses it any more, so that a tenant trying many
// memory limits does not leave a runtime behind for each; h.mu must be held.
func (h *Host) releaseEngine(ctx context.Context, e *engine) {
	e.refs--
	if e.refs > 0 || h.engines[e.pages] != e {
		return // still in use, or Close took it (and closes it)
	}
	delete(h.engines, e.pages)
	_ = e.rt.Close(context.WithoutCancel(ctx))
}

// acquireCompiled returns the compiled module for these bytes and memory
// limit, compiling it only when no loaded plugin shares it. Compilations run
// one at a time, each within HostOptions.CompileTimeout.
func (h *Host) acquireCompiled(ctx context.Context, module []byte, r resolved) (*compiled, error) {
	if len(module) > h.opts.MaxModuleBytes {
		return nil, newError(CodeModuleTooLarge, nil, "the module has %d bytes; at most %d are allowed", len(module), h.opts.MaxModuleBytes)
	}
	key := compiledKey{hash: moduleHash(module), pages: r.memoryPages}
	if c, ok, err := h.sharedCompiled(key, r); ok || err != nil {
		return c, err
	}

	wait, cancelWait := context.WithTimeout(ctx, h.opts.CompileTimeout)
	select {
	case h.compiling <- struct{}{}:
		cancelWait()
	case <-wait.Done():
		cancelWait()
		return nil, newError(CodeCompileTimeout, wait.Err(), "other modules were compiling for longer than %s; try again", h.opts.CompileTimeout)
	}
	defer func() { <-h.compiling }()
	// Whoever held the turn may have compiled these very bytes.
	if c, ok, err := h.sharedCompiled(key, r); ok || err != nil {
		return c, err
	}

	e, err := h.engineFor(ctx, r.memoryPages)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(experimental.WithCompilationWorkers(ctx, compileWorkers), h.opts.CompileTimeout)
	mod, err := compileModule(cctx, e, module, r)
	timedOut := errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	cancel()
	if err != nil {
		h.mu.Lock()
		h.releaseEngine(ctx, e)
		h.mu.Unlock()
		if timedOut {
			return nil, newError(CodeCompileTimeout, err, "the module did not compile within %s", h.opts.CompileTimeout)
		}
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := &compiled{key: key, engine: e, mod: mod, refs: 1}
	h.compiled[key] = c
	return c, nil
}

// sharedCompiled takes a reference on an already compiled module; ok is
// false when there is none.
func (h *Host) sharedCompiled(key compiledKey, r resolved) (c *compiled, ok bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c = h.compiled[key]
	if c == nil {
		return nil, false, nil
	}
	// The hooks were checked against exports when it was first compiled,
	// but this config may declare others.
	if err := checkModule(c.mod, r); err != nil {
		return nil, false, err
	}
	c.refs++
	return c, true, nil
}

// releaseCompiled drops a reference; the last one closes the compiled module,
// which frees its machine code, and its engine's reference.
func (h *Host) releaseCompiled(ctx context.Context, c *compiled) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c.refs--
	if c.refs == 0 {
		delete(h.compiled, c.key)
		c.mod.Close(context.WithoutCancel(ctx))
		h.releaseEngine(ctx, c.engine)
	}
}

// instantiate creates one instance for owner s with the init deadline.
func (h *Host) instantiate(ctx context.Context, c *compiled, s *slot, settings []byte) (*instance, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), initTimeout)
	defer cancel()
	return instantiate(ctx, c, s, settings)
}
