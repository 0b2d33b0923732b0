package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Export names of ABI v1.
const (
	exportABIVersion = "sandgate_abi_version"
	exportAlloc      = "sandgate_alloc"
	exportFree       = "sandgate_free"
	exportConfigure  = "sandgate_configure"
	exportMemory     = "memory"
	exportInitialize = "_initialize"
)

// abiVersion is the one ABI version this host speaks.
const abiVersion = 1

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// signature is a function type as params → results.
type signature struct{ params, results []api.ValueType }

func (s signature) String() string {
	name := func(ts []api.ValueType) string {
		parts := make([]string, len(ts))
		for i, t := range ts {
			parts[i] = api.ValueTypeName(t)
		}
		return "(" + strings.Join(parts, ",") + ")"
	}
	return name(s.params) + "->" + name(s.results)
}

// exportSignatures lists every function export the ABI gives meaning to.
var exportSignatures = map[string]signature{
	exportABIVersion: {nil, []api.ValueType{i32}},
	exportAlloc:      {[]api.ValueType{i32}, []api.ValueType{i32}},
	exportFree:       {[]api.ValueType{i32}, nil},
	exportConfigure:  {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	exportInitialize: {nil, nil},
	HookOnEvent:      {[]api.ValueType{i32, i32}, nil},
	HookDecideTTL:    {[]api.ValueType{i32, i32}, []api.ValueType{i64}},
}

// hostImports lists what a module may import from the "sandgate" module.
var hostImports = map[string]signature{
	"log":         {[]api.ValueType{i32, i32, i32}, nil},
	"emit_audit":  {[]api.ValueType{i32, i32}, nil},
	"now_unix_ms": {nil, []api.ValueType{i64}},
}

// compiled is a module compiled by one engine, shared by every plugin
// version (of any tenant) with the same bytes and memory limit.
type compiled struct {
	key    compiledKey
	engine *engine
	mod    wazero.CompiledModule
	refs   int // guarded by Host.mu
}

type compiledKey struct {
	hash  string
	pages uint32
}

func moduleHash(module []byte) string {
	sum := sha256.Sum256(module)
	return hex.EncodeToString(sum[:])
}

// compileModule compiles and checks module statically: everything that can
// be known without running it.
func compileModule(ctx context.Context, e *engine, module []byte, r resolved) (wazero.CompiledModule, error) {
	if len(module) < 8 || string(module[:4]) != "\x00asm" {
		return nil, newError(CodeInvalidModule, nil, "not a WebAssembly binary module (bad magic)")
	}
	mod, err := e.rt.CompileModule(ctx, module)
	if err != nil {
		return nil, newError(CodeInvalidModule, err, "module does not compile")
	}
	if err := checkModule(mod, r); err != nil {
		mod.Close(ctx)
		return nil, err
	}
	return mod, nil
}

func checkModule(mod wazero.CompiledModule, r resolved) error {
	for _, imp := range mod.ImportedFunctions() {
		module, name, _ := imp.Import()
		switch module {
		case wasiModule:
			// wazero's WASI has no preopens and no sockets configured, so
			// whatever the module imports from it cannot reach the outside.
		case hostModule:
			want, ok := hostImports[name]
			if !ok {
				return newError(CodeForbiddenImport, nil, "unknown host function %s.%s", module, name)
			}
			if got := (signature{imp.ParamTypes(), imp.ResultTypes()}); got.String() != want.String() {
				return newError(CodeForbiddenImport, nil, "host function %s.%s imported as %s, want %s", module, name, got, want)
			}
		default:
			return newError(CodeForbiddenImport, nil, "import from module %q (only %q and %q are provided)", module, hostModule, wasiModule)
		}
	}
	if len(mod.ImportedMemories()) > 0 {
		return newError(CodeForbiddenImport, nil, "module imports a memory; it must define and export its own")
	}
	if _, ok := mod.ExportedMemories()[exportMemory]; !ok {
		return newError(CodeMissingExport, nil, "module does not export its memory as %q", exportMemory)
	}

	exports := mod.ExportedFunctions()
	required := []string{exportABIVersion, exportAlloc}
	required = append(required, r.hooks...)
	for _, name := range required {
		if _, ok := exports[name]; !ok {
			return newError(CodeMissingExport, nil, "module does not export function %q", name)
		}
	}
	for name, def := range exports {
		want, ok := exportSignatures[name]
		if !ok {
			continue
		}
		if got := (signature{def.ParamTypes(), def.ResultTypes()}); got.String() != want.String() {
			return newError(CodeInvalidExport, nil, "export %q has type %s, want %s", name, got, want)
		}
	}
	return nil
}
