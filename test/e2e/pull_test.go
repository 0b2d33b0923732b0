package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/test/testenv"
)

// testRegistry is the loopback registry of testenv.StartRegistry, with the pushes the
// tests here make to it.
type testRegistry struct{ *testenv.Registry }

// startRegistry runs the registry on a free loopback port; with a user it demands
// htpasswd basic auth. It is stopped, and its storage removed, in t.Cleanup.
func startRegistry(t *testing.T, user, password string) *testRegistry {
	t.Helper()
	return &testRegistry{testenv.StartRegistry(t, repoRoot, user, password)}
}

// push tags sandgate/base as addr/sandgate/base:tag and pushes it with the docker CLI,
// logging in (with a config directory of the test's own, not the user's) when user is
// set. Every tag it makes is removed in t.Cleanup.
func (r *testRegistry) push(t *testing.T, user, password string, tags ...string) {
	t.Helper()
	cfgDir := t.TempDir()
	docker := func(args ...string) {
		t.Helper()
		// Setup, not the subject: a push that breaks off on a loaded machine ("unexpected
		// EOF") is tried again, three times at most.
		var out []byte
		var err error
		for attempt := 0; attempt < 3; attempt++ {
			cmd := exec.Command("docker", args...)
			cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+cfgDir)
			if out, err = cmd.CombinedOutput(); err == nil || args[0] != "push" {
				break
			}
		}
		if err != nil {
			t.Fatalf("docker %s: %v\n%s", args[0], err, out)
		}
	}
	if user != "" {
		cmd := exec.Command("docker", "login", "--username", user, "--password-stdin", r.Addr)
		cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+cfgDir)
		cmd.Stdin = strings.NewReader(password)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("docker login %s: %v\n%s", r.Addr, err, out)
		}
	}
	for _, tag := range tags {
		ref := r.Addr + "/sandgate/base:" + tag
		docker("tag", baseImage, ref)
		docker("push", ref)
		// The engine must not keep the pushed tag: the creates below are to pull it.
		docker("rmi", ref)
		removeImageAtCleanup(t, ref)
	}
}

// removeImageAtCleanup removes a tag a test made or pulled (never another one).
func removeImageAtCleanup(t *testing.T, ref string) {
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", ref).Run() })
}

func imagePresent(ref string) bool {
	return exec.Command("docker", "image", "inspect", ref).Run() == nil
}

// TestImagePull: creates from an image the host does not have pull it from the registry
// it names, with image.auth for that pull only, sharing one pull between concurrent
// creates and answering a refused pull with the registry's reason.
func TestImagePull(t *testing.T) {
	const user, password = "puller", "s3cret-pull-pass"
	reg := startRegistry(t, user, password)
	open := startRegistry(t, "", "")
	reg.push(t, user, password, "test", "wrong", "anon", "concurrent", "pool")
	open.push(t, "", "", "open")

	e := newEnv(t, startRedis(t))
	// Both registries are on loopback, an address of the platform: the operator lists them.
	g := e.startGateway("SANDGATE_PULL=missing", "SANDGATE_IMAGE_REGISTRIES="+reg.Addr+","+open.Addr)
	create := func(image string, auth map[string]string) response {
		t.Helper()
		img := map[string]any{"uri": image}
		if auth != nil {
			img["auth"] = auth
		}
		return g.do("POST", "/v1/sandboxes", map[string]any{"image": img, "entrypoint": []string{"tail", "-f", "/dev/null"}, "timeout": 600})
	}
	started := func(t *testing.T, r response) string {
		t.Helper()
		if r.Status != http.StatusAccepted {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		id := r.JSON(t)["id"].(string)
		t.Cleanup(func() { g.do("DELETE", "/v1/sandboxes/"+id, nil) })
		return id
	}
	good := map[string]string{"username": user, "password": password}

	t.Run("right credentials pull the image", func(t *testing.T) {
		ref := reg.Addr + "/sandgate/base:test"
		id := started(t, create(ref, good))
		if !imagePresent(ref) {
			t.Fatalf("%s is not on the engine after the create", ref)
		}
		out := g.agent(id).as(t).run("cat /etc/debian_version")
		if lastEvent(out).Type != "execution_complete" {
			t.Fatalf("a command in the pulled sandbox: %v", eventTypes(out))
		}
		// The credentials are nowhere the gateway keeps or shows things.
		got := g.do("GET", "/v1/sandboxes/"+id, nil)
		inspect, _ := exec.Command("docker", "inspect", "sandgate-"+id).CombinedOutput()
		for what, text := range map[string]string{"the sandbox's API view": string(got.Body), "the container": string(inspect), "the gateway's log": g.proc.Logs()} {
			if strings.Contains(text, password) {
				t.Fatalf("the registry password appears in %s", what)
			}
		}
	})

	t.Run("wrong credentials answer the registry's reason", func(t *testing.T) {
		r := create(reg.Addr+"/sandgate/base:wrong", map[string]string{"username": user, "password": "not-the-password"})
		expectError(t, r, http.StatusBadRequest, "SANDBOX::IMAGE_PULL_FAILED")
		msg := r.JSON(t)["message"].(string)
		if !strings.Contains(strings.ToLower(msg), "unauthorized") && !strings.Contains(strings.ToLower(msg), "authentication required") {
			t.Fatalf("the message does not carry the registry's reason: %q", msg)
		}
		if strings.Contains(msg, "not-the-password") {
			t.Fatalf("the message repeats the password: %q", msg)
		}
		if imagePresent(reg.Addr + "/sandgate/base:wrong") {
			t.Fatal("the image was pulled with wrong credentials")
		}
	})

	t.Run("anonymous", func(t *testing.T) {
		// From a registry that demands credentials: refused, with its reason.
		r := create(reg.Addr+"/sandgate/base:anon", nil)
		expectError(t, r, http.StatusBadRequest, "SANDBOX::IMAGE_PULL_FAILED")
		if msg := strings.ToLower(r.JSON(t)["message"].(string)); !strings.Contains(msg, "unauthorized") && !strings.Contains(msg, "authentication required") && !strings.Contains(msg, "no basic auth") {
			t.Fatalf("anonymous pull from an authenticated registry: %q", msg)
		}
		// From an open one: pulled.
		ref := open.Addr + "/sandgate/base:open"
		removeImageAtCleanup(t, ref)
		started(t, create(ref, nil))
		if !imagePresent(ref) {
			t.Fatalf("%s is not on the engine after an anonymous create", ref)
		}
	})

	t.Run("an unknown tag answers the registry's reason", func(t *testing.T) {
		r := create(reg.Addr+"/sandgate/base:no-such-tag", good)
		expectError(t, r, http.StatusBadRequest, "SANDBOX::IMAGE_PULL_FAILED")
		if msg := strings.ToLower(r.JSON(t)["message"].(string)); !strings.Contains(msg, "not found") && !strings.Contains(msg, "manifest unknown") {
			t.Fatalf("pull of an unknown tag: %q", r.JSON(t)["message"])
		}
	})

	t.Run("two concurrent creates of one new image make one pull", func(t *testing.T) {
		ref := reg.Addr + "/sandgate/base:concurrent"
		removeImageAtCleanup(t, ref)
		pullsBefore := strings.Count(g.proc.Logs(), `"msg":"pulling image"`)
		var wg sync.WaitGroup
		results := make([]response, 2)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": ref, "auth": good}, "entrypoint": []string{"tail", "-f", "/dev/null"}, "timeout": 600})
			}()
		}
		wg.Wait()
		for _, r := range results {
			started(t, r)
		}
		if n := strings.Count(g.proc.Logs(), `"msg":"pulling image"`) - pullsBefore; n != 1 {
			t.Fatalf("the gateway started %d pulls for two concurrent creates of %s, want 1", n, ref)
		}
		// The registry agrees: its manifest was fetched by one pull, as many times as
		// the single pull of :test fetched its own.
		if got, want := reg.ManifestRequests("sandgate/base", "concurrent"), reg.ManifestRequests("sandgate/base", "test"); got != want || got == 0 {
			t.Fatalf("registry answered %d manifest requests for :concurrent, one pull (:test) makes %d", got, want)
		}
	})
	t.Run("a pool pulls its image once at creation and shows the pull", func(t *testing.T) {
		ref := reg.Addr + "/sandgate/base:pool"
		removeImageAtCleanup(t, ref)
		pullsBefore := strings.Count(g.proc.Logs(), `"msg":"pulling image"`)
		r := g.do("POST", "/v1/pools", map[string]any{"name": "pulled",
			"template":     map[string]any{"image": map[string]any{"uri": ref, "auth": good}, "entrypoint": []string{"tail", "-f", "/dev/null"}},
			"capacitySpec": map[string]int{"bufferMin": 2, "bufferMax": 2, "poolMax": 2}})
		if r.Status != http.StatusCreated {
			t.Fatalf("create pool: %d %s", r.Status, r.Body)
		}
		t.Cleanup(func() { g.do("DELETE", "/v1/pools/pulled", nil) })
		if strings.Contains(string(r.Body), password) {
			t.Fatalf("the pool's answer carries the password: %s", r.Body)
		}
		var last map[string]any
		testenv.WaitFor(t, 3*time.Minute, func() bool {
			last = g.do("GET", "/v1/pools/pulled", nil).JSON(t)
			st := last["status"].(map[string]any)
			return st["available"].(float64) == 2
		}, "the pool to fill from its pulled image")
		img, _ := last["status"].(map[string]any)["image"].(map[string]any)
		if img["state"] != "Ready" || img["layers"].(float64) < 1 || img["layersDone"] != img["layers"] {
			t.Fatalf("pool image pull status %v, want Ready with every layer done", img)
		}
		if n := strings.Count(g.proc.Logs(), `"msg":"pulling image"`) - pullsBefore; n != 1 {
			t.Fatalf("the pool started %d pulls, want 1 (at its creation)", n)
		}
		raw, _ := json.Marshal(last)
		if strings.Contains(string(raw), password) || strings.Contains(string(raw), `"auth"`) {
			t.Fatalf("the pool keeps the credentials: %s", raw)
		}
	})

	t.Run("a pool whose pull fails says why and makes no members", func(t *testing.T) {
		r := g.do("POST", "/v1/pools", map[string]any{"name": "unpullable",
			"template":     map[string]any{"image": map[string]any{"uri": reg.Addr + "/sandgate/base:wrong", "auth": map[string]string{"username": user, "password": "bad"}}, "entrypoint": []string{"tail", "-f", "/dev/null"}},
			"capacitySpec": map[string]int{"bufferMax": 1, "poolMax": 1}})
		if r.Status != http.StatusCreated {
			t.Fatalf("create pool: %d %s", r.Status, r.Body)
		}
		t.Cleanup(func() { g.do("DELETE", "/v1/pools/unpullable", nil) })
		var img map[string]any
		testenv.WaitFor(t, time.Minute, func() bool {
			img, _ = g.do("GET", "/v1/pools/unpullable", nil).JSON(t)["status"].(map[string]any)["image"].(map[string]any)
			return img["state"] == "Failed"
		}, "the pool's pull to fail")
		if msg, _ := img["message"].(string); !strings.Contains(strings.ToLower(msg), "unauthorized") && !strings.Contains(strings.ToLower(msg), "authentication required") {
			t.Fatalf("failed pool pull message: %q", msg)
		}
		if st := g.do("GET", "/v1/pools/unpullable", nil).JSON(t)["status"].(map[string]any); st["total"].(float64) != 0 {
			t.Fatalf("a pool whose image failed to pull has members: %v", st)
		}
	})
}

// TestImagePullRegistries: with SANDGATE_IMAGE_REGISTRIES set, admission (Rego) refuses a
// create that would pull from another registry, before any pull, while images the engine
// already has stay usable; SANDGATE_PULL=never keeps IMAGE_NOT_FOUND.
func TestImagePullRegistries(t *testing.T) {
	reg := startRegistry(t, "", "")
	reg.push(t, "", "", "allowlist")
	ref := reg.Addr + "/sandgate/base:allowlist"
	e := newEnv(t, startRedis(t))

	g := e.startGateway("SANDGATE_PULL=missing", "SANDGATE_IMAGE_REGISTRIES=127.0.0.1:1,ghcr.io")
	pushed := reg.ManifestRequests("sandgate/base", "allowlist") // the push's own
	r := g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": ref}, "entrypoint": []string{"tail", "-f", "/dev/null"}})
	expectError(t, r, http.StatusForbidden, "ADMISSION::REGISTRY_NOT_ALLOWED")
	if strings.Contains(g.proc.Logs(), `"msg":"pulling image"`) || reg.ManifestRequests("sandgate/base", "allowlist") != pushed {
		t.Fatal("a create refused by the registries rule still pulled")
	}
	// sandgate/base is on the engine: no pull, so no registry to check.
	id := g.createSandbox(map[string]any{})
	g.do("DELETE", "/v1/sandboxes/"+id, nil)
	g.Stop()

	g = e.startGateway("SANDGATE_PULL=never")
	r = g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": ref}, "entrypoint": []string{"tail", "-f", "/dev/null"}})
	expectError(t, r, http.StatusBadRequest, "SANDBOX::IMAGE_NOT_FOUND")
	// Half a credential is a client mistake, refused before anything runs.
	r = g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": ref, "auth": map[string]string{"username": "u"}}, "entrypoint": []string{"tail", "-f", "/dev/null"}})
	expectError(t, r, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER")

	g = e.startGateway("SANDGATE_PULL=missing", "SANDGATE_IMAGE_REGISTRIES="+reg.Addr)
	removeImageAtCleanup(t, ref)
	id = g.createSandbox(map[string]any{"image": map[string]any{"uri": ref}})
	g.do("DELETE", "/v1/sandboxes/"+id, nil)
}

// loopbackServer serves handler on a free loopback port until the test ends, and counts
// the connections it is offered.
func loopbackServer(t *testing.T, handler http.Handler) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	srv := &http.Server{Handler: handler, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), &conns
}

// TestPullRefusesPlatformHosts: a tenant member names a "registry" on loopback (or
// "localhost") as a create's or a pool's image, with credentials, to make the engine
// (root, in the host's network) send requests to the platform's own services. Refused
// with a 4xx before any request is sent: the listener there sees no connection. A
// registry the operator lists that redirects to a listener serving metrics is the
// engine's to follow, and its answer reaches the caller only as one of the fixed reasons
// (nothing of the body it was sent).
func TestPullRefusesPlatformHosts(t *testing.T) {
	marker := "platform_metric_" + randomHex(4)
	metrics, _ := loopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("# HELP " + marker + " a platform secret\n" + marker + " 1\n"))
	}))
	registry, conns := loopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		http.Redirect(w, r, "http://"+metrics+"/metrics", http.StatusTemporaryRedirect)
	}))
	_, port, _ := net.SplitHostPort(registry)
	e := newEnv(t, startRedis(t))
	auth := map[string]string{"username": "tenant-user", "password": "tenant-pass-" + randomHex(4)}

	g := e.startGateway("SANDGATE_PULL=missing")
	before := len(e.containers())
	for _, reg := range []string{registry, "localhost:" + port} {
		image := reg + "/team/app:1"
		r := g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": image, "auth": auth}, "entrypoint": []string{"tail", "-f", "/dev/null"}})
		expectError(t, r, http.StatusForbidden, "SANDBOX::IMAGE_REGISTRY_REFUSED")
		if msg := r.JSON(t)["message"].(string); !strings.Contains(msg, "SANDGATE_IMAGE_REGISTRIES") {
			t.Fatalf("the refusal does not say how an operator allows the registry: %q", msg)
		}
		r = g.do("POST", "/v1/pools", map[string]any{"name": "p-" + randomHex(3),
			"template":     map[string]any{"image": map[string]any{"uri": image, "auth": auth}, "entrypoint": []string{"tail", "-f", "/dev/null"}},
			"capacitySpec": map[string]int{"bufferMax": 1, "poolMax": 1}})
		expectError(t, r, http.StatusForbidden, "SANDBOX::IMAGE_REGISTRY_REFUSED")
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("the loopback registry saw %d connections from refused pulls", n)
	}
	if strings.Contains(g.proc.Logs(), `"msg":"pulling image"`) {
		t.Fatal("a refused registry was pulled from")
	}
	if n := len(e.containers()); n != before {
		t.Fatalf("containers %d → %d", before, n)
	}
	g.Stop()

	g = e.startGateway("SANDGATE_PULL=missing", "SANDGATE_IMAGE_REGISTRIES="+registry)
	r := g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": registry + "/team/app:1", "auth": auth}, "entrypoint": []string{"tail", "-f", "/dev/null"}})
	if r.Status/100 != 4 && r.Status/100 != 5 {
		t.Fatalf("a pull redirected to metrics: %d %s", r.Status, r.Body)
	}
	if conns.Load() == 0 {
		t.Fatal("the listed registry was not asked")
	}
	msg, _ := r.JSON(t)["message"].(string)
	fixed := false
	for _, reason := range []string{runtimes.PullReasonUnauthorized, runtimes.PullReasonDenied, runtimes.PullReasonNotFound, runtimes.PullReasonInvalidName,
		runtimes.PullReasonNoPlatform, runtimes.PullReasonUnreachable, runtimes.PullReasonBadAnswer} {
		fixed = fixed || strings.HasSuffix(msg, ": "+reason)
	}
	if !fixed || strings.Contains(msg, marker) || strings.Contains(msg, "#") || strings.Contains(msg, auth["password"]) {
		t.Fatalf("the answer is not one of the fixed reasons: %d %s", r.Status, r.Body)
	}
}
