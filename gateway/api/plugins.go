package api

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/plugins"
)

// maxPluginConfigBytes bounds the config part (settings are capped by the host too).
const maxPluginConfigBytes = 256 << 10

// putPlugin takes a multipart upload with a part "module" (the wasm bytes) and a part
// "config" (JSON {"hooks","limits","settings"}), in any order.
func (h *Handler) putPlugin(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	module, config, err := readPluginUpload(w, r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.answer(w, r, http.StatusOK)(h.svc.Plugins().Put(r.Context(), c, r.PathValue("name"), module, config))
}

// The plugin routes below reach the plugin feature (Service.Plugins) when a request
// comes, not when the routes are built.

func (h *Handler) listPlugins(ctx context.Context, c gateway.Caller) ([]gateway.PluginStatus, error) {
	return h.svc.Plugins().List(ctx, c)
}

func (h *Handler) getPlugin(ctx context.Context, c gateway.Caller, name string) (*gateway.PluginStatus, error) {
	return h.svc.Plugins().Get(ctx, c, name)
}

func (h *Handler) deletePlugin(ctx context.Context, c gateway.Caller, name string) error {
	return h.svc.Plugins().Delete(ctx, c, name)
}

func readPluginUpload(w http.ResponseWriter, r *http.Request) (module, config []byte, err error) {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		return nil, nil, gateway.Errorf(gateway.KindUnsupportedMedia, gateway.CodeInvalidParameter,
			"a plugin upload is multipart/form-data with the parts \"module\" and \"config\"")
	}
	r.Body = http.MaxBytesReader(w, r.Body, gateway.MaxPluginUploadBytes)
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, nil, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "malformed multipart body: %v", err)
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, uploadError(err)
		}
		switch part.FormName() {
		case "module":
			if module, err = io.ReadAll(part); err != nil {
				return nil, nil, uploadError(err)
			}
			if max := gateway.MaxPluginUploadBytes - 1<<20; len(module) > max {
				return nil, nil, gateway.Errorf(gateway.KindTooLarge, plugins.CodeModuleTooLarge, "the module has %d bytes; at most %d are allowed", len(module), max)
			}
		case "config":
			if config, err = io.ReadAll(io.LimitReader(part, maxPluginConfigBytes+1)); err != nil {
				return nil, nil, uploadError(err)
			}
			if len(config) > maxPluginConfigBytes {
				return nil, nil, gateway.Errorf(gateway.KindTooLarge, plugins.CodeInvalidConfig, "the config part exceeds %d bytes", maxPluginConfigBytes)
			}
		default:
			_, _ = io.Copy(io.Discard, part)
		}
	}
	if len(module) == 0 {
		return nil, nil, gateway.Errorf(gateway.KindInvalid, plugins.CodeInvalidModule, "the part \"module\" (the WebAssembly bytes) is missing or empty")
	}
	if len(config) == 0 {
		return nil, nil, gateway.Errorf(gateway.KindInvalid, plugins.CodeInvalidConfig, "the part \"config\" (JSON {\"hooks\":[…]}) is missing or empty")
	}
	return module, config, nil
}

func uploadError(err error) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return gateway.Errorf(gateway.KindTooLarge, plugins.CodeModuleTooLarge, "the upload exceeds %d bytes", tooBig.Limit)
	}
	return gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "malformed multipart body: %v", err)
}
