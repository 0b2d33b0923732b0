package plugins

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

const (
	pagesPerMiB = 16 // 64 KiB pages

	hostModule = "sandgate"
	wasiModule = wasi_snapshot_preview1.ModuleName

	maxLogBytes      = 4 << 10
	maxLogsPerCall   = 32
	maxAuditBytes    = 64 << 10
	maxAuditsPerCall = 64
)

// engine is one wazero runtime. wazero's memory limit is a runtime setting,
// so the host keeps one engine per distinct limit; they all share one
// compilation cache, and each has its own WASI and "sandgate" host modules.
type engine struct {
	rt    wazero.Runtime
	pages uint32
	refs  int // compiled modules (and compilations under way) using rt; guarded by Host.mu
}

func (h *Host) newEngine(ctx context.Context, pages uint32) (*engine, error) {
	cfg := wazero.NewRuntimeConfig().
		WithMemoryLimitPages(pages).
		WithCloseOnContextDone(true).
		WithCompilationCache(h.cache)
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	// WASI serves only what the Go runtime needs (clocks, random, args,
	// environ, proc_exit, fd_write to the captured stderr): instances get no
	// preopened directories and no sockets.
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("instantiate wasi: %w", err)
	}
	_, err := rt.NewHostModuleBuilder(hostModule).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(h.hostLog), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, nil).
		WithParameterNames("level", "ptr", "len").Export("log").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(h.hostEmitAudit), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, nil).
		WithParameterNames("ptr", "len").Export("emit_audit").
		NewFunctionBuilder().WithGoFunction(api.GoFunc(h.hostNowUnixMs), nil, []api.ValueType{api.ValueTypeI64}).
		Export("now_unix_ms").
		Instantiate(ctx)
	if err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("instantiate host module: %w", err)
	}
	return &engine{rt: rt, pages: pages}, nil
}

// callerKey carries the calling *instance in the context of every call into
// a module, so host functions know whose plugin is speaking.
type callerKey struct{}

func callerOf(ctx context.Context) *instance {
	inst, _ := ctx.Value(callerKey{}).(*instance)
	return inst
}

func (h *Host) hostLog(ctx context.Context, mod api.Module, stack []uint64) {
	inst := callerOf(ctx)
	if inst == nil {
		return
	}
	level, ptr, n := slog.Level(int32(uint32(stack[0]))), uint32(stack[1]), uint32(stack[2])
	inst.logs++
	if inst.logs > maxLogsPerCall {
		return
	}
	truncated := n > maxLogBytes
	if truncated {
		n = maxLogBytes
	}
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		return
	}
	msg := string(b)
	if level >= slog.LevelWarn {
		inst.lastComplaint = msg
	}
	h.opts.Logger.Log(ctx, level, msg, "tenant", inst.owner.tenant, "plugin", inst.owner.name, "truncated", truncated)
}

func (h *Host) hostEmitAudit(ctx context.Context, mod api.Module, stack []uint64) {
	inst := callerOf(ctx)
	if inst == nil || h.opts.Audit == nil || inst.owner.tenant == "" {
		return
	}
	ptr, n := uint32(stack[0]), uint32(stack[1])
	inst.audits++
	if inst.audits > maxAuditsPerCall || n > maxAuditBytes {
		inst.owner.auditRejected()
		return
	}
	b, ok := mod.Memory().Read(ptr, n)
	if !ok || !json.Valid(b) {
		inst.owner.auditRejected()
		return
	}
	h.opts.Audit(inst.owner.tenant, append([]byte(nil), b...))
}

func (h *Host) hostNowUnixMs(_ context.Context, stack []uint64) {
	stack[0] = uint64(h.now().UnixMilli())
}
