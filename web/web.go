// Package web holds the console's built assets, embedded into the binary. Until the
// console is built (`make web`), it serves a page that says so.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed all:dist
var dist embed.FS

// placeholder is served when the binary was built without the console's assets.
const placeholder = `<!doctype html><html><head><meta charset="utf-8"><title>sandgate console</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:4rem auto;padding:0 1rem}code{background:#eee;padding:0 .3em}</style>
</head><body><h1>sandgate</h1><p>The web console is not built into this binary.</p>
<p>Build it with <code>make web</code>, then rebuild the binary with <code>make build</code>.
The API is served under <a href="../v1/openapi.json"><code>/v1</code></a> meanwhile.</p></body></html>`

// Handler serves the console under prefix (for example "/console/").
func Handler(prefix string) http.Handler {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		return placeholderHandler()
	}
	if _, err := fs.Stat(sub, "index.html"); err != nil {
		return placeholderHandler()
	}
	return http.StripPrefix(prefix, http.FileServer(http.FS(sub)))
}

func placeholderHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(placeholder))
	})
}
