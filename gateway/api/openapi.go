package api

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/sandgate/sandgate/gateway"
)

//go:embed openapi.json
var openAPIDocument []byte

// openAPIFor is the document with this gateway's own bounds where they are settings
// (a create's timeout): the embedded one holds the defaults.
func openAPIFor(cfg gateway.Config) []byte {
	minT, maxT := int64(cfg.MinTimeout/time.Second), int64(cfg.MaxTimeout/time.Second)
	if (minT == 60 || minT == 0) && (maxT == 604800 || maxT == 0) {
		return openAPIDocument
	}
	var doc map[string]any
	if json.Unmarshal(openAPIDocument, &doc) != nil {
		return openAPIDocument
	}
	timeout, ok := walk(doc, "components", "schemas", "CreateSandboxRequest", "properties", "timeout").(map[string]any)
	if !ok {
		return openAPIDocument
	}
	if minT > 0 {
		timeout["minimum"] = minT
	}
	if maxT > 0 {
		timeout["maximum"] = maxT
	}
	out, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return openAPIDocument
	}
	return out
}

// walk follows keys down nested JSON objects; nil when one is missing.
func walk(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func (h *Handler) serveOpenAPI(w http.ResponseWriter, r *http.Request, _ gateway.Caller) {
	h.openAPIOnce.Do(func() {
		h.openAPI = openAPIDocument
		if h.svc != nil {
			h.openAPI = openAPIFor(h.svc.Config())
		}
	})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(h.openAPI)
}

func urlPathUnescape(s string) (string, error) { return url.PathUnescape(s) }
