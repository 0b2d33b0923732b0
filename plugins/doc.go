// Package plugins runs tenants' WebAssembly plugins inside the gateway
// process with wazero.
//
// A plugin is a WASM module speaking ABI v1 (see ABI.md beside this file):
// JSON in and out over linear memory, an on_event hook that sees every event
// of its tenant (audit) and a decide_ttl hook that may move a sandbox's
// expiry. The Host compiles each module once, keeps a small pool of warm
// instances per plugin, bounds each call by a memory limit and a deadline,
// and never lets a plugin's failure reach the caller as anything but an
// error: a plugin that loops, traps or runs out of memory loses its instance
// and the next call gets a fresh one.
//
// The gateway owns persistence and wiring: it stores modules and configs
// (Store helps with that on Redis), calls Host.Load on every replica, feeds
// events to Host.OnEvent and asks Host.DecideTTL before applying its
// built-in expiry rule.
package plugins
