package procs

import (
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
)

// reservedPrefix marks variables that configure the agent itself (its token among them);
// they are never passed on to a process the agent starts.
const reservedPrefix = "SANDGATE_"

// Environment is the default environment of every process the agent starts: the agent's
// own environment without SANDGATE_* variables, plus variables set later through
// PUT /sandgate/env (a warm-pool sandbox receives its tenant's env at claim time), plus
// the credential vault's trust variables while its bundle exists, plus the entries of
// the sandbox's environment file (EnvFileVar), read again for every process.
//
// The trust variables are added here, not by the container's configuration, because a
// snapshot's image keeps that configuration: a copy made from it would name the trust
// files of a vault it does not have. The files live in the agent's directory, which the
// runtime keeps out of snapshots, so each copy has the variables only with a vault of
// its own.
type Environment struct {
	mu    sync.RWMutex
	base  []string
	extra map[string]string
	// vaultBundle is the file whose presence says the sandbox has the vault.
	vaultBundle string
	// envFile is the environment file's path ("" when the sandbox has none).
	envFile string
}

// NewEnvironment captures the current process environment, scrubbed.
func NewEnvironment() *Environment {
	return &Environment{base: Scrub(os.Environ()), extra: map[string]string{}, vaultBundle: agentproto.VaultBundlePath,
		envFile: os.Getenv(EnvFileVar)}
}

// EnvFile is the path of the environment file, or "" when there is none.
func (e *Environment) EnvFile() string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.envFile
}

// SetEnvFile names the environment file when the agent's own environment named none:
// every later process gets EnvFileVar=path and the file's entries.
func (e *Environment) SetEnvFile(path string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.envFile == "" {
		e.envFile = path
		e.base = append(e.base, EnvFileVar+"="+path)
	}
}

// FileVars returns the entries of the environment file, values expanded with the
// agent's environment and the variables set through Set.
func (e *Environment) FileVars() map[string]string {
	path := e.EnvFile()
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return nil
	}
	e.mu.RLock()
	defaults := make(map[string]string, len(e.base)+len(e.extra))
	for _, kv := range e.base {
		k, v, _ := strings.Cut(kv, "=")
		defaults[k] = v
	}
	for k, v := range e.extra {
		defaults[k] = v
	}
	e.mu.RUnlock()
	return ParseEnvFile(string(data), func(k string) string { return defaults[k] })
}

// Scrub drops SANDGATE_* variables from env.
func Scrub(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if strings.HasPrefix(kv, reservedPrefix) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Set merges vars into the default environment of every later process.
func (e *Environment) Set(vars map[string]string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, v := range vars {
		if k == "" || strings.HasPrefix(k, reservedPrefix) || strings.ContainsAny(k, "=\x00") {
			continue
		}
		e.extra[k] = v
	}
}

// Extra returns a copy of the variables set through Set.
func (e *Environment) Extra() map[string]string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make(map[string]string, len(e.extra))
	for k, v := range e.extra {
		out[k] = v
	}
	return out
}

// Build returns the environment for a new process: defaults, then the vault's trust
// variables (when the sandbox has the vault), then the environment file's entries, then
// overrides. Later values win; SANDGATE_* keys in overrides are dropped too.
func (e *Environment) Build(overrides map[string]string) []string {
	e.mu.RLock()
	merged := make(map[string]string, len(e.base)+len(e.extra)+len(overrides))
	order := make([]string, 0, len(e.base)+len(e.extra)+len(overrides))
	add := func(k, v string) {
		if strings.HasPrefix(k, reservedPrefix) {
			return
		}
		if _, ok := merged[k]; !ok {
			order = append(order, k)
		}
		merged[k] = v
	}
	for _, kv := range e.base {
		k, v, _ := strings.Cut(kv, "=")
		add(k, v)
	}
	extraKeys := make([]string, 0, len(e.extra))
	for k := range e.extra {
		extraKeys = append(extraKeys, k)
	}
	sort.Strings(extraKeys)
	for _, k := range extraKeys {
		add(k, e.extra[k])
	}
	e.mu.RUnlock()
	if e.vaultBundle != "" {
		if _, err := os.Stat(e.vaultBundle); err == nil {
			trust := agentproto.VaultTrustEnv()
			trustKeys := make([]string, 0, len(trust))
			for k := range trust {
				trustKeys = append(trustKeys, k)
			}
			sort.Strings(trustKeys)
			for _, k := range trustKeys {
				add(k, trust[k])
			}
		}
	}
	fileVars := e.FileVars()
	fileKeys := make([]string, 0, len(fileVars))
	for k := range fileVars {
		fileKeys = append(fileKeys, k)
	}
	sort.Strings(fileKeys)
	for _, k := range fileKeys {
		add(k, fileVars[k])
	}
	keys := make([]string, 0, len(overrides))
	for k := range overrides {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			continue
		}
		add(k, overrides[k])
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+merged[k])
	}
	return out
}

// Lookup returns the value of key in env (a KEY=VALUE list).
func Lookup(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}
