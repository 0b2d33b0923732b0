package modules

import (
	"context"
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func init() {
	caddy.RegisterModule(Upstreams{})
}

// Upstreams is the `sandgate` upstream source of Caddy's reverse_proxy: it gives the one
// address the gateway resolved and authorized for this request (the sandbox's address as
// the runtime reported it, from the in-memory route cache) and nothing else, so that no
// crafted host, id, port or path can point the proxy anywhere else.
type Upstreams struct{}

// CaddyModule returns the Caddy module information.
func (Upstreams) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.reverse_proxy.upstreams.sandgate", New: func() caddy.Module { return new(Upstreams) }}
}

type upstreamKey struct{}

// withUpstream marks a request with the address the gateway authorized.
func withUpstream(r *http.Request, addr string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), upstreamKey{}, addr))
}

// GetUpstreams implements reverseproxy.UpstreamSource.
func (Upstreams) GetUpstreams(r *http.Request) ([]*reverseproxy.Upstream, error) {
	addr, ok := r.Context().Value(upstreamKey{}).(string)
	if !ok || addr == "" {
		return nil, fmt.Errorf("no sandbox upstream was resolved for this request")
	}
	return []*reverseproxy.Upstream{{Dial: addr}}, nil
}

// Interface guards
var _ reverseproxy.UpstreamSource = (*Upstreams)(nil)
