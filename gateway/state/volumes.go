package state

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
)

// Codes of volumes (gateway/codes.go lists them with the rest).
const (
	CodeVolumeInvalid      = "VOLUME::INVALID_PARAMETER"
	CodeVolumeUnsupported  = "VOLUME::UNSUPPORTED"
	CodeVolumeHostNotFound = "VOLUME::HOST_PATH_NOT_FOUND"
	// CodeVolumeHostChanged: a host volume's path led elsewhere when it was mounted than
	// when it was judged (a symlink appeared on its way); nothing was mounted.
	CodeVolumeHostChanged = "VOLUME::HOST_PATH_CHANGED"
	CodeVolumeNotFound    = "VOLUME::NOT_FOUND"
)

// MaxVolumes bounds the volumes of one sandbox whatever the tenant's quota.
const MaxVolumes = 32

// VolumeRequest is one entry of a create's volumes (OpenSandbox's Volume): exactly one
// backend of host, pvc and ossfs.
type VolumeRequest struct {
	Name      string          `json:"name"`
	MountPath string          `json:"mountPath"`
	ReadOnly  bool            `json:"readOnly,omitempty"`
	SubPath   string          `json:"subPath,omitempty"`
	Host      *HostVolume     `json:"host,omitempty"`
	PVC       *PVCVolume      `json:"pvc,omitempty"`
	OSSFS     json.RawMessage `json:"ossfs,omitempty"`
}

// HostVolume is a bind mount of a directory of the engine's host.
type HostVolume struct {
	Path string `json:"path"`
}

// PVCVolume is a named volume: a Docker named volume or a PersistentVolumeClaim, both
// namespaced per tenant underneath.
type PVCVolume struct {
	ClaimName string `json:"claimName"`
	// CreateIfNotExists defaults to true.
	CreateIfNotExists          *bool    `json:"createIfNotExists,omitempty"`
	DeleteOnSandboxTermination bool     `json:"deleteOnSandboxTermination,omitempty"`
	StorageClass               string   `json:"storageClass,omitempty"`
	Storage                    string   `json:"storage,omitempty"`
	AccessModes                []string `json:"accessModes,omitempty"`
}

var volumeNameRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// reservedMountRoots are directories no volume may cover or sit inside: the agent's own
// directory (a volume there would replace the agent) and the kernel's file systems.
var reservedMountRoots = []string{"/.sandgate", "/proc", "/sys", "/dev"}

var knownAccessModes = map[string]bool{"ReadWriteOnce": true, "ReadOnlyMany": true, "ReadWriteMany": true, "ReadWriteOncePod": true}

func volumeErr(code, format string, args ...any) *fault.Error {
	return fault.Errorf(fault.KindInvalid, code, format, args...)
}

// ParseVolumes validates a create's volumes into runtime volumes. Host paths are
// resolved (symlinks, ..) to where they really lead, which is what admission then
// checks against the allowed prefixes; claim names are still the tenant's own
// (NamespaceVolumes makes them the engine's).
func ParseVolumes(raw json.RawMessage, parseSize func(string) (int64, error)) ([]runtimes.Volume, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var reqs []VolumeRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&reqs); err != nil {
		return nil, volumeErr(CodeVolumeInvalid, "volumes: want an array of {name, mountPath, readOnly?, subPath?, host|pvc}: %v", err)
	}
	if len(reqs) > MaxVolumes {
		return nil, volumeErr(CodeVolumeInvalid, "volumes: %d given; at most %d are allowed", len(reqs), MaxVolumes)
	}
	names, mounts := map[string]bool{}, map[string]bool{}
	out := make([]runtimes.Volume, 0, len(reqs))
	for i, r := range reqs {
		v, err := parseVolume(r, parseSize)
		if err != nil {
			return nil, prefixVolumeErr(fmt.Sprintf("volumes[%d]", i), err)
		}
		if names[v.Name] {
			return nil, volumeErr(CodeVolumeInvalid, "volumes[%d].name %q: used twice", i, v.Name)
		}
		if mounts[v.MountPath] {
			return nil, volumeErr(CodeVolumeInvalid, "volumes[%d].mountPath %q: two volumes mount there", i, v.MountPath)
		}
		names[v.Name], mounts[v.MountPath] = true, true
		out = append(out, v)
	}
	return out, nil
}

func prefixVolumeErr(where string, err error) error {
	var e *fault.Error
	if errors.As(err, &e) {
		return &fault.Error{Kind: e.Kind, Code: e.Code, Message: where + "." + e.Message, Cause: e.Cause}
	}
	return err
}

func parseVolume(r VolumeRequest, parseSize func(string) (int64, error)) (runtimes.Volume, error) {
	v := runtimes.Volume{Name: r.Name, ReadOnly: r.ReadOnly}
	if !volumeNameRe.MatchString(r.Name) {
		return v, volumeErr(CodeVolumeInvalid, "name %q: want a DNS label (1-63 lowercase letters, digits and '-', starting and ending with a letter or digit)", r.Name)
	}
	mp, err := validMountPath(r.MountPath)
	if err != nil {
		return v, err
	}
	v.MountPath = mp
	sub, err := validSubPath(r.SubPath)
	if err != nil {
		return v, err
	}
	backends := 0
	for _, set := range []bool{r.Host != nil, r.PVC != nil, len(r.OSSFS) > 0 && string(r.OSSFS) != "null"} {
		if set {
			backends++
		}
	}
	if backends != 1 {
		return v, volumeErr(CodeVolumeInvalid, "%s: give exactly one of host, pvc and ossfs", r.Name)
	}
	switch {
	case len(r.OSSFS) > 0 && string(r.OSSFS) != "null":
		return v, volumeErr(CodeVolumeUnsupported, "%s.ossfs: OSS volumes are not supported by this gateway; use host or pvc", r.Name)
	case r.Host != nil:
		p := r.Host.Path
		if !path.IsAbs(p) || strings.ContainsRune(p, 0) {
			return v, volumeErr(CodeVolumeInvalid, "%s.host.path %q: want an absolute path", r.Name, p)
		}
		v.HostPath = resolveHostPath(filepath.Join(p, sub))
	case r.PVC != nil:
		c := r.PVC
		if !volumeNameRe.MatchString(c.ClaimName) {
			return v, volumeErr(CodeVolumeInvalid, "%s.pvc.claimName %q: want a DNS label (1-63 lowercase letters, digits and '-')", r.Name, c.ClaimName)
		}
		v.Claim, v.SubPath = c.ClaimName, sub
		v.CreateIfNotExists = c.CreateIfNotExists == nil || *c.CreateIfNotExists
		v.DeleteOnTermination = c.DeleteOnSandboxTermination
		v.StorageClass = c.StorageClass
		if c.Storage != "" {
			n, err := parseSize(c.Storage)
			if err != nil || n <= 0 {
				return v, volumeErr(CodeVolumeInvalid, "%s.pvc.storage %q: want a size such as \"1Gi\"", r.Name, c.Storage)
			}
			v.StorageBytes = n
		}
		for _, m := range c.AccessModes {
			if !knownAccessModes[m] {
				return v, volumeErr(CodeVolumeInvalid, "%s.pvc.accessModes: unknown mode %q (known: ReadWriteOnce, ReadOnlyMany, ReadWriteMany, ReadWriteOncePod)", r.Name, m)
			}
		}
		v.AccessModes = c.AccessModes
	}
	return v, nil
}

// validMountPath refuses relative paths, "/" and the reserved roots; it returns the
// path cleaned.
func validMountPath(p string) (string, error) {
	if !path.IsAbs(p) || strings.ContainsAny(p, "\x00:") {
		return "", volumeErr(CodeVolumeInvalid, "mountPath %q: want an absolute path inside the sandbox", p)
	}
	clean := path.Clean(p)
	if clean == "/" {
		return "", volumeErr(CodeVolumeInvalid, "mountPath %q: a volume cannot replace the sandbox's root", p)
	}
	for _, root := range reservedMountRoots {
		if clean == root || strings.HasPrefix(clean, root+"/") {
			return "", volumeErr(CodeVolumeInvalid, "mountPath %q: %s is reserved (the agent's directory and the kernel's file systems)", p, root)
		}
	}
	return clean, nil
}

// validSubPath accepts a relative path without ".." components; it returns it cleaned.
func validSubPath(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if path.IsAbs(p) || strings.ContainsRune(p, 0) {
		return "", volumeErr(CodeVolumeInvalid, "subPath %q: want a relative path", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", volumeErr(CodeVolumeInvalid, "subPath %q: \"..\" is not allowed", p)
		}
	}
	clean := path.Clean(p)
	if clean == "." {
		return "", nil
	}
	return clean, nil
}

// resolveHostPath is where p really leads: every symlink and ".." of its longest
// existing ancestor resolved, the rest (which does not exist yet) joined unchanged.
// Admission checks this path, so a symlink under an allowed prefix that points outside
// it is judged by its target.
func resolveHostPath(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for cur := p; ; cur = filepath.Dir(cur) {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		if cur == "/" {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
	}
}

// ResolveHostPrefixes resolves the operator's host volume prefixes (SANDGATE_VOLUME_HOST_PREFIXES)
// the way request paths are resolved, so that both sides of the comparison name real
// directories; a relative prefix is an error.
func ResolveHostPrefixes(prefixes []string) ([]string, error) {
	out := make([]string, 0, len(prefixes))
	for _, p := range prefixes {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("volume host prefix %q: want an absolute path", p)
		}
		out = append(out, resolveHostPath(p))
	}
	return out, nil
}

// CheckHostPaths refuses host volumes whose (admitted) source does not exist. It runs
// after admission, so that a path outside the allowed prefixes is refused as such and
// the answer never tells whether it exists.
func CheckHostPaths(vols []runtimes.Volume) error {
	for _, v := range vols {
		if v.HostPath == "" {
			continue
		}
		if _, err := os.Stat(v.HostPath); errors.Is(err, fs.ErrNotExist) {
			return volumeErr(CodeVolumeHostNotFound, "volumes: %s.host.path does not exist on the host", v.Name)
		}
	}
	return nil
}

// NamespaceVolumes gives each claim its engine name, private to the tenant of this
// deployment (cluster): another tenant naming the same claimName gets another volume,
// and so does a tenant of the same name in another deployment on the same engine.
func NamespaceVolumes(cluster, tenant string, vols []runtimes.Volume) []runtimes.Volume {
	if len(vols) == 0 {
		return nil
	}
	out := make([]runtimes.Volume, len(vols))
	copy(out, vols)
	for i := range out {
		if out[i].Claim != "" {
			out[i].Claim = VolumeClaimName(cluster, tenant, out[i].Claim)
		}
	}
	return out
}

// VolumeClaimName is the engine's name of a tenant's claim: a fixed-length digest of the
// deployment and tenant ahead of the claim name, so no claim name of one tenant can
// spell another's.
func VolumeClaimName(cluster, tenant, claim string) string {
	sum := sha256.Sum256([]byte(cluster + "\x00" + tenant))
	return "sgv-" + hex.EncodeToString(sum[:8]) + "-" + claim
}

// AdmissionVolumes is the admission policy's view of the volumes.
func AdmissionVolumes(vols []runtimes.Volume) []policy.Volume {
	if len(vols) == 0 {
		return nil
	}
	out := make([]policy.Volume, 0, len(vols))
	for _, v := range vols {
		pv := policy.Volume{Name: v.Name, ReadOnly: v.ReadOnly, MountPath: v.MountPath}
		if v.HostPath != "" {
			pv.Type, pv.HostPath = "host", v.HostPath
		} else {
			pv.Type, pv.ClaimName, pv.StorageBytes = "pvc", v.Claim, v.StorageBytes
		}
		out = append(out, pv)
	}
	return out
}

// VolumeCreateError maps a runtime's volume refusal to the caller's error, nil when err
// is not one.
func VolumeCreateError(err error) error {
	switch {
	case errors.Is(err, runtimes.ErrVolumeNotFound):
		return &fault.Error{Kind: fault.KindNotFound, Code: CodeVolumeNotFound, Message: "a volume's claim does not exist and createIfNotExists is false", Cause: err}
	case errors.Is(err, runtimes.ErrVolumeUnsupported):
		return &fault.Error{Kind: fault.KindInvalid, Code: CodeVolumeUnsupported, Message: err.Error(), Cause: err}
	case errors.Is(err, runtimes.ErrVolumeHostChanged):
		return &fault.Error{Kind: fault.KindConflict, Code: CodeVolumeHostChanged,
			Message: "a host volume's path changed while the sandbox was being made (a symlink appeared on its way); nothing was mounted", Cause: err}
	case errors.Is(err, runtimes.ErrVolumeSubPathSymlink):
		return &fault.Error{Kind: fault.KindInvalid, Code: CodeVolumeInvalid,
			Message: "a volume's subPath leads through a symlink inside the volume; nothing was mounted", Cause: err}
	case errors.Is(err, runtimes.ErrVolumeForeign):
		// Never reached through namespaced names; answered like a missing one so that
		// nothing about another tenant leaks.
		return &fault.Error{Kind: fault.KindNotFound, Code: CodeVolumeNotFound, Message: "a volume's claim does not exist", Cause: err}
	}
	return nil
}

// DiscardVolumes removes the volumes a failed create made (after its sandbox was removed),
// so that a refused create leaves nothing behind; runtimes without named volumes of their
// own (Kubernetes removes its claims in Create) skip it.
func (m *Manager) DiscardVolumes(ctx context.Context, spec runtimes.Spec) {
	if len(spec.Volumes) == 0 {
		return
	}
	if d, ok := m.runtime.(runtimes.VolumeDiscarder); ok {
		d.DiscardVolumes(ctx, spec.ID)
	}
}
