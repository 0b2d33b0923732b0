package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// TestPluginLimits: a module above the size limit is refused before it is compiled, and
// a tenant cannot hold more plugins than the limit (replacing one is no new plugin);
// each refusal has its stable code and stores nothing.
func TestPluginLimits(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()

	t.Run("module too large", func(t *testing.T) {
		// 17 MiB that starts like WebAssembly: above the 16 MiB limit, within the upload's.
		big := append([]byte("\x00asm\x01\x00\x00\x00"), bytes.Repeat([]byte{0}, 17<<20)...)
		expectError(t, g.putPlugin("big", big, `{"hooks":["on_event"]}`), 413, "PLUGIN::MODULE_TOO_LARGE")
		expectError(t, g.do("GET", "/v1/plugins/big", nil), 404, "PLUGIN::NOT_FOUND")
	})

	t.Run("too many plugins", func(t *testing.T) {
		noop := examplePlugin(t, "noop")
		const limit = 8
		for i := range limit {
			g.mustPutPlugin(fmt.Sprintf("p%d", i), noop, `{"hooks":["on_event"]}`)
		}
		expectError(t, g.putPlugin("one-too-many", noop, `{"hooks":["on_event"]}`), 409, "PLUGIN::TOO_MANY_PLUGINS")
		expectError(t, g.do("GET", "/v1/plugins/one-too-many", nil), 404, "PLUGIN::NOT_FOUND")
		g.mustPutPlugin("p3", noop, `{"hooks":["on_event"],"settings":{"again":true}}`) // a replacement
		if r := g.do("DELETE", "/v1/plugins/p0", nil); r.Status/100 != 2 {
			t.Fatalf("delete p0: %d %s", r.Status, r.Body)
		}
		g.mustPutPlugin("one-too-many", noop, `{"hooks":["on_event"]}`)
		var list struct{ Items []pluginStatus }
		json.Unmarshal(g.do("GET", "/v1/plugins", nil).Body, &list)
		if len(list.Items) != limit {
			t.Fatalf("%d plugins stored, want %d", len(list.Items), limit)
		}
	})
}
