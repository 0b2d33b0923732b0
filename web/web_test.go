package web

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
)

// firstLoadLimit is the budget: at most 200 KB of gzipped JavaScript on the
// first visit. Lazily imported chunks (the terminal's xterm.js) are not part of it.
const firstLoadLimit = 200 << 10

// built reports whether the binary being tested embeds the console; under `make test`
// (SANDGATE_E2E_BIN set, after `make build`) it must.
func built(t *testing.T) fs.FS {
	t.Helper()
	sub, _ := fs.Sub(dist, "dist")
	if _, err := fs.Stat(sub, "index.html"); err != nil {
		if os.Getenv("SANDGATE_E2E_BIN") != "" {
			t.Fatalf("web/dist has no index.html: run `make web` (make build does) before the tests")
		}
		t.Skip("the console is not built (make web)")
	}
	return sub
}

func TestFirstLoadJavaScriptBudget(t *testing.T) {
	sub := built(t)
	html, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`<(?:script[^>]*\ssrc|link[^>]*rel="modulepreload"[^>]*\shref)="([^"]+\.js)"`).FindAllSubmatch(html, -1)
	if len(refs) == 0 {
		t.Fatalf("index.html references no script:\n%s", html)
	}
	total := 0
	for _, m := range refs {
		name := strings.TrimPrefix(string(m[1]), "/console/")
		js, err := fs.ReadFile(sub, name)
		if err != nil {
			t.Fatalf("index.html references %s: %v", m[1], err)
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(js)
		zw.Close()
		t.Logf("%s: %d bytes gzipped", name, buf.Len())
		total += buf.Len()
	}
	if total > firstLoadLimit {
		t.Fatalf("first-load JavaScript is %d bytes gzipped, over the %d budget", total, firstLoadLimit)
	}
	t.Logf("first-load JavaScript: %.1f KB gzipped", float64(total)/1024)
}

func TestHandlerServesTheBuiltConsole(t *testing.T) {
	built(t)
	srv := httptest.NewServer(Handler("/console/"))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `<div id="app">`) || strings.Contains(string(body), "not built into this binary") {
		t.Fatalf("GET /console/: %d\n%s", resp.StatusCode, body)
	}
}
