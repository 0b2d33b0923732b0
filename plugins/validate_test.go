package plugins_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/plugins"
)

// importsEnvFoo is a minimal module that imports env.foo: a host function
// sandgate does not offer.
var importsEnvFoo = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type section: func () -> ()
	0x02, 0x0b, 0x01, 0x03, 'e', 'n', 'v', 0x03, 'f', 'o', 'o', 0x00, 0x00, // import env.foo
}

func TestValidate(t *testing.T) {
	h := newHost(t, plugins.HostOptions{MaxMemoryPages: 64 * 16})
	both := []string{plugins.HookOnEvent, plugins.HookDecideTTL}
	tests := []struct {
		name     string
		module   []byte
		cfg      plugins.Config
		wantCode string // "" means valid
		wantMsg  string
	}{
		{name: "noop both hooks", module: wasm(t, "noop"), cfg: plugins.Config{Hooks: both}},
		{name: "audit on_event", module: wasm(t, "audit-jsonl"), cfg: plugins.Config{Hooks: []string{plugins.HookOnEvent}, Settings: json.RawMessage(`{"types":["sandbox.created"]}`)}},
		{name: "ttl-on-activity", module: wasm(t, "ttl-on-activity"), cfg: plugins.Config{Hooks: []string{plugins.HookDecideTTL}, Settings: json.RawMessage(`{"extendMinutes":5}`)}},
		{name: "garbage bytes", module: []byte("this is not wasm at all"), cfg: plugins.Config{Hooks: both},
			wantCode: plugins.CodeInvalidModule, wantMsg: "bad magic"},
		{name: "empty module", module: nil, cfg: plugins.Config{Hooks: both}, wantCode: plugins.CodeInvalidModule},
		{name: "truncated module", module: wasm(t, "noop")[:4096], cfg: plugins.Config{Hooks: both}, wantCode: plugins.CodeInvalidModule},
		{name: "hook not exported", module: wasm(t, "audit-jsonl"), cfg: plugins.Config{Hooks: both},
			wantCode: plugins.CodeMissingExport, wantMsg: `"decide_ttl"`},
		{name: "no hooks at all", module: wasm(t, "bad-missing-export"), cfg: plugins.Config{Hooks: []string{plugins.HookOnEvent}},
			wantCode: plugins.CodeMissingExport, wantMsg: `"on_event"`},
		{name: "no ABI exports", module: importsEnvFoo[:8], cfg: plugins.Config{Hooks: both},
			wantCode: plugins.CodeMissingExport, wantMsg: "memory"},
		{name: "wrong ABI version", module: wasm(t, "bad-abi-version"), cfg: plugins.Config{Hooks: []string{plugins.HookOnEvent}},
			wantCode: plugins.CodeABIVersion, wantMsg: "version 2"},
		{name: "foreign import", module: importsEnvFoo, cfg: plugins.Config{Hooks: both},
			wantCode: plugins.CodeForbiddenImport, wantMsg: `"env"`},
		{name: "unknown hook", module: wasm(t, "noop"), cfg: plugins.Config{Hooks: []string{"on_request"}},
			wantCode: plugins.CodeInvalidConfig, wantMsg: "on_request"},
		{name: "no hook declared", module: wasm(t, "noop"), cfg: plugins.Config{},
			wantCode: plugins.CodeInvalidConfig},
		{name: "settings not an object", module: wasm(t, "noop"), cfg: plugins.Config{Hooks: both, Settings: json.RawMessage(`[1,2]`)},
			wantCode: plugins.CodeInvalidConfig, wantMsg: "JSON object"},
		{name: "memory over ceiling", module: wasm(t, "noop"), cfg: plugins.Config{Hooks: both, Limits: plugins.Limits{MemoryMiB: 65}},
			wantCode: plugins.CodeInvalidConfig, wantMsg: "memoryMiB"},
		{name: "timeout over ceiling", module: wasm(t, "noop"), cfg: plugins.Config{Hooks: both, Limits: plugins.Limits{TimeoutMs: 60_000}},
			wantCode: plugins.CodeInvalidConfig, wantMsg: "timeoutMs"},
		{name: "memory too small for the Go runtime", module: wasm(t, "noop"), cfg: plugins.Config{Hooks: both, Limits: plugins.Limits{MemoryMiB: 1}},
			wantCode: plugins.CodeInvalidModule, wantMsg: "limit"},
		{name: "start function that never returns", module: wasm(t, "bad-init-loop"), cfg: plugins.Config{Hooks: []string{plugins.HookOnEvent}},
			wantCode: plugins.CodeInitFailed, wantMsg: "deadline exceeded"},
		{name: "settings refused by the plugin", module: wasm(t, "ttl-on-activity"), cfg: plugins.Config{Hooks: []string{plugins.HookDecideTTL}, Settings: json.RawMessage(`{"extendMinutes":-3}`)},
			wantCode: plugins.CodeInitFailed, wantMsg: "extendMinutes must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := h.Validate(tt.module, tt.cfg)
			if got := plugins.ErrorCode(err); got != tt.wantCode {
				t.Fatalf("Validate: code %q, want %q (err: %v)", got, tt.wantCode, err)
			}
			if err != nil && !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Validate: error %q does not mention %q", err, tt.wantMsg)
			}
		})
	}
}
