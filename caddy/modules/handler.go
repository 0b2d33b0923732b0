package modules

import (
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sandgate/sandgate/gateway/api"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler mounts the gateway API (lifecycle, endpoints, sandbox proxy) in a Caddy route.
// It answers every request it sees; put it last in its route.
type Handler struct {
	api http.Handler
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.sandgate", New: func() caddy.Module { return new(Handler) }}
}

// Provision implements caddy.Provisioner: it finds the sandgate app and builds the API on it.
func (h *Handler) Provision(ctx caddy.Context) error {
	appIface, err := ctx.App("sandgate")
	if err != nil {
		return fmt.Errorf("load sandgate app: %w", err)
	}
	app := appIface.(*App)
	h.api = api.New(app.core.service, api.Options{APIKey: app.APIKey, Logger: ctx.Slogger()})
	return nil
}

// ServeHTTP implements caddyhttp.MiddlewareHandler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	h.api.ServeHTTP(w, r)
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
