package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	sandgate "github.com/sandgate/sandgate/client"
)

// sdkStateTenant makes a member key of a new tenant whose snapshot images and named
// volumes are removed at the end of the test.
func sdkStateTenant(t *testing.T, e *env, admin *gateway, prefix string) (tenant, key string) {
	t.Helper()
	tenant = admin.createTenant(prefix+"-"+randomHex(3), map[string]any{"maxBatchSize": 10, "maxVolumeBytes": 1 << 30})
	removeSnapshotImagesOfTenant(t, e, tenant)
	removeVolumesOfTenant(t, e, tenant)
	_, key = admin.issueKey(tenant, "member")
	return tenant, key
}

// sdkExec runs command in a sandbox through the SDK and returns its trimmed stdout.
func sdkExec(t *testing.T, ctx context.Context, c *sandgate.Client, id, command string) string {
	t.Helper()
	a, err := c.Agent(ctx, id)
	if err != nil {
		t.Fatalf("agent of %s: %v", id, err)
	}
	res, err := a.Exec(ctx, command)
	if err != nil {
		t.Fatalf("exec %q in %s: %v", command, id, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q in %s: exit %d, stderr %q", command, id, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(res.Stdout)
}

// TestGoSDKStateSnapshots: through the SDK, a snapshot of a sandbox with a file written
// is listed and filtered, a sandbox created from it sees the file, a fork of 2 (answered
// as a batch) has it in both copies, the snapshot cannot go while a copy uses it
// (ErrSnapshotInUse) and goes after; the new error codes match their sentinels.
func TestGoSDKStateSnapshots(t *testing.T) {
	e := newEnv(t, startRedis(t))
	admin := e.startGateway()
	_, key := sdkStateTenant(t, e, admin, "sdk-snap")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := sdkClient(t, admin, key)

	src := sdkCreate(t, ctx, c, sandgate.CreateRequest{Entrypoint: []string{"sleep", "infinity"}, Env: map[string]string{"FROM_SOURCE": "yes"}})
	a, err := c.Agent(ctx, src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WriteFile(ctx, "/srv/sdk-state", []byte("kept-by-the-sdk\n"), 0o644); err != nil {
		t.Fatalf("write: %v", err)
	}

	snap, err := c.CreateSnapshot(ctx, src.ID, "sdk")
	if err != nil || snap.ID == "" || snap.SandboxID != src.ID || snap.Name != "sdk" || snap.Status.State != sandgate.SnapshotCreating {
		t.Fatalf("create snapshot = %+v, %v", snap, err)
	}
	ready, err := c.WaitSnapshot(ctx, snap.ID)
	if err != nil || ready.Status.State != sandgate.SnapshotReady {
		t.Fatalf("wait snapshot = %+v, %v", ready, err)
	}
	got, err := c.GetSnapshot(ctx, snap.ID)
	if err != nil || got.ID != snap.ID || got.Status.State != sandgate.SnapshotReady {
		t.Fatalf("get snapshot = %+v, %v", got, err)
	}
	for _, opts := range []sandgate.SnapshotListOptions{{}, {SandboxID: src.ID}, {States: []string{"ready"}}, {SandboxID: src.ID, States: []string{sandgate.SnapshotReady}, PageSize: 5}} {
		p, err := c.ListSnapshots(ctx, opts)
		if err != nil || len(p.Items) != 1 || p.Items[0].ID != snap.ID || p.Pagination.TotalItems != 1 {
			t.Fatalf("list %+v = %+v, %v", opts, p, err)
		}
	}
	for _, opts := range []sandgate.SnapshotListOptions{{States: []string{sandgate.SnapshotFailed}}, {SandboxID: "no-such-sandbox"}} {
		if p, err := c.ListSnapshots(ctx, opts); err != nil || len(p.Items) != 0 {
			t.Fatalf("list %+v = %+v, %v; want none", opts, p, err)
		}
	}

	// A sandbox from the snapshot: no image, no entrypoint, the source's come along.
	cp, err := c.CreateSandbox(ctx, sandgate.CreateRequest{SnapshotID: snap.ID})
	if err != nil {
		t.Fatalf("create from snapshot: %v", err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), cp.ID) })
	if _, err := c.WaitForState(ctx, cp.ID, sandgate.StateRunning); err != nil {
		t.Fatalf("copy: %v", err)
	}
	if out := sdkExec(t, ctx, c, cp.ID, "cat /srv/sdk-state; echo $FROM_SOURCE"); out != "kept-by-the-sdk\nyes" {
		t.Fatalf("the copy sees %q", out)
	}

	b, err := c.Fork(ctx, src.ID, sandgate.ForkRequest{Count: 2, Metadata: map[string]string{"via": "sdk-fork"}})
	if err != nil || b.ID == "" || b.Count != 2 || len(b.Members) != 2 {
		t.Fatalf("fork = %+v, %v", b, err)
	}
	t.Cleanup(func() { _ = c.DeleteBatch(context.Background(), b.ID) })
	b, err = c.WaitBatch(ctx, b.ID, nil)
	if err != nil || b.Summary.Running != 2 {
		t.Fatalf("fork batch = %+v, %v; want 2 running", b, err)
	}
	for _, m := range b.Members {
		if m.ID == src.ID || m.ID == cp.ID {
			t.Fatalf("a fork member has the id %s of an existing sandbox", m.ID)
		}
		if out := sdkExec(t, ctx, c, m.ID, "cat /srv/sdk-state"); out != "kept-by-the-sdk" {
			t.Fatalf("fork member %s sees %q", m.ID, out)
		}
		sb, err := c.GetSandbox(ctx, m.ID)
		if err != nil || sb.Metadata["via"] != "sdk-fork" {
			t.Fatalf("fork member %s = %+v, %v; want the fork's metadata", m.ID, sb, err)
		}
	}
	// The fork's own snapshot is listed beside ours.
	if p, err := c.ListSnapshots(ctx, sandgate.SnapshotListOptions{SandboxID: src.ID}); err != nil || len(p.Items) != 2 {
		t.Fatalf("snapshots of the source after the fork = %+v, %v; want 2", p, err)
	}

	if err := c.DeleteSnapshot(ctx, snap.ID); !errors.Is(err, sandgate.ErrSnapshotInUse) {
		t.Fatalf("delete a snapshot a sandbox runs from: %v, want ErrSnapshotInUse", err)
	}
	if err := c.DeleteSandbox(ctx, cp.ID); err != nil {
		t.Fatalf("delete copy: %v", err)
	}
	waitFor(t, 2*time.Minute, func() bool {
		err := c.DeleteSnapshot(ctx, snap.ID)
		if err != nil && !errors.Is(err, sandgate.ErrSnapshotInUse) {
			t.Fatalf("delete snapshot: %v", err)
		}
		return err == nil
	}, "the snapshot to be deleted once its copy is gone")
	if _, err := c.GetSnapshot(ctx, snap.ID); !errors.Is(err, sandgate.ErrSnapshotNotFound) {
		t.Fatalf("get a deleted snapshot: %v, want ErrSnapshotNotFound", err)
	}
	if _, err := c.CreateSandbox(ctx, sandgate.CreateRequest{SnapshotID: snap.ID}); !errors.Is(err, sandgate.ErrSnapshotNotFound) {
		t.Fatalf("create from a deleted snapshot: %v, want ErrSnapshotNotFound", err)
	}
	if _, err := c.CreateSnapshot(ctx, src.ID, strings.Repeat("n", 129)); !errors.Is(err, sandgate.ErrSnapshotInvalid) {
		t.Fatalf("snapshot with a long name: %v, want ErrSnapshotInvalid", err)
	}
	if _, err := c.Fork(ctx, "no-such-sandbox", sandgate.ForkRequest{Count: 1}); !errors.Is(err, sandgate.ErrNotFound) {
		t.Fatalf("fork of a missing sandbox: %v, want ErrNotFound", err)
	}
	if _, err := c.Fork(ctx, src.ID, sandgate.ForkRequest{Count: 0}); !errors.Is(err, sandgate.ErrInvalidParameter) {
		t.Fatalf("fork of 0: %v, want ErrInvalidParameter", err)
	}
}

// TestGoSDKStateVolumes: a named volume (PVCVolume) is shared by two sandboxes of one
// tenant created through the SDK; a missing claim without CreateIfNotExists is
// ErrVolumeNotFound, a bad one ErrVolumeInvalid; and the gateway's sandbox metrics
// answer for the sandbox, once and as a watch.
func TestGoSDKStateVolumes(t *testing.T) {
	e := newEnv(t, startRedis(t))
	admin := e.startGateway()
	tenant, key := sdkStateTenant(t, e, admin, "sdk-vol")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := sdkClient(t, admin, key)
	vol := func(claim string, create *bool) []sandgate.Volume {
		return []sandgate.Volume{{Name: "data", MountPath: "/data", PVC: &sandgate.PVCVolume{ClaimName: claim, CreateIfNotExists: create}}}
	}

	s1 := sdkCreate(t, ctx, c, sandgate.CreateRequest{Volumes: vol("sdk-shared", nil)})
	sdkExec(t, ctx, c, s1.ID, "echo written-by-one > /data/f")
	no := false
	s2 := sdkCreate(t, ctx, c, sandgate.CreateRequest{Volumes: vol("sdk-shared", &no)})
	if out := sdkExec(t, ctx, c, s2.ID, "cat /data/f"); out != "written-by-one" {
		t.Fatalf("the second sandbox reads %q", out)
	}
	if vols := volumesOfTenant(t, tenant); len(vols) != 1 {
		t.Fatalf("tenant has volumes %v, want the one shared", vols)
	}
	if _, err := c.CreateSandbox(ctx, sandgate.CreateRequest{Image: &sandgate.Image{URI: baseImage}, Entrypoint: []string{"tail", "-f", "/dev/null"},
		Volumes: vol("never-made", &no)}); !errors.Is(err, sandgate.ErrVolumeNotFound) {
		t.Fatalf("missing claim: %v, want ErrVolumeNotFound", err)
	}
	if _, err := c.CreateSandbox(ctx, sandgate.CreateRequest{Image: &sandgate.Image{URI: baseImage}, Entrypoint: []string{"tail", "-f", "/dev/null"},
		Volumes: vol("../x", nil)}); !errors.Is(err, sandgate.ErrVolumeInvalid) {
		t.Fatalf("bad claim: %v, want ErrVolumeInvalid", err)
	}

	var m *sandgate.SandboxMetrics
	waitFor(t, 2*time.Minute, func() bool {
		var err error
		m, err = c.SandboxMetrics(ctx, s1.ID)
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		return m.Current != nil
	}, "a usage point of the sandbox")
	if m.ID != s1.ID || m.IntervalSeconds <= 0 || m.Current.MemoryBytes == 0 || m.Current.Time.IsZero() {
		t.Fatalf("metrics = %+v (current %+v)", m, m.Current)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	n := 0
	for p, err := range c.WatchSandboxMetrics(wctx, s1.ID) {
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if p.Time.IsZero() || p.MemoryBytes == 0 {
			t.Fatalf("watch point = %+v", p)
		}
		if n++; n == 2 {
			break
		}
	}
	if n != 2 {
		t.Fatalf("watch gave %d points (ctx %v), want 2", n, wctx.Err())
	}
	if _, err := c.SandboxMetrics(ctx, "no-such-sandbox"); !errors.Is(err, sandgate.ErrNotFound) {
		t.Fatalf("metrics of a missing sandbox: %v, want ErrNotFound", err)
	}
}

// TestGoSDKStateVault drives the credential vault calls of the SDK through the gateway:
// create, get, the credential and binding reads (never a value), a patch with and
// without the right expected revision, a binding to a host the egress policy does not
// allow (refused by the Rego vault policy), delete; and a sandbox without the proxy
// answers ErrVaultProxyNotEnabled. No traffic leaves the sandbox.
func TestGoSDKStateVault(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := sdkClient(t, g, e.APIKey)
	const host = "vault-sdk.example"
	const secret = "sdk-secret-value-1234"
	sb := sdkCreate(t, ctx, c, sandgate.CreateRequest{
		NetworkPolicy:   &sandgate.NetworkPolicy{DefaultAction: "deny", Egress: []sandgate.EgressRule{{Action: "allow", Target: host}}},
		CredentialProxy: &sandgate.CredentialProxy{Enabled: true},
	})
	v, err := c.Vault(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Get(ctx); !errors.Is(err, sandgate.ErrVaultNotFound) {
		t.Fatalf("get before create: %v, want ErrVaultNotFound", err)
	}
	bind := sandgate.Binding{Name: "api", Match: sandgate.BindingMatch{Hosts: []string{host}, Paths: []string{"/v1/*"}},
		Auth: sandgate.BindingAuth{Type: sandgate.AuthBearer, Credential: "token"}}
	st, err := v.Create(ctx, []sandgate.Credential{sandgate.InlineCredential("token", secret)}, []sandgate.Binding{bind})
	if err != nil || st.Revision != 1 || len(st.Credentials) != 1 || st.Credentials[0].SourceType != "inline" ||
		len(st.Bindings) != 1 || st.Bindings[0].Match.Ports[0] != 443 || st.Bindings[0].Auth.Type != sandgate.AuthBearer {
		t.Fatalf("create = %+v, %v", st, err)
	}
	if _, err := v.Create(ctx, nil, nil); !errors.Is(err, sandgate.ErrVaultAlreadyExists) {
		t.Fatalf("second create: %v, want ErrVaultAlreadyExists", err)
	}
	got, err := v.Get(ctx)
	if err != nil || got.Revision != 1 {
		t.Fatalf("get = %+v, %v", got, err)
	}
	creds, err := v.Credentials(ctx)
	if err != nil || len(creds) != 1 || creds[0].Name != "token" {
		t.Fatalf("credentials = %+v, %v", creds, err)
	}
	if cm, err := v.Credential(ctx, "token"); err != nil || cm.Name != "token" {
		t.Fatalf("credential = %+v, %v", cm, err)
	}
	binds, err := v.Bindings(ctx)
	if err != nil || len(binds) != 1 || binds[0].Name != "api" {
		t.Fatalf("bindings = %+v, %v", binds, err)
	}
	if bm, err := v.Binding(ctx, "api"); err != nil || bm.Match.Hosts[0] != host {
		t.Fatalf("binding = %+v, %v", bm, err)
	}
	if _, err := v.Binding(ctx, "nope"); !errors.Is(err, sandgate.ErrVaultNotFound) {
		t.Fatalf("missing binding: %v, want ErrVaultNotFound", err)
	}

	stale := int64(0)
	if _, err := v.Patch(ctx, sandgate.VaultPatch{ExpectedRevision: &stale, Credentials: &sandgate.CredentialChanges{
		Add: []sandgate.Credential{sandgate.InlineCredential("other", "x-value")}}}); !errors.Is(err, sandgate.ErrVaultRevisionConflict) {
		t.Fatalf("patch at a stale revision: %v, want ErrVaultRevisionConflict", err)
	}
	rev := got.Revision
	st, err = v.Patch(ctx, sandgate.VaultPatch{ExpectedRevision: &rev, Credentials: &sandgate.CredentialChanges{
		Replace: []sandgate.Credential{sandgate.InlineCredential("token", secret+"-2")}}})
	if err != nil || st.Revision != rev+1 {
		t.Fatalf("patch = %+v, %v", st, err)
	}
	other := bind
	other.Name, other.Match.Hosts = "elsewhere", []string{"not-allowed.example"}
	if _, err := v.Patch(ctx, sandgate.VaultPatch{Bindings: &sandgate.BindingChanges{Add: []sandgate.Binding{other}}}); !errors.Is(err, sandgate.ErrVaultHostNotAllowed) {
		t.Fatalf("binding a host the egress policy denies: %v, want ErrVaultHostNotAllowed", err)
	}
	if _, err := v.Patch(ctx, sandgate.VaultPatch{Bindings: &sandgate.BindingChanges{Add: []sandgate.Binding{{Name: "x", Match: sandgate.BindingMatch{Hosts: []string{host}},
		Auth: sandgate.BindingAuth{Type: sandgate.AuthBearer, Credential: "no-such"}}}}}); !errors.Is(err, sandgate.ErrVaultUnknownCredential) {
		t.Fatalf("binding an unknown credential: %v, want ErrVaultUnknownCredential", err)
	}
	// No answer ever held a value.
	for _, s := range []any{st, got, creds, binds} {
		if b, _ := json.Marshal(s); strings.Contains(string(b), secret) {
			t.Fatalf("an answer holds the credential's value: %s", b)
		}
	}
	if err := v.Delete(ctx); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := v.Get(ctx); !errors.Is(err, sandgate.ErrVaultNotFound) {
		t.Fatalf("get after delete: %v, want ErrVaultNotFound", err)
	}

	plain := sdkCreate(t, ctx, c, sandgate.CreateRequest{})
	pv, err := c.Vault(ctx, plain.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pv.Get(ctx); !errors.Is(err, sandgate.ErrVaultProxyNotEnabled) {
		t.Fatalf("vault of a sandbox without the proxy: %v, want ErrVaultProxyNotEnabled", err)
	}
}
