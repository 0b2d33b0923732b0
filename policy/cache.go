package policy

import (
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// accessCacheSize bounds the access decisions a policy version remembers; when it is
// full the cache starts again empty.
const accessCacheSize = 8192

// accessKey is an access input without a request body (inputs with one are not cached).
//
// Under the built-in policy alone (accessCache.byRelation) the key of an input about
// anything but a tenant leaves out the two sandbox ids (the resource's and the one a
// credential is bound to) and the request's method and path, and keeps instead whether
// each id is set and whether they are the same: the built-in rules read those ids only
// through `==` and `!=` between them and with "", and never read the method or path
// (TestDefaultAccessReadsIDsOnlyByRelation holds them to it). A batch's hundred first
// commands then share two decisions instead of making two hundred evaluations (each a
// sandbox token on its own sandbox, and an API key's endpoint call, ~0.2 ms of CPU each).
// An operator module, whatever it says, turns this off: its rules may read the ids.
type accessKey struct {
	principal      Principal
	tenant, action string
	resource       Resource
	method, path   string
	// byRelation marks a key without the ids; the three flags are what it keeps of them.
	byRelation                       bool
	resourceID, bound, boundResource bool
}

// accessResult is what a cached access decision keeps; each use gets its own decision id.
type accessResult struct {
	allow               bool
	code, message, hash string
}

// accessCache remembers the access decisions of one policy version. A decision depends
// only on the input, the modules and the data, and a version fixes the last two, so a
// remembered decision is the one evaluation would give — unless the policy calls a
// non-deterministic builtin (time.now_ns, http.send, rand.intn…), in which case the
// version has no cache.
type accessCache struct {
	// byRelation: the version is the built-in policy alone, whose decisions depend on
	// the sandbox ids only through their relations (see accessKey).
	byRelation bool

	mu sync.RWMutex
	m  map[accessKey]accessResult
}

// newAccessCache makes the cache of a version compiled from modules; nil when the
// version must not have one.
func newAccessCache(compiler *ast.Compiler, modules []Module) *accessCache {
	if usesNondeterministicBuiltin(compiler) {
		return nil
	}
	builtinOnly := true
	for _, m := range modules {
		builtinOnly = builtinOnly && m.Origin == OriginDefault
	}
	return &accessCache{byRelation: builtinOnly, m: make(map[accessKey]accessResult)}
}

// keyOf is the cache key of in, and false when in is not cached (it has a body).
func (c *accessCache) keyOf(in AccessInput) (accessKey, bool) {
	if c == nil || in.Request.Body != nil {
		return accessKey{}, false
	}
	k := accessKey{principal: in.Principal, tenant: in.Tenant, action: in.Action, resource: in.Resource,
		method: in.Request.Method, path: in.Request.Path}
	if c.byRelation && in.Resource.Kind != "tenant" {
		// A tenant resource's id is compared with the principal's tenant: kept whole.
		k.byRelation = true
		k.resourceID, k.bound = in.Resource.ID != "", in.Principal.Sandbox != ""
		k.boundResource = in.Principal.Sandbox == in.Resource.ID
		k.resource.ID, k.principal.Sandbox, k.method, k.path = "", "", "", ""
	}
	return k, true
}

func (c *accessCache) get(k accessKey) (accessResult, bool) {
	if c == nil {
		return accessResult{}, false
	}
	c.mu.RLock()
	r, ok := c.m[k]
	c.mu.RUnlock()
	return r, ok
}

func (c *accessCache) put(k accessKey, r accessResult) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if len(c.m) >= accessCacheSize {
		clear(c.m)
	}
	c.m[k] = r
	c.mu.Unlock()
}

// usesNondeterministicBuiltin reports whether any compiled module calls a builtin whose
// result can change between two evaluations of the same input.
func usesNondeterministicBuiltin(compiler *ast.Compiler) bool {
	nondeterministic := func(op ast.Ref) bool {
		b, ok := ast.BuiltinMap[op.String()]
		return ok && b.Nondeterministic
	}
	found := false
	for _, m := range compiler.Modules {
		ast.WalkExprs(m, func(x *ast.Expr) bool {
			if x.IsCall() && nondeterministic(x.Operator()) {
				found = true
			}
			return found
		})
		ast.WalkTerms(m, func(t *ast.Term) bool {
			if call, ok := t.Value.(ast.Call); ok && len(call) > 0 {
				if ref, ok := call[0].Value.(ast.Ref); ok && nondeterministic(ref) {
					found = true
				}
			}
			return found
		})
		if found {
			return true
		}
	}
	return false
}
