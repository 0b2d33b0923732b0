package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// The queries the gateway's questions evaluate: a policy lacking any of
// these rules is refused at load.
const (
	AccessQuery    = "data.sandgate.access.decision"
	AdmissionQuery = "data.sandgate.admission.deny"
	EgressQuery    = "data.sandgate.egress.decision"
)

// DefaultPollInterval is how often Watch looks at the policy directory.
const DefaultPollInterval = 500 * time.Millisecond

// Options configure an Engine. They are read once, by New.
type Options struct {
	// Dir is the operator's directory of .rego modules and .json/.yaml data,
	// loaded in addition to the embedded defaults; empty means defaults only.
	Dir string
	// Data is platform data mounted at data.sandgate.platform, e.g.
	// gateway_addresses, always_deny, always_allow (lists of egress
	// targets), default_action, max_rules, suspended_tenants, denied_images.
	Data map[string]any
	// Logger receives reloads, refused policies and evaluation failures;
	// nil means slog.Default().
	Logger *slog.Logger
	// PollInterval is Watch's period; zero means DefaultPollInterval.
	PollInterval time.Duration
}

// Engine evaluates sandgate's policies. It is safe for concurrent use; the
// policy version in force is swapped atomically on reload.
type Engine struct {
	dir          string
	logger       *slog.Logger
	pollInterval time.Duration
	// ticks, when set, is Watch's clock instead of a ticker of pollInterval: a test
	// ticks it by hand and knows when a look has happened.
	ticks <-chan time.Time

	current atomic.Pointer[version]

	mu       sync.Mutex // serializes loads; guards the fields below
	platform map[string]any
	// overrides are modules stored outside the directory (the policy API keeps
	// them in Redis), by name; they win over directory files of the same name.
	overrides map[string]string
	counter   uint64
	lastErr   error
}

// version is one compiled policy with its prepared queries.
type version struct {
	id        string
	digest    string
	modules   []Module
	set       sourceSet      // what it was built from, for Explain
	data      map[string]any // the data document it serves
	compiler  *ast.Compiler
	store     storage.Store
	access    rego.PreparedEvalQuery
	admission rego.PreparedEvalQuery
	egress    rego.PreparedEvalQuery
	maxRules  int
	// accessCache remembers access decisions; nil when the policy is non-deterministic.
	accessCache *accessCache
}

// New loads and compiles the default policy plus the operator's directory.
// Unlike a reload, a broken policy here is an error: there is no previous
// version to keep serving.
func New(ctx context.Context, opts Options) (*Engine, error) {
	e := &Engine{dir: opts.Dir, logger: opts.Logger, pollInterval: opts.PollInterval}
	if e.logger == nil {
		e.logger = slog.Default()
	}
	if e.pollInterval <= 0 {
		e.pollInterval = DefaultPollInterval
	}
	platform, err := jsonRoundTrip(opts.Data)
	if err != nil {
		return nil, fmt.Errorf("policy platform data: %w", err)
	}
	if err := validatePlatformData(platform); err != nil {
		return nil, fmt.Errorf("policy platform data: %w", err)
	}
	e.platform = platform
	if err := e.reload(ctx, true); err != nil {
		return nil, err
	}
	return e, nil
}

// Version identifies the policy in force: "<n>-<digest prefix>", where n
// counts the versions this engine has loaded.
func (e *Engine) Version() string { return e.current.Load().id }

// Modules returns the Rego modules in force (tests excluded), sorted by name.
func (e *Engine) Modules() []Module {
	return append([]Module(nil), e.current.Load().modules...)
}

// LastError is the reason the most recent load was refused, nil when the
// most recent load succeeded.
func (e *Engine) LastError() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastErr
}

// Reload re-reads the directory and swaps in the new version when it
// changed. On error the previous version keeps serving.
func (e *Engine) Reload(ctx context.Context) error { return e.reload(ctx, false) }

// SetPlatformData replaces the platform data (data.sandgate.platform from
// Options.Data) and recompiles.
func (e *Engine) SetPlatformData(ctx context.Context, data map[string]any) error {
	platform, err := jsonRoundTrip(data)
	if err != nil {
		return fmt.Errorf("policy platform data: %w", err)
	}
	if err := validatePlatformData(platform); err != nil {
		return fmt.Errorf("policy platform data: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.platform
	e.platform = platform
	if err := e.loadLocked(ctx); err != nil {
		e.platform = old
		return err
	}
	return nil
}

func (e *Engine) reload(ctx context.Context, initial bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	err := e.loadLocked(ctx)
	e.lastErr = err
	if err != nil && !initial {
		e.logger.Error("policy refused; the previous version keeps serving",
			"dir", e.dir, "version", e.current.Load().id, "error", err)
	}
	return err
}

func (e *Engine) loadLocked(ctx context.Context) error {
	set, err := loadSources(e.dir, false, e.overrideModules())
	if err != nil {
		return err
	}
	data := mergeData(set.data, e.platform)
	if err := validatePlatformData(platformOf(data)); err != nil {
		return fmt.Errorf("policy data: %w", err)
	}
	sum, err := digest(set, data)
	if err != nil {
		return err
	}
	if cur := e.current.Load(); cur != nil && cur.digest == sum {
		return nil
	}
	v, err := build(ctx, set, data)
	if err != nil {
		return err
	}
	e.counter++
	v.digest = sum
	v.id = fmt.Sprintf("%d-%s", e.counter, sum[:12])
	e.current.Store(v)
	e.logger.Info("policy loaded", "version", v.id, "modules", len(v.modules), "dir", e.dir)
	return nil
}

// build compiles a source set once and prepares the three queries on it.
func build(ctx context.Context, set sourceSet, data map[string]any) (*version, error) {
	compiler, err := compile(set, false)
	if err != nil {
		return nil, err
	}
	store := inmem.NewFromObject(data)
	v := &version{modules: set.modules, set: set, data: data, compiler: compiler, store: store, maxRules: maxRulesOf(data),
		accessCache: newAccessCache(compiler, set.modules)}
	for _, q := range []struct {
		query string
		into  *rego.PreparedEvalQuery
	}{
		{AccessQuery, &v.access},
		{AdmissionQuery, &v.admission},
		{EgressQuery, &v.egress},
	} {
		pq, err := rego.New(
			rego.Compiler(compiler),
			rego.Store(store),
			rego.Query(q.query),
			rego.StrictBuiltinErrors(true),
		).PrepareForEval(ctx)
		if err != nil {
			return nil, fmt.Errorf("prepare %s: %w", q.query, err)
		}
		*q.into = pq
	}
	return v, nil
}

// compile compiles the modules and checks that the entry points exist.
func compile(set sourceSet, enablePrint bool) (*ast.Compiler, error) {
	compiler := ast.NewCompiler().
		WithDefaultRegoVersion(ast.RegoV1).
		WithEnablePrintStatements(enablePrint)
	compiler.Compile(set.parsed)
	if compiler.Failed() {
		return nil, newCompileError(compiler.Errors)
	}
	var missing []string
	for _, q := range []string{AccessQuery, AdmissionQuery, EgressQuery} {
		if len(compiler.GetRulesExact(ast.MustParseRef(q))) == 0 {
			missing = append(missing, q)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("policy lacks required rules: %s", strings.Join(missing, ", "))
	}
	return compiler, nil
}

// platformOf returns data.sandgate.platform, nil when absent.
func platformOf(data map[string]any) map[string]any {
	sg, _ := data["sandgate"].(map[string]any)
	platform, _ := sg["platform"].(map[string]any)
	return platform
}

func maxRulesOf(data map[string]any) int {
	platform := platformOf(data)
	if n, ok := asNumber(platform["max_rules"]); ok && n > 0 {
		return int(n)
	}
	return DefaultMaxEgressRules
}

// SourceError is one problem in a Rego source, located for an editor.
type SourceError struct {
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

// CompileError lists every problem a policy failed to compile with.
type CompileError struct {
	Errors []SourceError
}

func (e *CompileError) Error() string {
	parts := make([]string, 0, len(e.Errors))
	for _, se := range e.Errors {
		if se.File != "" {
			parts = append(parts, fmt.Sprintf("%s:%d:%d: %s", se.File, se.Line, se.Column, se.Message))
		} else {
			parts = append(parts, se.Message)
		}
	}
	return "policy does not compile: " + strings.Join(parts, "; ")
}

func newCompileError(errs ast.Errors) *CompileError {
	out := &CompileError{}
	for _, err := range errs {
		se := SourceError{Code: err.Code, Message: err.Message}
		if err.Location != nil {
			se.File, se.Line, se.Column = err.Location.File, err.Location.Row, err.Location.Col
		}
		out.Errors = append(out.Errors, se)
	}
	return out
}

// asCompileError turns parse and compile failures into a CompileError.
func asCompileError(err error) error {
	var ce *CompileError
	if errors.As(err, &ce) {
		return ce
	}
	var astErrs ast.Errors
	if errors.As(err, &astErrs) {
		return newCompileError(astErrs)
	}
	return err
}

// Validate checks a module as if it were saved in the policy directory under
// name (a slash-separated relative path ending in .rego), together with
// everything else in force. It returns nil or a *CompileError with lines and
// columns, for an editor.
func (e *Engine) Validate(ctx context.Context, name, src string) error {
	if err := checkModuleName(name); err != nil {
		return err
	}
	e.mu.Lock()
	platform := e.platform
	extras := append(e.overrideModules(), Module{Name: name, Source: src})
	e.mu.Unlock()
	set, err := loadSources(e.dir, false, extras)
	if err != nil {
		return asCompileError(err)
	}
	if _, err := build(ctx, set, mergeData(set.data, platform)); err != nil {
		return asCompileError(err)
	}
	return nil
}

// SetModule validates a module and, when it compiles with the rest, writes
// it to the policy directory and reloads. Saving under the file name of a
// default module in the same package overrides that module.
func (e *Engine) SetModule(ctx context.Context, name, src string) error {
	if e.dir == "" {
		return errors.New("set policy module: no policy directory configured")
	}
	if err := e.Validate(ctx, name, src); err != nil {
		return err
	}
	target := filepath.Join(e.dir, filepath.FromSlash(name))
	if err := writeFileAtomic(target, []byte(src)); err != nil {
		return fmt.Errorf("set policy module %s: %w", name, err)
	}
	return e.Reload(ctx)
}

// RemoveModule deletes an operator module from the policy directory (which
// brings back the default it overrode, if any) and reloads. The result must
// still compile, else nothing is removed.
func (e *Engine) RemoveModule(ctx context.Context, name string) error {
	if e.dir == "" {
		return errors.New("remove policy module: no policy directory configured")
	}
	if err := checkModuleName(name); err != nil {
		return err
	}
	target := filepath.Join(e.dir, filepath.FromSlash(name))
	src, err := os.ReadFile(target)
	if err != nil {
		return fmt.Errorf("remove policy module %s: %w", name, err)
	}
	if err := os.Remove(target); err != nil {
		return fmt.Errorf("remove policy module %s: %w", name, err)
	}
	if err := e.Reload(ctx); err != nil {
		if restoreErr := writeFileAtomic(target, src); restoreErr != nil {
			return errors.Join(err, fmt.Errorf("restore %s: %w", name, restoreErr))
		}
		return err
	}
	return nil
}

func checkModuleName(name string) error {
	switch {
	case !strings.HasSuffix(name, ".rego"):
		return fmt.Errorf("policy module name %q must end in .rego", name)
	case !filepath.IsLocal(filepath.FromSlash(name)) || strings.Contains(name, `\`):
		return fmt.Errorf("policy module name %q must be a relative path inside the policy directory", name)
	case strings.HasPrefix(name, defaultPrefix):
		return fmt.Errorf("policy module name %q is in the reserved directory %q", name, defaultPrefix)
	}
	for _, part := range strings.Split(name, "/") {
		if strings.HasPrefix(part, ".") {
			return fmt.Errorf("policy module name %q has a hidden part, which the loader skips", name)
		}
	}
	return nil
}

// writeFileAtomic writes through a hidden temp file (skipped by the loader)
// and a rename, so that a watcher never sees half a module.
func writeFileAtomic(target string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), ".sandgate-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), target)
}

// Watch polls the policy directory every PollInterval and reloads when its
// files change, until ctx ends. A refused version is logged once per change
// and the previous one keeps serving. Without a directory it just waits.
func (e *Engine) Watch(ctx context.Context) {
	if e.dir == "" {
		<-ctx.Done()
		return
	}
	last := "" // the first tick reloads if anything changed since New
	tick := e.ticks
	if tick == nil {
		ticker := time.NewTicker(e.pollInterval)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		fp, err := dirFingerprint(e.dir)
		if err != nil {
			e.logger.Warn("policy directory unreadable", "dir", e.dir, "error", err)
			continue
		}
		if fp == last {
			continue
		}
		last = fp
		_ = e.Reload(ctx) // logged by reload
	}
}
