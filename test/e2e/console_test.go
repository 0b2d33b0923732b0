package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// The web console driven in headless Chromium against a real gateway: the
// SPA embedded in bin/sandgate, its session sign-in, the live sandbox list, the agent
// views and the policy editor. Every step saves a screenshot under
// artifacts/console/<step>.png.

const consoleArtifacts = "artifacts/console"

// consoleBrowser is one Chromium tab on the gateway's console.
type consoleBrowser struct {
	ctx   context.Context
	base  string // http://addr
	loads int    // page loads so far, to make each open a new document
}

// newConsoleBrowser starts a Chromium (the binary chromium) with one tab on base; extra
// options add to the quiet defaults (no GPU, QUIC, background networking or sync).
func newConsoleBrowser(t *testing.T, chromium, base string, extra ...chromedp.ExecAllocatorOption) *consoleBrowser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800))
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &consoleBrowser{ctx: ctx, base: base}
}

// open loads the console afresh (a new document, not a hash change) at a hash route
// ("#/sandboxes").
func (b *consoleBrowser) open(t *testing.T, hash string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	b.loads++
	url := fmt.Sprintf("%s/console/?load=%d%s", b.base, b.loads, hash)
	err := chromedp.Do(ctx, chromedp.Navigate(url))
	if err != nil && strings.Contains(err.Error(), "ERR_NETWORK_CHANGED") {
		// Chromium fails a load in flight when an interface of the machine comes or goes
		// (the engine's and the Kubernetes node's, made by tests beside this one): as a
		// user would, load it again.
		err = chromedp.Do(ctx, chromedp.Navigate(url))
	}
	if err != nil {
		t.Fatalf("open %s: %v", hash, err)
	}
}

// failFirstRequest makes the page's next request whose URL matches pattern fail as a
// reset connection (Chromium's Fetch interception: a stand-in for a network that drops
// one request, which a real one does not do on demand) and lets the later ones through.
// stop ends the interception and reports how many it failed and let through.
func (b *consoleBrowser) failFirstRequest(t *testing.T, pattern string) (stop func() (failed, continued int)) {
	t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: pattern}}}); err != nil {
		cancel()
		t.Fatalf("intercept %s: %v", pattern, err)
	}
	var failedN, continuedN int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range paused {
			if err != nil {
				return
			}
			if failedN == 0 {
				failedN++
				_, _ = chromedp.Call(ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: ev.RequestID, ErrorReason: network.ErrorReasonConnectionReset})
				continue
			}
			continuedN++
			_, _ = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		}
	}()
	return func() (int, int) {
		_, _ = chromedp.Call(b.ctx, fetch.Disable, cdp.Empty{})
		cancel()
		<-done
		return failedN, continuedN
	}
}

// route changes the hash route without reloading the page.
func (b *consoleBrowser) route(t *testing.T, hash string) {
	t.Helper()
	b.eval(t, fmt.Sprintf(`location.hash = %q; ""`, hash))
}

func (b *consoleBrowser) eval(t *testing.T, js string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](`String((() => { return `+js+` })())`))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return out
}

// evalAsync evaluates an expression that yields a promise of a string.
func (b *consoleBrowser) evalAsync(t *testing.T, js string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(async () => String(await (`+js+`)))()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return out
}

// waitFor polls a JavaScript condition; on timeout it saves a screenshot and fails with
// the page's text.
func (b *consoleBrowser) waitFor(t *testing.T, d time.Duration, what, cond string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { try { return !!(`+cond+`) } catch (e) { return false } })()`))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.shot(t, "FAILED-"+t.Name())
			t.Fatalf("timed out after %s waiting for %s (%s); the page says:\n%s", d, what, cond, b.eval(t, `document.body.innerText`))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// click clicks the first element matching a CSS selector, the way a user's click does
// (a trusted event through the browser's input pipeline).
func (b *consoleBrowser) click(t *testing.T, sel string) {
	t.Helper()
	b.waitFor(t, 10*time.Second, sel+" to be there", fmt.Sprintf(`document.querySelector(%q)`, sel))
	b.eval(t, fmt.Sprintf(`document.querySelector(%q).scrollIntoView({block: "center"}), ""`, sel))
	box := b.eval(t, fmt.Sprintf(`(() => { const r = document.querySelector(%q).getBoundingClientRect(); return (r.x + r.width / 2) + "," + (r.y + r.height / 2) })()`, sel))
	var x, y float64
	if _, err := fmt.Sscanf(box, "%g,%g", &x, &y); err != nil {
		t.Fatalf("position of %s: %q", sel, box)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.MouseClickXY(x, y)); err != nil {
		t.Fatalf("click %s: %v", sel, err)
	}
}

// fill sets an input's or textarea's value the way typing does (an input event), so
// that the view's state follows.
func (b *consoleBrowser) fill(t *testing.T, sel, value string) {
	t.Helper()
	b.waitFor(t, 10*time.Second, sel+" to be there", fmt.Sprintf(`document.querySelector(%q)`, sel))
	v, _ := json.Marshal(value)
	b.eval(t, fmt.Sprintf(`(() => {
		const el = document.querySelector(%q);
		const proto = el instanceof HTMLTextAreaElement ? HTMLTextAreaElement.prototype : el instanceof HTMLSelectElement ? HTMLSelectElement.prototype : HTMLInputElement.prototype;
		Object.getOwnPropertyDescriptor(proto, "value").set.call(el, %s);
		el.dispatchEvent(new Event("input", {bubbles: true}));
		el.dispatchEvent(new Event("change", {bubbles: true}));
		return "";
	})()`, sel, v))
}

func (b *consoleBrowser) text(t *testing.T, sel string) string {
	t.Helper()
	return b.eval(t, fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel))
}

func (b *consoleBrowser) present(t *testing.T, sel string) bool {
	t.Helper()
	return b.eval(t, fmt.Sprintf(`!!document.querySelector(%q)`, sel)) == "true"
}

// shot saves a screenshot of the whole page as artifacts/console/<name>.png.
func (b *consoleBrowser) shot(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	name = strings.NewReplacer("/", "-", " ", "-").Replace(name)
	if err := os.MkdirAll(consoleArtifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(consoleArtifacts, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: test/e2e/%s", path)
}

// signIn signs in with key through the form and waits for the console to show role.
func (b *consoleBrowser) signIn(t *testing.T, key, role string) {
	t.Helper()
	b.open(t, "")
	b.waitFor(t, 20*time.Second, "the sign-in form or a session", `document.querySelector("#api-key") || document.querySelector("[data-testid=sign-out]")`)
	if b.present(t, "[data-testid=sign-out]") {
		b.signOut(t)
	}
	b.fill(t, "#api-key", key)
	b.click(t, "form button[type=submit]")
	b.waitFor(t, 20*time.Second, "the console signed in as "+role, fmt.Sprintf(`(document.querySelector("[data-testid=role]") || {}).textContent === %q`, role))
}

func (b *consoleBrowser) signOut(t *testing.T) {
	t.Helper()
	b.click(t, "[data-testid=sign-out]")
	b.waitFor(t, 20*time.Second, "the sign-in form after signing out", `document.querySelector("#api-key")`)
}

func consoleAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// requireConsoleAssets fails (not skips) when the binary was built without the SPA.
func requireConsoleAssets(t *testing.T, g *gateway) {
	t.Helper()
	resp, err := http.Get("http://" + g.Addr + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(body), "not built into this binary") || !strings.Contains(string(body), `id="app"`) {
		t.Fatalf("the gateway does not serve the console (status %d): build it into bin/sandgate with `make build` (which runs `make web`)\n%s", resp.StatusCode, tail(string(body), 600))
	}
}

func TestConsole(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (make deps installs it): %v", err)
	}
	e := newEnv(t, nil)
	g := e.startGateway()
	requireConsoleAssets(t, g)
	b := newConsoleBrowser(t, chromium, "http://"+g.Addr)
	var id string    // the sandbox the console created
	var other string // one created through the API

	t.Run("sign in", func(t *testing.T) {
		b.open(t, "")
		b.waitFor(t, 20*time.Second, "the sign-in form", `document.querySelector("#api-key")`)
		b.fill(t, "#api-key", "not-a-key")
		b.click(t, "form button[type=submit]")
		b.waitFor(t, 20*time.Second, "a readable refusal of a wrong key", `document.querySelector("[role=alert]")`)
		if msg := b.text(t, "[role=alert]"); !strings.Contains(msg, "not signed in") && !strings.Contains(strings.ToLower(msg), "key") {
			t.Fatalf("a wrong key's message: %q", msg)
		}
		b.signIn(t, g.APIKey, "admin")
		if c := b.eval(t, `document.cookie`); strings.Contains(c, "sandgate_session") {
			t.Fatalf("the session cookie is visible to scripts: %q", c)
		}
		// The session survives a reload: the cookie, not the page, holds it.
		b.open(t, "#/sandboxes")
		b.waitFor(t, 20*time.Second, "the console to stay signed in after a reload", `(document.querySelector("[data-testid=role]") || {}).textContent === "admin"`)
		b.waitFor(t, 20*time.Second, "the live list", `(document.querySelector("[data-testid=live]") || {}).textContent === "live"`)
		b.shot(t, "sign-in")
	})

	t.Run("create a sandbox and see it appear without reload", func(t *testing.T) {
		b.route(t, "#/sandboxes")
		b.waitFor(t, 20*time.Second, "the live list", `(document.querySelector("[data-testid=live]") || {}).textContent === "live"`)
		// A marker on the page's window: a reload would lose it.
		b.eval(t, `window.__sameDocument = "yes"`)
		b.click(t, "[data-testid=new-sandbox]")
		b.waitFor(t, 10*time.Second, "the create form", `document.querySelector("#create-image")`)
		if img := b.eval(t, `document.querySelector("#create-image").value`); img != baseImage {
			t.Fatalf("default image %q, want %q", img, baseImage)
		}
		b.fill(t, "#create-metadata", "made-by=console")
		b.click(t, "[data-testid=create-submit]")
		b.waitFor(t, 90*time.Second, "the new sandbox in the list", `document.querySelector("tr.sandbox-row")`)
		id = b.eval(t, `document.querySelector("tr.sandbox-row").dataset.id`)
		b.waitFor(t, 90*time.Second, "the sandbox to be Running in the list", fmt.Sprintf(`document.querySelector('tr[data-id=%q] .badge').textContent === "Running"`, id))
		// One created by another client appears too, pushed by the gateway.
		other = g.createSandbox(map[string]any{"metadata": map[string]string{"made-by": "api"}})
		b.waitFor(t, 20*time.Second, "a sandbox created through the API", fmt.Sprintf(`document.querySelector('tr[data-id=%q]')`, other))
		if b.eval(t, `window.__sameDocument`) != "yes" {
			t.Fatal("the page reloaded")
		}
		// Filters: by metadata, then by a state nothing is in.
		b.fill(t, "#meta-filter", "made-by=console")
		b.click(t, "form.filters button[type=submit]")
		b.waitFor(t, 20*time.Second, "the metadata filter to leave one sandbox", fmt.Sprintf(`document.querySelectorAll("tr.sandbox-row").length === 1 && document.querySelector('tr[data-id=%q]')`, id))
		b.click(t, `form.filters input[data-state=Paused]`)
		b.waitFor(t, 20*time.Second, "the empty state of a filter nothing matches", `document.querySelector(".empty")?.textContent.includes("No sandbox matches")`)
		b.shot(t, "sandbox-list-filtered")
		b.click(t, "[data-testid=clear-filters]")
		b.waitFor(t, 20*time.Second, "both sandboxes without filters", `document.querySelectorAll("tr.sandbox-row").length === 2`)
		r := g.do("GET", "/v1/sandboxes/"+id, nil)
		if r.Status != 200 || r.JSON(t)["metadata"].(map[string]any)["made-by"] != "console" {
			t.Fatalf("the console's sandbox: %d %s", r.Status, r.Body)
		}
		b.shot(t, "sandbox-list-live")
	})
	if id == "" {
		t.Fatal("no sandbox to continue with")
	}

	t.Run("run echo and see the output", func(t *testing.T) {
		b.route(t, "#/sandboxes/"+id+"/commands")
		b.fill(t, "#cmd-input", "echo console-$((6*7)); echo to-stderr >&2")
		b.click(t, "[data-testid=run-command]")
		b.waitFor(t, 30*time.Second, "the command's output", `document.querySelector("[data-testid=command-output]").textContent.includes("console-42")`)
		b.waitFor(t, 30*time.Second, "the command's exit status", `(document.querySelector("[data-testid=command-result]") || {}).textContent?.startsWith("Exit status 0")`)
		if out := b.text(t, "[data-testid=command-output]"); !strings.Contains(out, "to-stderr") || strings.Contains(out, "$((") {
			t.Fatalf("output: %q", out)
		}
		b.shot(t, "command-echo")
	})

	t.Run("type in the terminal and read the answer", func(t *testing.T) {
		b.route(t, "#/sandboxes/"+id+"/terminal")
		b.waitFor(t, 30*time.Second, "the terminal to connect", `(document.querySelector("[data-testid=terminal-status]") || {}).textContent === "Connected"`)
		b.eval(t, `document.querySelector(".xterm-helper-textarea").focus(), ""`)
		// The text goes in as typed text (input events, as an IME or a paste), Enter as a key.
		ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
		_, err := chromedp.Call(ctx, input.InsertText, input.InsertTextParams{Text: "echo term-$((7*6))"})
		if err == nil {
			err = chromedp.Do(ctx, chromedp.KeyEvent("\r"))
		}
		cancel()
		if err != nil {
			t.Fatalf("type: %v", err)
		}
		b.waitFor(t, 20*time.Second, "the shell's answer in the terminal", `document.querySelector(".xterm-rows").textContent.includes("term-42")`)
		// The PTY has the size the page fitted the terminal to (the resize message).
		rows := b.eval(t, `document.querySelectorAll(".xterm-rows > div").length`)
		ctx, cancel = context.WithTimeout(b.ctx, 20*time.Second)
		_, err = chromedp.Call(ctx, input.InsertText, input.InsertTextParams{Text: "stty size"})
		if err == nil {
			err = chromedp.Do(ctx, chromedp.KeyEvent("\r"))
		}
		cancel()
		if err != nil {
			t.Fatalf("type: %v", err)
		}
		b.waitFor(t, 20*time.Second, "stty to report "+rows+" rows", fmt.Sprintf(`[...document.querySelectorAll(".xterm-rows > div")].some(d => /^%s \d+$/.test(d.textContent.trim()))`, rows))
		// Reconnect: a reload attaches to the same shell and replays its screen.
		b.open(t, "#/sandboxes/"+id+"/terminal")
		b.waitFor(t, 30*time.Second, "the terminal to reconnect", `(document.querySelector("[data-testid=terminal-status]") || {}).textContent === "Connected"`)
		b.waitFor(t, 20*time.Second, "the replayed answer after reconnecting", `document.querySelector(".xterm-rows").textContent.includes("term-42")`)
		b.shot(t, "terminal")
	})

	t.Run("upload a file and download it back", func(t *testing.T) {
		content := "uploaded through the console " + randomHex(8) + "\n"
		local := filepath.Join(t.TempDir(), "console-upload.txt")
		if err := os.WriteFile(local, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		b.route(t, "#/sandboxes/"+id+"/files")
		b.waitFor(t, 20*time.Second, "the file list of /tmp", `document.querySelector("[data-testid=file-table]") || document.querySelector(".empty")`)
		ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
		err := chromedp.Do(ctx, chromedp.SetUploadFiles("#upload-input", []string{local}))
		cancel()
		if err != nil {
			t.Fatalf("choose the file: %v", err)
		}
		row := `tr[data-path="/tmp/console-upload.txt"]`
		b.waitFor(t, 20*time.Second, "the uploaded file in the list", fmt.Sprintf(`document.querySelector(%q)`, row))
		got := b.evalAsync(t, fmt.Sprintf(`fetch(document.querySelector(%q).href).then(r => r.ok ? r.text() : "HTTP " + r.status)`, row+" a[data-testid=download]"))
		if got != content {
			t.Fatalf("downloaded %q, want %q", got, content)
		}
		// Drag and drop: the same upload, from a drop on the drop zone.
		b.eval(t, `(() => {
			const dt = new DataTransfer();
			dt.items.add(new File(["dropped on the console\n"], "console-dropped.txt", {type: "text/plain"}));
			document.querySelector("[data-testid=dropzone]").dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true}));
			return "";
		})()`)
		b.waitFor(t, 20*time.Second, "the dropped file in the list", `document.querySelector('tr[data-path="/tmp/console-dropped.txt"]')`)
		// Edit a small text file in the page and read it back through the API.
		b.click(t, `tr[data-path="/tmp/console-dropped.txt"] [data-testid=edit]`)
		b.waitFor(t, 20*time.Second, "the editor with the file's text", `document.querySelector("#file-content")?.value === "dropped on the console\n"`)
		b.fill(t, "#file-content", "edited in the console\n")
		b.click(t, "[data-testid=save-file]")
		b.waitFor(t, 20*time.Second, "the save", `document.body.innerText.includes("Saved /tmp/console-dropped.txt")`)
		if got := b.evalAsync(t, `fetch("/v1/console/sandboxes/`+id+`/ports/44772/files/download?path=/tmp/console-dropped.txt").then(r => r.text())`); got != "edited in the console\n" {
			t.Fatalf("after the edit the file holds %q", got)
		}
		b.click(t, `tr[data-path="/tmp/console-upload.txt"] [data-testid=delete-file]`)
		b.click(t, `tr[data-path="/tmp/console-upload.txt"] [data-testid=delete-file-confirm]`)
		b.waitFor(t, 20*time.Second, "the deleted file to leave the list", `!document.querySelector('tr[data-path="/tmp/console-upload.txt"]')`)
		b.shot(t, "files-upload-download")
	})

	t.Run("edit metadata, renew, and read usage", func(t *testing.T) {
		b.route(t, "#/sandboxes/"+id+"/overview")
		b.waitFor(t, 20*time.Second, "the usage meters", `document.querySelector("[data-testid=metrics] meter")`)
		b.click(t, "[data-testid=edit-metadata]")
		b.fill(t, "#meta-edit", "made-by=console\nstage=test")
		b.click(t, "[data-testid=save-metadata]")
		b.waitFor(t, 20*time.Second, "the new metadata", `document.querySelector("[data-testid=metadata]")?.textContent.includes("stage")`)
		before := g.do("GET", "/v1/sandboxes/"+id, nil).JSON(t)
		if before["metadata"].(map[string]any)["stage"] != "test" {
			t.Fatalf("metadata after the edit: %v", before["metadata"])
		}
		b.fill(t, "#renew-minutes", "240")
		b.click(t, "[data-testid=renew]")
		b.waitFor(t, 20*time.Second, "the new expiry", `document.querySelector("[data-testid=expires]")?.textContent.includes("in 4h")`)
		exp, _ := time.Parse(time.RFC3339Nano, g.do("GET", "/v1/sandboxes/"+id, nil).JSON(t)["expiresAt"].(string))
		if d := time.Until(exp); d < 230*time.Minute || d > 241*time.Minute {
			t.Fatalf("expiry in %s after renewing to 240 minutes", d)
		}
		b.shot(t, "sandbox-overview")
	})

	t.Run("view and edit the egress policy", func(t *testing.T) {
		b.route(t, "#/sandboxes/"+id+"/egress")
		b.waitFor(t, 20*time.Second, "the egress policy", `document.querySelector("[data-testid=egress-mode]")`)
		b.click(t, "[data-testid=egress-edit]")
		b.click(t, "[data-testid=egress-add]")
		n := b.eval(t, `document.querySelectorAll("ol.rules li").length`)
		b.fill(t, "#rule-target-"+fmt.Sprint(consoleAtoi(t, n)-1), "blocked.example.com")
		b.fill(t, "#rule-action-"+fmt.Sprint(consoleAtoi(t, n)-1), "deny")
		b.click(t, "[data-testid=egress-apply]")
		b.waitFor(t, 30*time.Second, "the policy in force", `document.body.innerText.includes("The egress policy is in force.")`)
		b.waitFor(t, 20*time.Second, "the new rule, read back", `[...document.querySelectorAll("ol.rules input")].some(i => i.value === "blocked.example.com")`)
		// The platform's own rules are shown apart, not sent back (nor doubled) with the sandbox's.
		if n := b.eval(t, `[...document.querySelectorAll("ol.rules input")].filter(i => i.value === "169.254.0.0/16").length`); n != "0" {
			t.Fatalf("the platform's rule is among the sandbox's rules %s times", n)
		}
		if !strings.Contains(b.text(t, "[data-testid=platform-deny]"), "169.254.0.0/16") {
			t.Fatal("the platform's rules are not shown")
		}
		b.shot(t, "egress")
	})

	t.Run("open a signed preview link", func(t *testing.T) {
		startPreviewServer(t, g, id)
		b.route(t, "#/sandboxes/"+id+"/overview")
		b.fill(t, "#ep-port", fmt.Sprint(previewPort))
		b.click(t, "[data-testid=sign-link]")
		b.waitFor(t, 20*time.Second, "the signed link", `document.querySelector("[data-testid=signed-link]")`)
		b.shot(t, "signed-link-console")
		link := b.eval(t, `document.querySelector("[data-testid=signed-link]").href`)
		if !strings.Contains(link, "/sandboxes/"+id+"/proxy/") {
			t.Fatalf("signed link %q", link)
		}
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		err := chromedp.Do(ctx, chromedp.Navigate(link))
		cancel()
		if err != nil {
			t.Fatalf("open the link: %v", err)
		}
		// The preview page's script opens a WebSocket through the link's cookie.
		b.waitFor(t, 30*time.Second, "the preview page's WebSocket echo", `(document.querySelector("#out") || {}).textContent === "echo:ping"`)
		b.shot(t, "signed-link-preview")
	})

	t.Run("upload a plugin and follow its audit records live", func(t *testing.T) {
		wasm := filepath.Join(repoRoot, "plugins", "examples", "audit-jsonl", "audit-jsonl.wasm")
		if _, err := os.Stat(wasm); err != nil {
			t.Fatalf("the example plugin is missing (make plugins builds it): %v", err)
		}
		b.open(t, "#/plugins") // a new document: the last step left the console for a preview
		b.waitFor(t, 20*time.Second, "the plugins page", `document.querySelector("#plugin-file")`)
		ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
		err := chromedp.Do(ctx, chromedp.SetUploadFiles("#plugin-file", []string{wasm}))
		cancel()
		if err != nil {
			t.Fatalf("choose the module: %v", err)
		}
		b.fill(t, "#plugin-name", "audit")
		b.click(t, "[data-testid=plugin-upload]")
		b.waitFor(t, 30*time.Second, "the plugin in the list, loaded", `document.querySelector('tr[data-plugin="audit"] [data-testid=loaded]')?.textContent === "yes"`)
		b.shot(t, "plugins")

		// Activity in the sandbox is an event; the gateway's event log shows it live.
		b.route(t, "#/audit")
		b.click(t, "[data-testid=events-live-tail]")
		b.waitFor(t, 20*time.Second, "the live tail of events", `(document.querySelector("[data-testid=live]") || {}).textContent === "live"`)
		marker := "audit-" + randomHex(4)
		if out := stdoutOf(g.agent(id).run("echo " + marker)); out != marker {
			t.Fatalf("command output %q", out)
		}
		b.waitFor(t, 30*time.Second, "the command's event in the live tail", fmt.Sprintf(`document.querySelector("[data-testid=events]")?.textContent.includes(%q)`, marker))
		b.shot(t, "audit-events-live")

		// The plugin turns each event into a record of its own.
		b.fill(t, "#audit-kind", "plugin")
		b.click(t, "[data-testid=live-tail]")
		b.waitFor(t, 20*time.Second, "the live tail of plugin records", `(document.querySelector("[data-testid=live]") || {}).textContent === "live"`)
		marker = "plugin-" + randomHex(4)
		if out := stdoutOf(g.agent(id).run("echo " + marker)); out != marker {
			t.Fatalf("command output %q", out)
		}
		b.waitFor(t, 30*time.Second, "the plugin's record in the live tail", fmt.Sprintf(`document.querySelector("[data-testid=audit-records]")?.textContent.includes(%q)`, marker))
		b.shot(t, "audit-plugin-records-live")

		b.route(t, "#/sandboxes/"+id+"/activity")
		b.waitFor(t, 20*time.Second, "the sandbox's activity", fmt.Sprintf(`document.querySelector("main").textContent.includes(%q)`, marker))
		b.shot(t, "sandbox-activity")
	})

	t.Run("a viewer key sees no delete button", func(t *testing.T) {
		_, viewerKey := g.issueKey("default", "viewer")
		b.open(t, "#/sandboxes")
		b.waitFor(t, 20*time.Second, "the console", `document.querySelector("[data-testid=sign-out]")`)
		b.signOut(t)
		// Signing out revoked the session: the API refuses the browser now.
		if st := b.evalAsync(t, `fetch("/v1/sandboxes").then(r => r.status)`); st != "401" {
			t.Fatalf("after sign-out the API answered %s, want 401", st)
		}
		b.signIn(t, viewerKey, "viewer")
		b.route(t, "#/sandboxes")
		b.waitFor(t, 20*time.Second, "the viewer's list", fmt.Sprintf(`document.querySelector('tr[data-id=%q]')`, id))
		for _, sel := range []string{"[data-testid=bulk-delete]", "[data-testid=new-sandbox]", "table input[type=checkbox]"} {
			if b.present(t, sel) {
				t.Fatalf("a viewer sees %s", sel)
			}
		}
		b.shot(t, "viewer-list")
		b.route(t, "#/sandboxes/"+id)
		b.waitFor(t, 20*time.Second, "the viewer's sandbox page", `document.querySelector("h1.mono")`)
		if b.present(t, "[data-testid=delete-sandbox]") {
			t.Fatal("a viewer sees the sandbox's delete button")
		}
		b.shot(t, "viewer-detail")
		b.signOut(t)
	})

	t.Run("a policy that forbids an image refuses the create with its message", func(t *testing.T) {
		b.signIn(t, g.APIKey, "admin")
		b.route(t, "#/policy")
		b.waitFor(t, 20*time.Second, "the Rego in force", `document.querySelector("#rego-source")?.value.includes("package sandgate")`)
		b.fill(t, "#new-module", "console_images")
		b.click(t, "form.stack button[type=submit]")
		b.waitFor(t, 10*time.Second, "the new module in the editor", `document.querySelector("#rego-source").value.includes("package sandgate.admission")`)
		b.fill(t, "#rego-source", `package sandgate.admission

deny contains {"code": "ADMISSION::IMAGE_NOT_ALLOWED", "message": msg} if {
	input.request.image == "sandgate/forbidden:1"
	msg := sprintf("image %s is forbidden by the console test", [input.request.image])
}
`)
		b.click(t, "[data-testid=policy-validate]")
		b.waitFor(t, 20*time.Second, "validation", `document.body.innerText.includes("The changes compile.")`)
		b.click(t, "[data-testid=policy-apply]")
		b.waitFor(t, 20*time.Second, "the policy applied", `document.body.innerText.includes("The changes are in force")`)
		b.shot(t, "policy-applied")
		b.route(t, "#/sandboxes")
		b.click(t, "[data-testid=new-sandbox]")
		b.fill(t, "#create-image", "sandgate/forbidden:1")
		b.click(t, "[data-testid=create-submit]")
		b.waitFor(t, 30*time.Second, "the refusal in the form", `document.querySelector("[data-testid=create-error]").textContent.includes("forbidden by the console test")`)
		b.shot(t, "policy-refuses-image")
	})

	t.Run("a read the network drops is sent again", func(t *testing.T) {
		b.route(t, "#/audit")
		b.waitFor(t, 20*time.Second, "the audit page", `document.querySelector("[data-testid=events-live-tail]")`)
		stop := b.failFirstRequest(t, "*/v1/policy")
		b.route(t, "#/policy")
		b.waitFor(t, 20*time.Second, "the Rego in force, read on the second try", `document.querySelector("#rego-source")?.value.includes("package sandgate")`)
		failed, continued := stop()
		if failed != 1 || continued < 1 {
			t.Fatalf("GET /v1/policy: %d dropped, %d let through; want 1 dropped and the retry through", failed, continued)
		}
		if strings.Contains(b.eval(t, `document.body.innerText`), "did not answer") {
			t.Fatal("the page shows the dropped read's error after the retry answered")
		}
	})

	t.Run("the policy playground and the Rego tests", func(t *testing.T) {
		b.route(t, "#/policy")
		b.waitFor(t, 20*time.Second, "the playground", `document.querySelector("#pg-input")`)
		b.fill(t, "#pg-decision", "admission")
		b.fill(t, "#pg-input", `{"tenant": {"id": "default", "quotas": {}}, "usage": {"sandboxes": 0}, "request": {"image": "sandgate/forbidden:1", "count": 1}}`)
		b.click(t, "[data-testid=pg-evaluate]")
		b.waitFor(t, 30*time.Second, "the decision", `document.querySelector("[data-testid=pg-result]")?.textContent.includes("forbidden by the console test")`)
		if expl := b.text(t, "[data-testid=pg-explanation]"); !strings.Contains(expl, "console_images.rego") {
			t.Fatalf("the explanation does not point at the module that decided: %q", tail(expl, 600))
		}
		b.click(t, "[data-testid=run-tests]")
		b.waitFor(t, 120*time.Second, "the test report", `/\d+ passed, \d+ failed/.test(document.querySelector("[data-testid=test-summary]")?.textContent || "")`)
		b.shot(t, "policy-playground-tests")
	})

	t.Run("pools fill and batches come up live", func(t *testing.T) {
		b.route(t, "#/pools")
		b.click(t, "[data-testid=new-pool]")
		b.fill(t, "#pool-name", "console-pool")
		b.fill(t, "#new-bufferMin", "1")
		b.fill(t, "#new-bufferMax", "1")
		b.fill(t, "#new-poolMin", "0")
		b.fill(t, "#new-poolMax", "2")
		b.click(t, "[data-testid=create-pool]")
		b.waitFor(t, 90*time.Second, "the pool to hold a warm sandbox", `document.querySelector('[data-pool="console-pool"] [data-testid=available]')?.textContent === "1"`)
		b.click(t, `[data-pool="console-pool"] [data-testid=edit-capacity]`)
		b.fill(t, "#console-pool-bufferMax", "2")
		b.click(t, `[data-pool="console-pool"] [data-testid=save-capacity]`)
		b.waitFor(t, 20*time.Second, "the new bounds", `document.querySelector('[data-pool="console-pool"]').textContent.includes("in [1, 2]")`)
		if r := g.do("GET", "/v1/pools/console-pool", nil); r.Status != 200 || r.JSON(t)["capacitySpec"].(map[string]any)["bufferMax"] != float64(2) {
			t.Fatalf("pool after the capacity edit: %d %s", r.Status, r.Body)
		}
		b.shot(t, "pools")

		b.route(t, "#/batches")
		b.fill(t, "#batch-count", "2")
		b.waitFor(t, 20*time.Second, "the pools to choose from", `document.querySelector('#batch-source option[value="pool"]:not([disabled])')`)
		b.fill(t, "#batch-source", "pool")
		b.waitFor(t, 20*time.Second, "the pool among the choices", `document.querySelector('#batch-pool option[value="console-pool"]')`)
		b.fill(t, "#batch-pool", "console-pool")
		b.click(t, "[data-testid=create-batch]")
		b.waitFor(t, 120*time.Second, "both members running", `document.querySelector("[data-testid=batch-summary]")?.textContent.includes("2 running")`)
		b.shot(t, "batch")
	})

	t.Run("an admin creates a tenant and issues a key", func(t *testing.T) {
		b.route(t, "#/tenants")
		b.fill(t, "#tenant-name", "console-team")
		b.click(t, "[data-testid=create-tenant]")
		b.waitFor(t, 20*time.Second, "the new tenant", `[...document.querySelectorAll(".tenants h2")].some(h => h.textContent === "console-team")`)
		b.click(t, `[data-tenant-name="console-team"] [data-testid=show-keys]`)
		b.fill(t, `[data-tenant-name="console-team"] select`, "member")
		b.click(t, `[data-tenant-name="console-team"] [data-testid=issue-key]`)
		b.waitFor(t, 20*time.Second, "the new key, shown once", `document.querySelector("[data-testid=new-key]")`)
		key := b.text(t, "[data-testid=new-key]")
		if r := g.asKey(key).do("GET", "/v1/whoami", nil); r.Status != 200 || r.JSON(t)["role"] != "member" {
			t.Fatalf("the issued key: %d %s", r.Status, r.Body)
		}
		b.shot(t, "tenants-keys")
	})

	t.Run("select sandboxes and delete them at once", func(t *testing.T) {
		b.route(t, "#/sandboxes")
		b.waitFor(t, 20*time.Second, "the list", fmt.Sprintf(`document.querySelector('tr[data-id=%q]')`, other))
		// Everything but the console's own sandbox: the API's one and the batch's members.
		victims := b.eval(t, fmt.Sprintf(`[...document.querySelectorAll("tr.sandbox-row")].map(r => r.dataset.id).filter(x => x !== %q).join(",")`, id))
		ids := strings.Split(victims, ",")
		if len(ids) < 2 {
			t.Fatalf("want at least two sandboxes to delete, have %q", victims)
		}
		for _, v := range ids {
			b.click(t, fmt.Sprintf(`tr[data-id=%q] input[type=checkbox]`, v))
		}
		b.waitFor(t, 5*time.Second, "the selection count", fmt.Sprintf(`document.querySelector(".bulk").textContent.includes("%d selected")`, len(ids)))
		b.click(t, "[data-testid=bulk-delete]")
		b.click(t, "[data-testid=bulk-delete-confirm]")
		for _, v := range ids {
			b.waitFor(t, 60*time.Second, "deleted sandbox "+v+" to leave the list", fmt.Sprintf(`!document.querySelector('tr[data-id=%q]')`, v))
			if r := g.do("GET", "/v1/sandboxes/"+v, nil); r.Status != 404 {
				t.Fatalf("sandbox %s after the bulk delete: %d %s", v, r.Status, r.Body)
			}
		}
		if !b.present(t, fmt.Sprintf(`tr[data-id=%q]`, id)) {
			t.Fatal("the unselected sandbox left the list too")
		}
		b.shot(t, "bulk-delete")
	})

	t.Run("phone width", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		b.open(t, "#/sandboxes")
		b.waitFor(t, 20*time.Second, "the list at phone width", fmt.Sprintf(`document.querySelector('tr[data-id=%q]')`, id))
		if w := b.eval(t, `document.documentElement.scrollWidth`); w != "390" {
			t.Fatalf("the page is %s px wide at a 390 px viewport (it scrolls sideways)", w)
		}
		b.shot(t, "phone-sandboxes")
		b.route(t, "#/sandboxes/"+id+"/overview")
		b.waitFor(t, 20*time.Second, "the sandbox page at phone width", `document.querySelector("[data-testid=metadata]")`)
		if w := b.eval(t, `document.documentElement.scrollWidth`); w != "390" {
			t.Fatalf("the sandbox page is %s px wide at a 390 px viewport", w)
		}
		b.shot(t, "phone-sandbox-detail")
		// The navigation folds into a menu button.
		if b.eval(t, `getComputedStyle(document.querySelector("nav#nav")).display`) != "none" {
			t.Fatal("the navigation is not folded at phone width")
		}
		b.click(t, ".menu-toggle")
		b.waitFor(t, 5*time.Second, "the menu to open", `getComputedStyle(document.querySelector("nav#nav")).display !== "none"`)
		b.shot(t, "phone-menu")
	})
}
