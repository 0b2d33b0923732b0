package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	sandgate "github.com/sandgate/sandgate/client"
)

// TestImagePrefixNamesNothing: tenant B names a short hex prefix of tenant A's snapshot
// image id (the engine reads an unknown name as an id prefix) or its full id, as a
// create's or a pool template's image. Each is refused exactly as a name or id that
// exists nowhere is (status, code and message alike, but for the name itself), and
// nothing is created; a prefix names nothing for A either, while A's full id runs.
func TestImagePrefixNamesNothing(t *testing.T) {
	e := newEnv(t, startRedis(t))
	admin := e.startGateway()
	ta := admin.createTenant("img-a-"+randomHex(3), nil)
	tb := admin.createTenant("img-b-"+randomHex(3), nil)
	removeSnapshotImagesOfTenant(t, e, ta)
	_, ak := admin.issueKey(ta, "member")
	_, bk := admin.issueKey(tb, "member")
	a, b := admin.asKey(ak), admin.asKey(bk)
	ca := sdkClient(t, admin, ak)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	src := sdkCreate(t, ctx, ca, sandgate.CreateRequest{Env: map[string]string{"A_SECRET": "a-only"}, Entrypoint: []string{"sleep", "infinity"}}).ID
	sdkExec(t, ctx, ca, src, "echo a-files > /srv/a-file")
	a.snapshotOf(src)
	refs := snapshotImagesOfTenant(t, ta)
	if len(refs) != 1 {
		t.Fatalf("tenant A's snapshot images: %v", refs)
	}
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", refs[0]).Output()
	if err != nil {
		t.Fatalf("docker image inspect %s: %v", refs[0], err)
	}
	id := strings.TrimSpace(string(out))
	hexID := strings.TrimPrefix(id, "sha256:")

	// Counterparts of the same length that are a prefix of no image on the engine.
	all, err := exec.Command("docker", "image", "ls", "-aq", "--no-trunc").Output()
	if err != nil {
		t.Fatal(err)
	}
	unknown := func(t *testing.T, n int) string {
		for range 5000 {
			h := (randomHex(32) + randomHex(32))[:n]
			if !strings.Contains(string(all), "sha256:"+h) {
				return h
			}
		}
		t.Skipf("every %d-digit prefix names an image on this engine", n)
		return ""
	}

	create := func(g *gateway, image string) response {
		r := g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": image}, "entrypoint": []string{"sleep", "infinity"}})
		if r.Status/100 == 2 {
			if sid, _ := r.JSON(t)["id"].(string); sid != "" {
				t.Cleanup(func() { g.do("DELETE", "/v1/sandboxes/"+sid, nil) })
			}
		}
		return r
	}
	pool := func(g *gateway, image string) response {
		name := "p-" + randomHex(3)
		r := g.do("POST", "/v1/pools", map[string]any{"name": name,
			"template":     map[string]any{"image": map[string]any{"uri": image}, "entrypoint": []string{"sleep", "infinity"}},
			"capacitySpec": map[string]int{"bufferMin": 1, "bufferMax": 1, "poolMax": 1}})
		if r.Status/100 == 2 {
			t.Cleanup(func() { g.do("DELETE", "/v1/pools/"+name, nil) })
		}
		return r
	}
	// same checks that two answers differ only by the image named (quoted) in them: a
	// short name may also be a piece of a word of the message.
	same := func(t *testing.T, what string, got response, name string, want response, unknownName string) {
		t.Helper()
		if got.Status/100 == 2 {
			t.Fatalf("%s %q was accepted: %d %s", what, name, got.Status, got.Body)
		}
		g, w := got.JSON(t), want.JSON(t)
		gm, _ := g["message"].(string)
		wm, _ := w["message"].(string)
		if got.Status != want.Status || g["code"] != w["code"] || strings.ReplaceAll(gm, `"`+name+`"`, `"X"`) != strings.ReplaceAll(wm, `"`+unknownName+`"`, `"X"`) {
			t.Fatalf("%s %q answers %d %s, an image that exists nowhere (%q) %d %s", what, name, got.Status, got.Body, unknownName, want.Status, want.Body)
		}
	}

	before := len(e.containers())
	for _, n := range []int{2, 4, 12} {
		t.Run(fmt.Sprintf("a prefix of %d digits", n), func(t *testing.T) {
			prefix, other := hexID[:n], unknown(t, n)
			same(t, "tenant B's create from", create(b, prefix), prefix, create(b, other), other)
			same(t, "tenant B's pool of", pool(b, prefix), prefix, pool(b, other), other)
			same(t, "tenant A's create from", create(a, prefix), prefix, create(a, other), other)
		})
	}
	t.Run("the full id", func(t *testing.T) {
		other := "sha256:" + unknown(t, 64)
		same(t, "tenant B's create from", create(b, id), id, create(b, other), other)
		same(t, "tenant B's pool of", pool(b, id), id, pool(b, other), other)
	})
	t.Run("a short id", func(t *testing.T) {
		expectError(t, create(b, "sha256:"+hexID[:12]), 400, "SANDBOX::INVALID_PARAMETER")
	})
	// Give a refused pool's manager a moment to (not) start a member.
	time.Sleep(2 * time.Second)
	if n := len(e.containers()); n != before {
		t.Fatalf("containers %d → %d: a refused image started something", before, n)
	}

	t.Run("its owner runs it by full id", func(t *testing.T) {
		r := create(a, id)
		if r.Status != 202 {
			t.Fatalf("tenant A's create from its snapshot's id: %d %s", r.Status, r.Body)
		}
		sid := r.JSON(t)["id"].(string)
		if out := sdkExec(t, ctx, ca, sid, "cat /srv/a-file"); out != "a-files" {
			t.Fatalf("tenant A's sandbox from its snapshot's id sees %q", out)
		}
		if got := a.do("GET", "/v1/sandboxes/"+sid, nil); !strings.Contains(string(got.Body), id) {
			t.Fatalf("the sandbox does not report the image it was given (%s): %s", id, got.Body)
		}
	})
}
