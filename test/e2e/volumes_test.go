package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sandgate "github.com/sandgate/sandgate/client"
)

// removeVolumesOfTenant removes, at the end of the test, the named volumes sandgate made
// for tenant (its label), whatever the test left; the env's containers go first, as a
// volume in use cannot be removed.
func removeVolumesOfTenant(t *testing.T, e *env, tenant string) {
	t.Cleanup(func() {
		e.removeDockerObjects()
		out, _ := exec.Command("docker", "volume", "ls", "-q", "--filter", "label=sandgate.io/tenant="+tenant).Output()
		if names := strings.Fields(string(out)); len(names) > 0 {
			_ = exec.Command("docker", append([]string{"volume", "rm", "-f"}, names...)...).Run()
		}
	})
}

// volumesOfTenant lists the named volumes sandgate made for tenant.
func volumesOfTenant(t *testing.T, tenant string) []string {
	t.Helper()
	out, err := exec.Command("docker", "volume", "ls", "-q", "--filter", "label=sandgate.io/tenant="+tenant).Output()
	if err != nil {
		t.Fatalf("docker volume ls: %v", err)
	}
	return strings.Fields(string(out))
}

// withVolumes is a create request of the base image (as sdkCreate fills it) with vols.
func withVolumes(vols ...sandgate.Volume) sandgate.CreateRequest {
	return sandgate.CreateRequest{Image: &sandgate.Image{URI: baseImage}, Entrypoint: []string{"tail", "-f", "/dev/null"}, Volumes: vols}
}

// hostVolumeDirs makes an allowed prefix with a read-write and a read-only directory,
// writable by the sandbox's user whatever its uid.
func hostVolumeDirs(t *testing.T) (prefix, rw, ro string) {
	t.Helper()
	prefix = t.TempDir()
	rw, ro = filepath.Join(prefix, "rw"), filepath.Join(prefix, "ro")
	for _, d := range []string{rw, ro} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ro, "given"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return prefix, rw, ro
}

// TestVolumesHost: a host volume under an allowed prefix is mounted read-write (what the
// sandbox writes is on the host) and read-only (writes refused); every bad volume is a
// 4xx with a stable code that leaves no container and no record behind.
func TestVolumesHost(t *testing.T) {
	prefix, rw, ro := hostVolumeDirs(t)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(prefix, "escape")); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, nil)
	g := e.startGateway("SANDGATE_VOLUME_HOST_PREFIXES=" + prefix)

	id := g.createSandbox(map[string]any{"volumes": []map[string]any{
		{"name": "work", "mountPath": "/mnt/rw", "host": map[string]any{"path": rw}},
		{"name": "given", "mountPath": "/mnt/ro", "readOnly": true, "host": map[string]any{"path": ro}},
	}})
	a := g.agent(id)
	if ev := lastEvent(a.run("echo written-in-sandbox > /mnt/rw/out.txt")); ev.Type != "execution_complete" {
		t.Fatalf("write to the rw volume: %+v", ev)
	}
	got, err := os.ReadFile(filepath.Join(rw, "out.txt"))
	if err != nil || strings.TrimSpace(string(got)) != "written-in-sandbox" {
		t.Fatalf("host reads %q, %v; want the sandbox's write", got, err)
	}
	if out := stdoutOf(a.run("cat /mnt/ro/given")); out != "from the host" {
		t.Fatalf("ro volume reads %q", out)
	}
	if ev := lastEvent(a.run("echo x > /mnt/ro/new")); ev.Type != "error" {
		t.Fatalf("write to the read-only volume was not refused: %+v", ev)
	}
	if _, err := os.Stat(filepath.Join(ro, "new")); err == nil {
		t.Fatal("the read-only volume took a write")
	}

	before := len(e.containers())
	vol := func(extra map[string]any) []map[string]any {
		v := map[string]any{"name": "v", "mountPath": "/mnt/v", "host": map[string]any{"path": rw}}
		for k, val := range extra {
			v[k] = val
		}
		return []map[string]any{v}
	}
	cases := []struct {
		name    string
		volumes any
		status  int
		code    string
	}{
		{"relative host path", vol(map[string]any{"host": map[string]any{"path": "rw"}}), 400, "VOLUME::INVALID_PARAMETER"},
		{"host path outside the prefixes", vol(map[string]any{"host": map[string]any{"path": outside}}), 403, "VOLUME::HOST_NOT_ALLOWED"},
		{"symlink out of the prefix", vol(map[string]any{"host": map[string]any{"path": filepath.Join(prefix, "escape")}}), 403, "VOLUME::HOST_NOT_ALLOWED"},
		{"dot-dot out of the prefix", vol(map[string]any{"host": map[string]any{"path": prefix + "/rw/../.."}}), 403, "VOLUME::HOST_NOT_ALLOWED"},
		{"subPath through a symlink out", vol(map[string]any{"subPath": "escape", "host": map[string]any{"path": prefix}}), 403, "VOLUME::HOST_NOT_ALLOWED"},
		{"dot-dot in subPath", vol(map[string]any{"subPath": "../x"}), 400, "VOLUME::INVALID_PARAMETER"},
		{"absolute subPath", vol(map[string]any{"subPath": "/etc"}), 400, "VOLUME::INVALID_PARAMETER"},
		{"missing host path", vol(map[string]any{"host": map[string]any{"path": filepath.Join(prefix, "nope")}}), 400, "VOLUME::HOST_PATH_NOT_FOUND"},
		{"mount over /", vol(map[string]any{"mountPath": "/"}), 400, "VOLUME::INVALID_PARAMETER"},
		{"mount over the agent", vol(map[string]any{"mountPath": "/.sandgate"}), 400, "VOLUME::INVALID_PARAMETER"},
		{"mount inside the agent", vol(map[string]any{"mountPath": "/.sandgate/bin"}), 400, "VOLUME::INVALID_PARAMETER"},
		{"relative mountPath", vol(map[string]any{"mountPath": "mnt"}), 400, "VOLUME::INVALID_PARAMETER"},
		{"bad name", vol(map[string]any{"name": "Bad_Name"}), 400, "VOLUME::INVALID_PARAMETER"},
		{"two backends", vol(map[string]any{"pvc": map[string]any{"claimName": "c"}}), 400, "VOLUME::INVALID_PARAMETER"},
		{"no backend", []map[string]any{{"name": "v", "mountPath": "/mnt/v"}}, 400, "VOLUME::INVALID_PARAMETER"},
		{"unknown field", vol(map[string]any{"nfs": map[string]any{}}), 400, "VOLUME::INVALID_PARAMETER"},
		{"ossfs", []map[string]any{{"name": "v", "mountPath": "/mnt/v", "ossfs": map[string]any{"bucket": "b"}}}, 400, "VOLUME::UNSUPPORTED"},
		{"duplicate names", []map[string]any{
			{"name": "v", "mountPath": "/mnt/a", "host": map[string]any{"path": rw}},
			{"name": "v", "mountPath": "/mnt/b", "host": map[string]any{"path": ro}},
		}, 400, "VOLUME::INVALID_PARAMETER"},
		{"duplicate mount paths", []map[string]any{
			{"name": "a", "mountPath": "/mnt/a", "host": map[string]any{"path": rw}},
			{"name": "b", "mountPath": "/mnt/a/", "host": map[string]any{"path": ro}},
		}, 400, "VOLUME::INVALID_PARAMETER"},
		{"bad claim name", []map[string]any{{"name": "v", "mountPath": "/mnt/v", "pvc": map[string]any{"claimName": "../x"}}}, 400, "VOLUME::INVALID_PARAMETER"},
		{"bad storage", []map[string]any{{"name": "v", "mountPath": "/mnt/v", "pvc": map[string]any{"claimName": "c", "storage": "lots"}}}, 400, "VOLUME::INVALID_PARAMETER"},
		{"not an array", map[string]any{"name": "v"}, 400, "VOLUME::INVALID_PARAMETER"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			r := g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage},
				"entrypoint": []string{"tail", "-f", "/dev/null"}, "volumes": tt.volumes})
			expectError(t, r, tt.status, tt.code)
			// An answer names no resolved host path: not where a symlink leads, not the
			// prefix itself (the request's own path may be echoed).
			wd, _ := os.Getwd()
			for _, p := range []string{outside, prefix, wd} {
				if strings.Contains(string(r.Body), p) {
					t.Fatalf("the answer quotes the host path %s: %s", p, r.Body)
				}
			}
		})
	}
	if n := len(e.containers()); n != before {
		t.Fatalf("refused creates left containers: %d before, %d after", before, n)
	}
	if r := g.do("GET", "/v1/sandboxes", nil); r.JSON(t)["pagination"].(map[string]any)["totalItems"].(float64) != 1 {
		t.Fatalf("refused creates left records: %s", r.Body)
	}

	t.Run("a gateway without prefixes refuses host volumes", func(t *testing.T) {
		g2 := newEnv(t, nil).startGateway()
		r := g2.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage},
			"entrypoint": []string{"tail", "-f", "/dev/null"}, "volumes": vol(nil)})
		expectError(t, r, 403, "VOLUME::HOST_NOT_ALLOWED")
	})
}

// TestVolumesHostTenantRules: whether a tenant may mount host paths, and which, is the
// Rego admission policy's decision (the tenant's quotas narrow the platform's prefixes).
func TestVolumesHostTenantRules(t *testing.T) {
	prefix, rw, ro := hostVolumeDirs(t)
	e := newEnv(t, startRedis(t))
	admin := e.startGateway("SANDGATE_VOLUME_HOST_PREFIXES=" + prefix)
	narrow := admin.createTenant("narrow-"+randomHex(3), map[string]any{"hostVolumePrefixes": []string{ro}, "maxVolumes": 1})
	denied := admin.createTenant("nohost-"+randomHex(3), map[string]any{"denyHostVolumes": true})
	_, nk := admin.issueKey(narrow, "member")
	_, dk := admin.issueKey(denied, "member")
	cn, cd, ctx := sdkClient(t, admin, nk), sdkClient(t, admin, dk), context.Background()
	host := func(name, p string) sandgate.Volume {
		return sandgate.Volume{Name: name, MountPath: "/mnt/" + name, Host: &sandgate.HostVolume{Path: p}}
	}
	expectSDKError(t, errOf(cn.CreateSandbox(ctx, withVolumes(host("v", rw)))), 403, "VOLUME::HOST_NOT_ALLOWED")
	expectSDKError(t, errOf(cd.CreateSandbox(ctx, withVolumes(host("v", ro)))), 403, "VOLUME::HOST_NOT_ALLOWED")
	expectSDKError(t, errOf(cn.CreateSandbox(ctx, withVolumes(host("a", ro), host("b", ro)))), 429, "QUOTA::VOLUMES")
	sdkCreate(t, ctx, cn, withVolumes(host("v", ro)))
}

// TestVolumesNamed: a pvc volume is a Docker named volume private to its tenant: two
// sandboxes of one tenant share it, another tenant naming the same claim gets its own
// (and cannot reach the first's by name), and deleteOnSandboxTermination removes only a
// volume the sandbox's own create made.
func TestVolumesNamed(t *testing.T) {
	e := newEnv(t, startRedis(t))
	admin := e.startGateway()
	ta := admin.createTenant("vol-a-"+randomHex(3), map[string]any{"maxVolumeBytes": 1 << 30})
	tb := admin.createTenant("vol-b-"+randomHex(3), nil)
	removeVolumesOfTenant(t, e, ta)
	removeVolumesOfTenant(t, e, tb)
	_, ak := admin.issueKey(ta, "member")
	_, bk := admin.issueKey(tb, "member")
	ca, cb := sdkClient(t, admin, ak), sdkClient(t, admin, bk)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	no := false
	pvc := func(p sandgate.PVCVolume) sandgate.CreateRequest {
		return withVolumes(sandgate.Volume{Name: "data", MountPath: "/data", PVC: &p})
	}

	a1 := sdkCreate(t, ctx, ca, pvc(sandgate.PVCVolume{ClaimName: "shared"})).ID
	sdkExec(t, ctx, ca, a1, "echo tenant-a-secret > /data/f")
	a2 := sdkCreate(t, ctx, ca, pvc(sandgate.PVCVolume{ClaimName: "shared", CreateIfNotExists: &no, DeleteOnSandboxTermination: true})).ID
	if out := sdkExec(t, ctx, ca, a2, "cat /data/f"); out != "tenant-a-secret" {
		t.Fatalf("a second sandbox of the tenant reads %q", out)
	}

	t.Run("tenant B naming A's claim gets its own empty volume", func(t *testing.T) {
		b1 := sdkCreate(t, ctx, cb, pvc(sandgate.PVCVolume{ClaimName: "shared"})).ID
		if out := sdkExec(t, ctx, cb, b1, "ls -A /data; cat /data/f 2>&1 || true"); strings.Contains(out, "tenant-a-secret") {
			t.Fatalf("tenant B reads tenant A's data: %q", out)
		}
		// Guessing the engine name as a claim does not reach it either.
		engineName := volumesOfTenant(t, ta)[0]
		for _, claim := range []string{engineName, strings.TrimPrefix(engineName, "sgv-")} {
			expectSDKError(t, errOf(cb.CreateSandbox(ctx, pvc(sandgate.PVCVolume{ClaimName: claim, CreateIfNotExists: &no}))), 404, "VOLUME::NOT_FOUND")
		}
	})

	t.Run("subPath mounts only that directory of the volume, made when missing", func(t *testing.T) {
		sdkExec(t, ctx, ca, a1, "mkdir -p /data/proj/src && echo inside > /data/proj/src/f")
		req := withVolumes(sandgate.Volume{Name: "data", MountPath: "/work", SubPath: "proj", PVC: &sandgate.PVCVolume{ClaimName: "shared"}},
			sandgate.Volume{Name: "fresh", MountPath: "/fresh", SubPath: "made/here", PVC: &sandgate.PVCVolume{ClaimName: "shared"}})
		sub := sdkCreate(t, ctx, ca, req).ID
		if out := sdkExec(t, ctx, ca, sub, "cat /work/src/f; ls -A /work; ls -A /fresh | wc -l"); out != "inside\nsrc\n0" {
			t.Fatalf("with subPath proj the sandbox sees %q, want only proj's content", out)
		}
		sdkExec(t, ctx, ca, sub, "echo written > /fresh/g")
		if out := sdkExec(t, ctx, ca, a1, "cat /data/made/here/g"); out != "written" {
			t.Fatalf("a write under the missing subPath landed elsewhere: %q", out)
		}
		if err := ca.DeleteSandbox(ctx, sub); err != nil {
			t.Fatalf("delete: %v", err)
		}
	})

	t.Run("a volume mounted by subPath is in use: its maker's delete leaves it", func(t *testing.T) {
		maker := sdkCreate(t, ctx, ca, pvc(sandgate.PVCVolume{ClaimName: "kept", DeleteOnSandboxTermination: true})).ID
		user := sdkCreate(t, ctx, ca, withVolumes(sandgate.Volume{Name: "data", MountPath: "/data", SubPath: "s", PVC: &sandgate.PVCVolume{ClaimName: "kept"}})).ID
		sdkExec(t, ctx, ca, user, "echo still > /data/f")
		if err := ca.DeleteSandbox(ctx, maker); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if out := sdkExec(t, ctx, ca, user, "cat /data/f"); out != "still" {
			t.Fatalf("the volume's data went with its maker while another sandbox used it: %q", out)
		}
		if err := ca.DeleteSandbox(ctx, user); err != nil {
			t.Fatalf("delete: %v", err)
		}
	})

	t.Run("a subPath through a symlink the workload planted is refused", func(t *testing.T) {
		// The volume's content is the workload's: a symlink in it must not lead a later
		// mount out of the volume (here to the host's /etc).
		sdkExec(t, ctx, ca, a1, "ln -sfn /etc /data/out && mkdir -p /data/d && ln -sfn /etc /data/d/link")
		for _, subPath := range []string{"out", "d/link", "d/link/ssl"} {
			req := withVolumes(sandgate.Volume{Name: "data", MountPath: "/data", SubPath: subPath, PVC: &sandgate.PVCVolume{ClaimName: "shared"}})
			expectSDKError(t, errOf(ca.CreateSandbox(ctx, req)), 400, "VOLUME::INVALID_PARAMETER")
		}
	})

	t.Run("a missing claim without createIfNotExists is refused, nothing left", func(t *testing.T) {
		before := len(e.containers())
		expectSDKError(t, errOf(ca.CreateSandbox(ctx, pvc(sandgate.PVCVolume{ClaimName: "never-made", CreateIfNotExists: &no}))), 404, "VOLUME::NOT_FOUND")
		if n := len(e.containers()); n != before {
			t.Fatalf("containers %d → %d", before, n)
		}
	})

	t.Run("a create that fails after its start removes the volume it made", func(t *testing.T) {
		req := pvc(sandgate.PVCVolume{ClaimName: "doomed"})
		req.Entrypoint = []string{"false"}
		expectSDKError(t, errOf(ca.CreateSandbox(ctx, req)), 422, "SANDBOX::START_FAILED")
		for _, v := range volumesOfTenant(t, ta) {
			if strings.HasSuffix(v, "-doomed") {
				t.Fatalf("the failed create left its volume %s", v)
			}
		}
	})

	t.Run("size quota", func(t *testing.T) {
		expectSDKError(t, errOf(ca.CreateSandbox(ctx, pvc(sandgate.PVCVolume{ClaimName: "big", Storage: "2Gi"}))), 429, "QUOTA::VOLUME_SIZE")
	})

	t.Run("deleteOnSandboxTermination removes only what the sandbox made", func(t *testing.T) {
		scratch := sdkCreate(t, ctx, ca, pvc(sandgate.PVCVolume{ClaimName: "scratch", DeleteOnSandboxTermination: true})).ID
		if n := len(volumesOfTenant(t, ta)); n != 3 {
			t.Fatalf("tenant A has %d volumes, want shared, kept and scratch", n)
		}
		if err := ca.DeleteSandbox(ctx, scratch); err != nil {
			t.Fatalf("delete: %v", err)
		}
		// a2 asked for deleteOnSandboxTermination on the pre-existing "shared": it stays.
		if err := ca.DeleteSandbox(ctx, a2); err != nil {
			t.Fatalf("delete: %v", err)
		}
		vols := volumesOfTenant(t, ta)
		if len(vols) != 2 || !slices.ContainsFunc(vols, func(v string) bool { return strings.HasSuffix(v, "-shared") }) {
			t.Fatalf("tenant A's volumes after the deletes: %v, want shared and kept", vols)
		}
	})
}
