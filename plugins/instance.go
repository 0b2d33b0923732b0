package plugins

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

const (
	// maxInput bounds what the host writes into an instance per call.
	maxInput = 1 << 20
	// maxOutput bounds what the host reads back from decide_ttl.
	maxOutput = 64 << 10
	// minInputBuffer is the smallest input buffer the host allocates, so
	// that typical events reuse one buffer for the instance's lifetime.
	minInputBuffer = 4 << 10
)

// instance is one instantiated module. It is used by one call at a time
// (the pool hands it out exclusively), so its fields need no lock.
type instance struct {
	owner *slot
	mod   api.Module
	pages uint32

	alloc, free, onEvent, decideTTL api.Function
	stack                           [2]uint64

	// in is a buffer the host obtained from sandgate_alloc and reuses for
	// inputs until a larger one is needed.
	inPtr, inCap uint32

	stderr *tailWriter

	// lastUsed is when the instance last went back to its pool.
	lastUsed time.Time

	// Per-call counters and the last warning the plugin logged, which is
	// quoted in errors so owners see the plugin's own explanation.
	logs, audits  int
	lastComplaint string
}

// instantiate creates and configures one instance of c. The deadline of
// ctx bounds the module's start function and sandgate_configure.
func instantiate(ctx context.Context, c *compiled, o *slot, settings []byte) (*instance, error) {
	inst := &instance{owner: o, pages: c.engine.pages, stderr: &tailWriter{max: 2 << 10}}
	ctx = context.WithValue(ctx, callerKey{}, inst)
	cfg := wazero.NewModuleConfig().
		WithName(""). // anonymous: any number of instances per runtime
		WithStartFunctions(exportInitialize).
		WithArgs(o.name).
		WithSysWalltime().WithSysNanotime().WithSysNanosleep().
		WithRandSource(rand.Reader).
		WithStderr(inst.stderr)
	mod, err := c.engine.rt.InstantiateModule(ctx, c.mod, cfg)
	if err != nil {
		return nil, initFailure(inst.failure(ctx, CodeInitFailed, err, "instantiate module"))
	}
	inst.mod = mod
	inst.alloc = mod.ExportedFunction(exportAlloc)
	inst.free = mod.ExportedFunction(exportFree)
	inst.onEvent = mod.ExportedFunction(HookOnEvent)
	inst.decideTTL = mod.ExportedFunction(HookDecideTTL)

	version := mod.ExportedFunction(exportABIVersion)
	if err := safeCall(ctx, version, inst.stack[:]); err != nil {
		inst.close(ctx)
		return nil, initFailure(inst.failure(ctx, CodeInitFailed, err, "call %s", exportABIVersion))
	}
	if got := int32(uint32(inst.stack[0])); got != abiVersion {
		inst.close(ctx)
		return nil, newError(CodeABIVersion, nil, "module speaks plugin ABI version %d, this host speaks version %d", got, abiVersion)
	}

	if configure := mod.ExportedFunction(exportConfigure); configure != nil {
		inst.logs, inst.audits, inst.lastComplaint = 0, 0, ""
		if err := inst.write(ctx, settings); err != nil {
			inst.close(ctx)
			return nil, initFailure(inst.failure(ctx, CodeInitFailed, err, "pass settings"))
		}
		inst.stack[0], inst.stack[1] = uint64(inst.inPtr), uint64(len(settings))
		if err := safeCall(ctx, configure, inst.stack[:]); err != nil {
			inst.close(ctx)
			return nil, initFailure(inst.failure(ctx, CodeInitFailed, err, "call %s", exportConfigure))
		}
		if rc := int32(uint32(inst.stack[0])); rc != 0 {
			inst.close(ctx)
			msg := fmt.Sprintf("%s refused the settings (returned %d)", exportConfigure, rc)
			if inst.lastComplaint != "" {
				msg += ": " + inst.lastComplaint
			}
			return nil, newError(CodeInitFailed, nil, "%s", msg)
		}
	}
	return inst, nil
}

// initFailure reports any failure while starting an instance as
// CodeInitFailed, keeping the message that says why (deadline, memory,
// trap): to the uploader, the module did not start.
func initFailure(err error) error {
	var pe *Error
	if errors.As(err, &pe) && pe.Code != CodeInitFailed {
		return &Error{Code: CodeInitFailed, Message: pe.Message, Err: pe.Err}
	}
	return err
}

// call runs hook fn with input and returns its packed result (0 for hooks
// without one). Any failure leaves the instance unusable: the caller
// discards it.
func (inst *instance) call(ctx context.Context, fn api.Function, input []byte) (uint64, error) {
	inst.logs, inst.audits, inst.lastComplaint = 0, 0, ""
	ctx = context.WithValue(ctx, callerKey{}, inst)
	if err := inst.write(ctx, input); err != nil {
		return 0, inst.failure(ctx, CodeTrap, err, "pass input")
	}
	inst.stack[0], inst.stack[1] = uint64(inst.inPtr), uint64(len(input))
	if err := safeCall(ctx, fn, inst.stack[:]); err != nil {
		return 0, inst.failure(ctx, CodeTrap, err, "call %s", fn.Definition().Name())
	}
	return inst.stack[0], nil
}

// write copies input into the instance's input buffer, growing it through
// sandgate_alloc when needed.
func (inst *instance) write(ctx context.Context, input []byte) error {
	if len(input) > maxInput {
		return fmt.Errorf("input of %d bytes exceeds %d", len(input), maxInput)
	}
	if need := uint32(len(input)); need > inst.inCap || inst.inCap == 0 {
		size := max(need, minInputBuffer)
		if inst.inCap > 0 && inst.free != nil {
			inst.stack[0] = uint64(inst.inPtr)
			if err := safeCall(ctx, inst.free, inst.stack[:]); err != nil {
				return err
			}
		}
		inst.inCap = 0
		inst.stack[0] = uint64(size)
		if err := safeCall(ctx, inst.alloc, inst.stack[:]); err != nil {
			return err
		}
		ptr := uint32(inst.stack[0])
		if ptr == 0 {
			return fmt.Errorf("%s(%d) returned 0", exportAlloc, size)
		}
		inst.inPtr, inst.inCap = ptr, size
	}
	if !inst.mod.Memory().Write(inst.inPtr, input) {
		return fmt.Errorf("%s returned %d, out of range for %d bytes", exportAlloc, inst.inPtr, len(input))
	}
	return nil
}

// output copies the region a packed pointer/length result names.
func (inst *instance) output(packed uint64) ([]byte, error) {
	ptr, n := uint32(packed>>32), uint32(packed)
	if n == 0 {
		return nil, newError(CodeBadOutput, nil, "empty result")
	}
	if n > maxOutput {
		return nil, newError(CodeBadOutput, nil, "result of %d bytes exceeds %d", n, maxOutput)
	}
	b, ok := inst.mod.Memory().Read(ptr, n)
	if !ok {
		return nil, newError(CodeBadOutput, nil, "result at %d+%d is outside memory", ptr, n)
	}
	return bytes.Clone(b), nil
}

func (inst *instance) close(ctx context.Context) {
	if inst.mod != nil {
		inst.mod.Close(context.WithoutCancel(ctx))
	}
}

// failure classifies err from a call into the module as a plugin error.
func (inst *instance) failure(ctx context.Context, code string, err error, format string, args ...any) error {
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	msg := fmt.Sprintf(format, args...)
	var exit *sys.ExitError
	switch {
	case errors.As(err, &exit) && (exit.ExitCode() == sys.ExitCodeDeadlineExceeded || exit.ExitCode() == sys.ExitCodeContextCanceled),
		errors.Is(ctx.Err(), context.DeadlineExceeded):
		if ctx.Err() == context.Canceled {
			return newError(CodeTimeout, err, "%s: call canceled by the caller", msg)
		}
		return newError(CodeTimeout, err, "%s: deadline exceeded", msg)
	case inst.nearMemoryLimit():
		return newError(CodeMemoryLimit, err, "%s: memory limit of %d MiB reached%s", msg, inst.pages/pagesPerMiB, inst.stderr.quote())
	case errors.As(err, &exit):
		return newError(code, err, "%s: module exited with code %d%s", msg, exit.ExitCode(), inst.stderr.quote())
	default:
		return newError(code, err, "%s: %s%s", msg, firstLine(err.Error()), inst.stderr.quote())
	}
}

// nearMemoryLimit reports whether the instance's memory is so close to its
// limit that a failure is best explained by the limit: a guest's allocator
// typically fails on a grow of a few MiB.
func (inst *instance) nearMemoryLimit() bool {
	if inst.mod == nil || inst.mod.Memory() == nil {
		return false
	}
	const slack = 8 << 20
	limit := uint64(inst.pages) * 65536
	return uint64(inst.mod.Memory().Size())+slack >= limit || bytes.Contains(inst.stderr.bytes(), []byte("out of memory"))
}

// safeCall calls fn and turns a panic anywhere below it (wazero or a host
// function) into an error: a plugin must never take the gateway down.
func safeCall(ctx context.Context, fn api.Function, stack []uint64) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic during call: %v", r)
		}
	}()
	return fn.CallWithStack(ctx, stack)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// tailWriter keeps the last max bytes written to a module's stderr: the Go
// runtime prints panics and fatal errors there before exiting, and those
// lines are the best explanation of a trap.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

func (w *tailWriter) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.buf)
}

// quote returns the first meaningful lines of stderr, for an error message.
func (w *tailWriter) quote() string {
	b := bytes.TrimSpace(w.bytes())
	if len(b) == 0 {
		return ""
	}
	lines := bytes.SplitN(b, []byte("\n"), 3)
	if len(lines) > 2 {
		lines = lines[:2]
	}
	return " (stderr: " + string(bytes.Join(lines, []byte(" | "))) + ")"
}
