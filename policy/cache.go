package policy

import (
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// accessCacheSize bounds the access decisions a policy version remembers; when it is
// full the cache starts again empty.
const accessCacheSize = 8192

// accessKey is an access input without a request body (inputs with one are not cached).
type accessKey struct {
	principal      Principal
	tenant, action string
	resource       Resource
	method, path   string
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
	mu sync.RWMutex
	m  map[accessKey]accessResult
}

func newAccessCache(compiler *ast.Compiler) *accessCache {
	if usesNondeterministicBuiltin(compiler) {
		return nil
	}
	return &accessCache{m: make(map[accessKey]accessResult)}
}

func keyOf(in AccessInput) (accessKey, bool) {
	if in.Request.Body != nil {
		return accessKey{}, false
	}
	return accessKey{in.Principal, in.Tenant, in.Action, in.Resource, in.Request.Method, in.Request.Path}, true
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
