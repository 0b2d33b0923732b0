package api

import (
	"net/http"
	"strings"

	"github.com/sandgate/sandgate/gateway"
)

// splitProxyPath splits the escaped path of a path-mode request,
// [/v1]/sandboxes/{id}/proxy/{port}/rest, into its prefix (up to the port) and the
// escaped rest sent upstream. It works on segments, not on a search for the decoded id:
// an id, a port or a literal segment written with escapes (%61 for "a") would otherwise
// move where the upstream path starts. Such spellings are refused: every part of the
// prefix must be written as the gateway itself writes it.
func splitProxyPath(escaped, id, port string) (prefix, rest string, err error) {
	segs := strings.SplitN(escaped, "/", 7)
	start := 1
	if len(segs) > 1 && segs[1] == "v1" {
		start = 2
	}
	// segs[start:] = sandboxes, id, proxy, port, rest...
	if len(segs) < start+4 || segs[start] != "sandboxes" || segs[start+2] != "proxy" ||
		segs[start+1] != id || segs[start+3] != port {
		return "", "", gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter,
			"proxy path %q: write /sandboxes/{id}/proxy/{port}/… without escapes in the id, the port or the fixed segments", escaped)
	}
	end := start + 3 // the slashes between segs[0] and segs[start+3]
	for _, seg := range segs[:start+4] {
		end += len(seg)
	}
	return escaped[:end], escaped[end:], nil
}

// Patterns of the path-mode routes (Handler.routes), as the mux would set r.Pattern.
const (
	proxyPattern       = "/sandboxes/{id}/proxy/{port}"
	proxyPatternRest   = "/sandboxes/{id}/proxy/{port}/{path...}"
	proxyPatternV1     = "/v1" + proxyPattern
	proxyPatternV1Rest = "/v1" + proxyPatternRest
)

// proxyPathRoute matches r against the path-mode routes without the mux (whose
// wildcard matching allocates a dozen times per request): the id and port segments
// of a clean path [/v1]/sandboxes/{id}/proxy/{port}[/…], and the pattern the mux would
// have matched. A path written with escapes of its own (RawPath set: the mux splits
// the escaped path, where %2F is no slash), one the mux would clean first
// (redirecting), a CONNECT, or any other path is not matched: the mux routes it as
// before.
func proxyPathRoute(r *http.Request) (id, port, pattern string, ok bool) {
	p := r.URL.Path
	if r.Method == http.MethodConnect || r.URL.RawPath != "" || !cleanPath(p) {
		return "", "", "", false
	}
	v1 := strings.HasPrefix(p, "/v1/")
	if v1 {
		p = p[len("/v1"):]
	}
	rest, ok := strings.CutPrefix(p, "/sandboxes/")
	if !ok {
		return "", "", "", false
	}
	id, rest, ok = strings.Cut(rest, "/")
	if !ok || id == "" {
		return "", "", "", false
	}
	rest, ok = strings.CutPrefix(rest, "proxy/")
	if !ok {
		return "", "", "", false
	}
	port, rest, more := strings.Cut(rest, "/")
	if port == "" {
		return "", "", "", false
	}
	switch {
	case v1 && more:
		pattern = proxyPatternV1Rest
	case v1:
		pattern = proxyPatternV1
	case more:
		pattern = proxyPatternRest
	default:
		pattern = proxyPattern
	}
	return id, port, pattern, true
}

// cleanPath reports whether p is what path.Clean leaves alone (but for a trailing
// slash, which the mux keeps too): no empty, "." or ".." segment.
func cleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		// p[start:i] is a segment; start is just after the previous slash.
		start := strings.LastIndexByte(p[:i], '/') + 1
		seg := p[start:i]
		if seg == "." || seg == ".." || (seg == "" && i < len(p)) {
			return false
		}
	}
	return true
}
