package api

import (
	_ "embed"
	"net/http"
	"net/url"

	"github.com/sandgate/sandgate/gateway"
)

//go:embed openapi.json
var openAPIDocument []byte

func serveOpenAPI(w http.ResponseWriter, r *http.Request, _ gateway.Caller) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDocument)
}

func urlPathUnescape(s string) (string, error) { return url.PathUnescape(s) }
