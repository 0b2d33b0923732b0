package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestCLIStateSnapshots drives `sandgate snapshot create|ls|get|rm`, `sandgate fork`
// and `sandbox create --snapshot/--volume` with -o json against the gateway: the
// snapshot keeps a written file for a sandbox created from it and for both copies of a
// fork, and server refusals print their code and exit non-zero.
func TestCLIStateSnapshots(t *testing.T) {
	e := newEnv(t, startRedis(t))
	admin := e.startGateway()
	tenant, key := sdkStateTenant(t, e, admin, "cli-snap")
	a := admin.asKey(key)
	c := newCLIEnv(t)
	flags := []string{"--url", "http://" + admin.Addr, "--api-key", key}
	run := func(args ...string) []string { return append(args, flags...) }

	type status struct{ State string }
	var src struct {
		ID     string
		Status status
	}
	c.okJSON(&src, run("sandbox", "create", "--entrypoint", "sleep,infinity", "-e", "CLI_ENV=carried")...)
	t.Cleanup(func() { a.do("DELETE", "/v1/sandboxes/"+src.ID, nil) })
	if src.ID == "" || src.Status.State != "Running" {
		t.Fatalf("create = %+v", src)
	}
	if ev := lastEvent(a.agent(src.ID).run("echo via-cli > /srv/cli-state")); ev.Type != "execution_complete" {
		t.Fatalf("write: %+v", ev)
	}

	var snap struct {
		ID, SandboxID, Name string
		Status              status
	}
	c.okJSON(&snap, run("snapshot", "create", src.ID, "--name", "cli")...)
	if snap.ID == "" || snap.SandboxID != src.ID || snap.Name != "cli" || snap.Status.State != "Ready" {
		t.Fatalf("snapshot create = %+v; want it Ready", snap)
	}
	var page struct {
		Items []struct{ ID string }
	}
	c.okJSON(&page, run("snapshot", "ls", "--sandbox", src.ID, "--state", "Ready")...)
	if len(page.Items) != 1 || page.Items[0].ID != snap.ID {
		t.Fatalf("snapshot ls = %+v", page)
	}
	c.okJSON(&page, run("snapshot", "ls", "--state", "Failed")...)
	if len(page.Items) != 0 {
		t.Fatalf("snapshot ls --state Failed = %+v", page)
	}
	if out := c.ok(run("snapshot", "ls")...); !strings.Contains(out, "SANDBOX") || !strings.Contains(out, snap.ID) || !strings.Contains(out, "Ready") {
		t.Fatalf("snapshot ls table:\n%s", out)
	}
	var got struct{ ID string }
	c.okJSON(&got, run("snapshot", "get", snap.ID)...)
	if got.ID != snap.ID {
		t.Fatalf("snapshot get = %+v", got)
	}

	var cp struct {
		ID     string
		Status status
	}
	c.okJSON(&cp, run("sandbox", "create", "--snapshot", snap.ID, "--volume", "cli-data:/data")...)
	t.Cleanup(func() { a.do("DELETE", "/v1/sandboxes/"+cp.ID, nil) })
	waitFor(t, 2*time.Minute, func() bool {
		return a.do("GET", "/v1/sandboxes/"+cp.ID, nil).JSON(t)["status"].(map[string]any)["state"] == "Running"
	}, "the sandbox from the snapshot to run")
	if out := stdoutOf(a.agent(cp.ID).run("cat /srv/cli-state; echo $CLI_ENV; echo vol > /data/v && cat /data/v")); out != "via-cli\ncarried\nvol" {
		t.Fatalf("the sandbox from the snapshot sees %q", out)
	}
	if vols := volumesOfTenant(t, tenant); len(vols) != 1 || !strings.HasSuffix(vols[0], "cli-data") {
		t.Fatalf("tenant volumes %v, want the one --volume named", vols)
	}

	var batch struct {
		ID      string
		Count   int
		Members []struct {
			ID     string
			Status status
		}
		Summary struct{ Running, Failed int }
	}
	c.okJSON(&batch, run("fork", src.ID, "--count", "2", "-l", "via=cli-fork")...)
	t.Cleanup(func() { a.do("DELETE", "/v1/batches/"+batch.ID, nil) })
	if batch.ID == "" || batch.Count != 2 || len(batch.Members) != 2 || batch.Summary.Running != 2 {
		t.Fatalf("fork = %+v; want 2 running copies", batch)
	}
	for _, m := range batch.Members {
		if out := stdoutOf(a.agent(m.ID).run("cat /srv/cli-state")); out != "via-cli" {
			t.Fatalf("fork copy %s sees %q", m.ID, out)
		}
	}

	t.Run("refusals print the code and exit non-zero", func(t *testing.T) {
		if _, errOut, code := c.run("", run("snapshot", "rm", snap.ID)...); code == 0 || !strings.Contains(errOut, "SNAPSHOT::IN_USE") {
			t.Fatalf("rm a snapshot in use: exit %d, stderr %q", code, errOut)
		}
		if _, errOut, code := c.run("", run("snapshot", "get", "no-such-snapshot")...); code == 0 || !strings.Contains(errOut, "SNAPSHOT::NOT_FOUND") {
			t.Fatalf("get a missing snapshot: exit %d, stderr %q", code, errOut)
		}
		if _, errOut, code := c.run("", run("fork", src.ID, "--count", "0")...); code == 0 || !strings.Contains(errOut, "--count") {
			t.Fatalf("fork --count 0: exit %d, stderr %q", code, errOut)
		}
		if _, errOut, code := c.run("", run("sandbox", "create", "--volume", "nomount")...); code == 0 || !strings.Contains(errOut, "--volume") {
			t.Fatalf("bad --volume: exit %d, stderr %q", code, errOut)
		}
		if out := c.ok("snapshot", "--help"); !strings.Contains(out, "sandgate snapshot create") {
			t.Fatalf("snapshot --help has no examples:\n%s", out)
		}
		if out := c.ok("fork", "--help"); !strings.Contains(out, "--count") || !strings.Contains(out, "sandgate fork") {
			t.Fatalf("fork --help:\n%s", out)
		}
	})

	// Once the sandbox from the snapshot is gone, rm succeeds (the fork's copies use
	// the fork's own snapshot).
	if r := a.do("DELETE", "/v1/sandboxes/"+cp.ID, nil); r.Status != 204 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	waitFor(t, 2*time.Minute, func() bool {
		_, _, code := c.run("", run("snapshot", "rm", snap.ID)...)
		return code == 0
	}, "snapshot rm to succeed once nothing uses it")
	if _, errOut, code := c.run("", run("snapshot", "get", snap.ID)...); code == 0 || !strings.Contains(errOut, "SNAPSHOT::NOT_FOUND") {
		t.Fatalf("get the removed snapshot: exit %d, stderr %q", code, errOut)
	}
}
