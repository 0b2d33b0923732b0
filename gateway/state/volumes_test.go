package state

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/runtimes"
)

// TestResolveHostPath: a host path is judged by where it really leads: symlinks and ".."
// of its existing part resolved, a missing rest joined as written.
func TestResolveHostPath(t *testing.T) {
	root := t.TempDir()
	root, _ = filepath.EvalSymlinks(root)
	allowed, outside := filepath.Join(root, "allowed"), filepath.Join(root, "outside")
	for _, d := range []string{allowed, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(allowed, "link")); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, in, want string }{
		{"plain", allowed, allowed},
		{"symlink out", filepath.Join(allowed, "link"), outside},
		{"below a symlink, missing", filepath.Join(allowed, "link", "new", "dir"), filepath.Join(outside, "new", "dir")},
		{"dot-dot", allowed + "/../outside", outside},
		{"missing under allowed", filepath.Join(allowed, "nope"), filepath.Join(allowed, "nope")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resolveHostPath(tt.in); got != tt.want {
				t.Errorf("resolveHostPath(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestParseVolumesCodes: each bad volume is refused with its stable code.
func TestParseVolumesCodes(t *testing.T) {
	tests := []struct {
		name, body, code string
	}{
		{"ok pvc", `[{"name":"a","mountPath":"/a","pvc":{"claimName":"c"}}]`, ""},
		{"ok host", `[{"name":"a","mountPath":"/a","readOnly":true,"subPath":"x/y","host":{"path":"/srv"}}]`, ""},
		{"null", `null`, ""},
		{"ossfs", `[{"name":"a","mountPath":"/a","ossfs":{}}]`, CodeVolumeUnsupported},
		{"dot-dot subPath", `[{"name":"a","mountPath":"/a","subPath":"x/../..","pvc":{"claimName":"c"}}]`, CodeVolumeInvalid},
		{"root", `[{"name":"a","mountPath":"/","pvc":{"claimName":"c"}}]`, CodeVolumeInvalid},
		{"agent dir", `[{"name":"a","mountPath":"/.sandgate/","pvc":{"claimName":"c"}}]`, CodeVolumeInvalid},
		{"proc", `[{"name":"a","mountPath":"/proc/x","pvc":{"claimName":"c"}}]`, CodeVolumeInvalid},
		{"relative host", `[{"name":"a","mountPath":"/a","host":{"path":"srv"}}]`, CodeVolumeInvalid},
		{"claim with slash", `[{"name":"a","mountPath":"/a","pvc":{"claimName":"a/b"}}]`, CodeVolumeInvalid},
		{"access mode", `[{"name":"a","mountPath":"/a","pvc":{"claimName":"c","accessModes":["Everything"]}}]`, CodeVolumeInvalid},
		{"storage", `[{"name":"a","mountPath":"/a","pvc":{"claimName":"c","storage":"1Gi"}}]`, ""},
		{"bad storage", `[{"name":"a","mountPath":"/a","pvc":{"claimName":"c","storage":"lots"}}]`, CodeVolumeInvalid},
		{"no backend", `[{"name":"a","mountPath":"/a"}]`, CodeVolumeInvalid},
		{"bad name", `[{"name":"A","mountPath":"/a","pvc":{"claimName":"c"}}]`, CodeVolumeInvalid},
		{"same name", `[{"name":"a","mountPath":"/a","pvc":{"claimName":"c"}},{"name":"a","mountPath":"/b","pvc":{"claimName":"d"}}]`, CodeVolumeInvalid},
		{"not an array", `{}`, CodeVolumeInvalid},
		{"same mount cleaned", `[{"name":"a","mountPath":"/a","pvc":{"claimName":"c"}},{"name":"b","mountPath":"/a/./","pvc":{"claimName":"d"}}]`, CodeVolumeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseVolumes(json.RawMessage(tt.body), parseSize)
			got := ""
			if e, ok := fault.AsError(err); ok {
				got = e.Code
			} else if err != nil {
				t.Fatalf("error without a code: %v", err)
			}
			if got != tt.code {
				t.Errorf("code = %q, want %q (err %v)", got, tt.code, err)
			}
		})
	}
}

// TestVolumeClaimNameIsPerTenant: no claim name of one tenant spells another's.
func TestVolumeClaimNameIsPerTenant(t *testing.T) {
	a := VolumeClaimName("c1", "tenant-a", "data")
	if b := VolumeClaimName("c1", "tenant-b", "data"); a == b {
		t.Fatalf("two tenants share %s", a)
	}
	if other := VolumeClaimName("c2", "tenant-a", "data"); a == other {
		t.Fatalf("two deployments share %s", a)
	}
	// Tenant B giving A's engine name (minus the prefix) as its claim gets something else.
	if b := VolumeClaimName("c1", "tenant-b", a[len("sgv-"):]); b == a {
		t.Fatal("a claim name spelled another tenant's volume")
	}
}

// parseSize reads the sizes these tests give ("1Gi"); the core gives its memory parser.
func parseSize(s string) (int64, error) {
	if s == "1Gi" {
		return 1 << 30, nil
	}
	return 0, errors.New("not a size")
}

// TestVolumesForTheRuntime: host paths that do not exist are refused after admission;
// claims get their per-tenant engine names; admission sees each volume's type; the
// runtime's volume refusals become the caller's codes; a failed create's volumes go.
func TestVolumesForTheRuntime(t *testing.T) {
	dir := t.TempDir()
	vols := []runtimes.Volume{{Name: "h", MountPath: "/h", HostPath: dir}, {Name: "c", MountPath: "/c", Claim: "data", StorageBytes: 1 << 30}}
	if err := CheckHostPaths(vols); err != nil {
		t.Errorf("an existing host path is refused: %v", err)
	}
	missing := []runtimes.Volume{{Name: "h", HostPath: filepath.Join(dir, "nope")}}
	if e, ok := fault.AsError(CheckHostPaths(missing)); !ok || e.Code != CodeVolumeHostNotFound {
		t.Errorf("a missing host path: %v, want %s", e, CodeVolumeHostNotFound)
	}

	named := NamespaceVolumes("c1", "alice", vols)
	if named[1].Claim != VolumeClaimName("c1", "alice", "data") || named[0].HostPath != dir || vols[1].Claim != "data" {
		t.Errorf("NamespaceVolumes = %+v (input %+v); want the claim named per tenant, the input kept", named, vols)
	}
	if NamespaceVolumes("c1", "alice", nil) != nil || AdmissionVolumes(nil) != nil {
		t.Error("no volumes should stay none")
	}
	adm := AdmissionVolumes(vols)
	if adm[0].Type != "host" || adm[0].HostPath != dir || adm[1].Type != "pvc" || adm[1].ClaimName != "data" || adm[1].StorageBytes != 1<<30 {
		t.Errorf("AdmissionVolumes = %+v", adm)
	}

	for _, tt := range []struct {
		err  error
		code string
	}{
		{runtimes.ErrVolumeNotFound, CodeVolumeNotFound},
		{runtimes.ErrVolumeUnsupported, CodeVolumeUnsupported},
		{runtimes.ErrVolumeHostChanged, CodeVolumeHostChanged},
		{runtimes.ErrVolumeSubPathSymlink, CodeVolumeInvalid},
		{runtimes.ErrVolumeForeign, CodeVolumeNotFound},
	} {
		if e, ok := fault.AsError(VolumeCreateError(tt.err)); !ok || e.Code != tt.code {
			t.Errorf("VolumeCreateError(%v) = %v, want %s", tt.err, e, tt.code)
		}
	}
	if err := VolumeCreateError(errors.New("other")); err != nil {
		t.Errorf("VolumeCreateError(other) = %v, want nil", err)
	}

	if got, err := ResolveHostPrefixes([]string{dir}); err != nil || len(got) != 1 {
		t.Errorf("ResolveHostPrefixes = %v, %v", got, err)
	}
	if _, err := ResolveHostPrefixes([]string{"relative"}); err == nil {
		t.Error("a relative prefix is accepted")
	}

	s := startManager(t, true)
	s.m.DiscardVolumes(context.Background(), runtimes.Spec{ID: "no-volumes"})
	s.m.DiscardVolumes(context.Background(), runtimes.Spec{ID: "made", Volumes: vols})
	if len(s.runtime.discarded) != 1 || s.runtime.discarded[0] != "made" {
		t.Errorf("discarded %v, want only the create that made volumes", s.runtime.discarded)
	}
}
