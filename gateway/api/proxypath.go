package api

import (
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
	end := len(strings.Join(segs[:start+4], "/"))
	return escaped[:end], escaped[end:], nil
}
