package modules

import (
	_ "embed"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// DefaultCaddyfile is what `sandgate run` uses when no config is given. Every setting
// comes from a SANDGATE_* environment variable.
//
//go:embed Caddyfile
var DefaultCaddyfile []byte

func init() {
	httpcaddyfile.RegisterGlobalOption("sandgate", parseGlobalOption)
	httpcaddyfile.RegisterHandlerDirective("sandgate", parseHandlerDirective)
	httpcaddyfile.RegisterDirectiveOrder("sandgate", httpcaddyfile.Before, "file_server")
}

// parseGlobalOption sets up the sandgate app:
//
//	sandgate {
//		<setting> <value>
//		…
//	}
//
// where each setting is one of the table in settings.go (the default Caddyfile lists
// them all, each read from its SANDGATE_* variable). A setting whose value is an empty
// environment variable keeps its default.
func parseGlobalOption(d *caddyfile.Dispenser, _ any) (any, error) {
	app := new(App)
	d.Next() // option name
	for d.NextBlock(0) {
		name := d.Val()
		var val string
		if d.NextArg() {
			val = d.Val()
		}
		if d.NextArg() {
			return nil, d.ArgErr()
		}
		s, ok := settingNamed(name)
		if !ok {
			return nil, d.Errf("unknown sandgate setting %q", name)
		}
		if err := s.parse(app, val); err != nil {
			return nil, d.Errf("%s: %v", name, err)
		}
	}
	return httpcaddyfile.App{Name: "sandgate", Value: caddyconfig.JSON(app, nil)}, nil
}

// parseHandlerDirective: `sandgate` in a site block mounts the gateway API.
func parseHandlerDirective(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	h.Next()
	if h.NextArg() {
		return nil, h.ArgErr()
	}
	return new(Handler), nil
}
