package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestImageBuildsInTheBackground: the gateway serves while an image of its
// image_builds is still being built; a create or a pool naming that image is refused
// with SANDBOX::IMAGE_BUILDING (503, Retry-After) and the build's latest step, GET
// /v1/images shows the build, and once it is done the same create starts a sandbox. A
// build that fails leaves its image refused as missing, with the build's reason listed.
// The console's sandbox list shows a line for each build not yet Ready.
func TestImageBuildsInTheBackground(t *testing.T) {
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	built := "sgtest/built-" + randomHex(6) + ":1"
	never := "sgtest/never-" + randomHex(6) + ":1"
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", built).Run() })
	// The build: two steps of output, a wait for the test's word, then the image (the
	// base image under another name: a real image on the engine).
	script := filepath.Join(dir, "build.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nset -e\necho 'step 1/2: preparing'\necho 'step 2/2: waiting for the test'\n"+
		"while [ ! -e "+release+" ]; do sleep 0.05; done\ndocker tag "+baseImage+" "+built+"\necho tagged\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// SANDGATE_PULL=never: a missing image is never asked of a registry.
	e := newEnv(t, nil, "SANDGATE_PULL=never", "SANDGATE_IMAGE_BUILDS="+built+"="+script+","+never+"=echo no such recipe >&2; exit 7")
	g := e.startGateway()

	builds := func() []map[string]any {
		t.Helper()
		r := g.do("GET", "/v1/images", nil)
		if r.Status != 200 {
			t.Fatalf("GET /v1/images: %d %s", r.Status, r.Body)
		}
		var body struct{ Items []map[string]any }
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		if len(body.Items) != 2 {
			t.Fatalf("GET /v1/images lists %d builds, want 2: %s", len(body.Items), r.Body)
		}
		return body.Items
	}
	waitFor(t, 30*time.Second, func() bool {
		b := builds()[0]
		return b["state"] == "Building" && b["step"] == "step 2/2: waiting for the test"
	}, "the build to report its step")

	// A tenant's key reads which images are coming, not the build's output (it may name
	// the host's paths and mirrors).
	_, viewerKey := g.issueKey(g.createTenant("image-readers", nil), "viewer")
	if r := g.asKey(viewerKey).do("GET", "/v1/images", nil); r.Status != 200 || !strings.Contains(string(r.Body), `"Building"`) ||
		strings.Contains(string(r.Body), "step") || strings.Contains(string(r.Body), "no such recipe") {
		t.Fatalf("GET /v1/images as a tenant's viewer: %d %s, want the states without the builds' output", r.Status, r.Body)
	}

	r := g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": built}, "timeout": 300,
		"resourceLimits": map[string]string{"cpu": "250m", "memory": "256Mi"}, "entrypoint": []string{"sleep", "infinity"}})
	if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), "SANDBOX::IMAGE_BUILDING") || !strings.Contains(string(r.Body), "step 2/2") {
		t.Fatalf("create naming an image being built: %d %s, want 503 SANDBOX::IMAGE_BUILDING with the step", r.Status, r.Body)
	}
	if r.Header.Get("Retry-After") == "" {
		t.Error("the refusal gives no Retry-After")
	}
	r = g.do("POST", "/v1/pools", map[string]any{"name": "waits", "template": map[string]any{"image": map[string]any{"uri": built}, "entrypoint": []string{"sleep", "infinity"}},
		"capacitySpec": map[string]int{"bufferMin": 1, "bufferMax": 1, "poolMin": 0, "poolMax": 1}})
	if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), "SANDBOX::IMAGE_BUILDING") {
		t.Fatalf("pool of an image being built: %d %s, want 503 SANDBOX::IMAGE_BUILDING", r.Status, r.Body)
	}

	// The console's sandbox list says so too, with the step.
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (make deps installs it): %v", err)
	}
	requireConsoleAssets(t, g)
	b := newConsoleBrowser(t, chromium, "http://"+g.Addr)
	b.signIn(t, g.APIKey, "admin")
	b.open(t, "#/sandboxes")
	b.waitFor(t, 20*time.Second, "the line of the image being built",
		`(document.querySelector("[data-testid=image-builds]") || {}).textContent.includes(`+jsonString(built)+`) && document.querySelector("[data-testid=image-builds]").textContent.includes("step 2/2")`)

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() bool { return builds()[0]["state"] == "Ready" }, "the build to finish")
	b.open(t, "#/sandboxes")
	b.waitFor(t, 20*time.Second, "the console to show the failed build alone",
		`(document.querySelector("[data-testid=image-builds]") || {}).textContent.includes("could not be built") && !document.querySelector("[data-testid=image-builds]").textContent.includes(`+jsonString(built)+`)`)
	id := g.createSandbox(map[string]any{"image": map[string]any{"uri": built}})
	if out := stdoutOf(g.agent(id).run("echo from-the-built-image")); out != "from-the-built-image" {
		t.Fatalf("sandbox of the built image: %q", out)
	}
	g.do("DELETE", "/v1/sandboxes/"+id, nil)

	waitFor(t, 30*time.Second, func() bool { return builds()[1]["state"] == "Failed" }, "the second build to fail")
	if msg, _ := builds()[1]["message"].(string); !strings.Contains(msg, "exit status 7") || !strings.Contains(msg, "no such recipe") {
		t.Fatalf("failed build's message %q, want its exit and output", msg)
	}
	r = g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": never}, "timeout": 300, "entrypoint": []string{"sleep", "infinity"}})
	if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "SANDBOX::IMAGE_NOT_FOUND") {
		t.Fatalf("create naming an image whose build failed: %d %s, want it refused as any missing image", r.Status, r.Body)
	}
}
