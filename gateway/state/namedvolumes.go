package state

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/runtimes"
)

// Codes of the API of a tenant's named volumes (gateway/codes.go lists them with the rest).
const (
	CodeVolumeExists = "VOLUME::ALREADY_EXISTS"
	CodeVolumeInUse  = "VOLUME::IN_USE"
)

// auditSourceVolume is the audit source of the records of named volumes made and removed.
const auditSourceVolume = "volume"

// NamedVolume is one of a tenant's named volumes as the API shows it: the claim name
// sandboxes mount it by (volumes[].pvc.claimName), never the engine's name.
type NamedVolume struct {
	Name string
}

// volumeKeeper is the runtime's VolumeKeeper, or VOLUME::UNSUPPORTED.
func (m *Manager) volumeKeeper() (runtimes.VolumeKeeper, error) {
	k, ok := m.runtime.(runtimes.VolumeKeeper)
	if !ok {
		return nil, fault.Errorf(fault.KindUnsupported, CodeVolumeUnsupported, "this runtime keeps no named volumes apart from sandboxes; name a volume in a create's volumes[].pvc instead")
	}
	return k, nil
}

// tenantVolume is the engine's name of caller's claim name and the labels that mark it
// the caller's in this deployment.
func (m *Manager) tenantVolume(ctx context.Context, caller principal.Caller, name string) (claim string, labels map[string]string, err error) {
	cluster, err := m.host.ClusterID(ctx)
	if err != nil {
		return "", nil, err
	}
	labels = map[string]string{runtimes.LabelTenant: caller.Tenant}
	if cluster != "" {
		labels[runtimes.LabelCluster] = cluster
	}
	return VolumeClaimName(cluster, caller.Tenant, name), labels, nil
}

// IsClaimName reports whether name may name a tenant's named volume (a claim name: a
// DNS label).
func IsClaimName(name string) bool { return volumeNameRe.MatchString(name) }

// validVolumeName refuses a name that is not a claim name.
func validVolumeName(name string) error {
	if !IsClaimName(name) {
		return volumeErr(CodeVolumeInvalid, "volume name %q: want a DNS label (1-63 lowercase letters, digits and '-', starting and ending with a letter or digit)", name)
	}
	return nil
}

// volumeNotFound is the answer for a claim name the caller has no volume of, whether
// none exists or another tenant's does (which namespacing keeps out of reach anyway).
func volumeNotFound(name string, cause error) error {
	return &fault.Error{Kind: fault.KindNotFound, Code: CodeVolumeNotFound, Message: "volume " + name + " not found", Cause: cause}
}

// CreateNamedVolume makes caller's named volume name, empty and apart from any sandbox,
// its root directory owned by root (root's owner when not nil); sandboxes then mount it
// by name. A name the caller has a volume of already is refused (VOLUME::ALREADY_EXISTS).
func (m *Manager) CreateNamedVolume(ctx context.Context, caller principal.Caller, name string, root *runtimes.VolumeOwner) (NamedVolume, error) {
	if err := validVolumeName(name); err != nil {
		return NamedVolume{}, err
	}
	k, err := m.volumeKeeper()
	if err != nil {
		return NamedVolume{}, err
	}
	claim, labels, err := m.tenantVolume(ctx, caller, name)
	if err != nil {
		return NamedVolume{}, err
	}
	if err := k.CreateVolume(ctx, claim, labels, root); err != nil {
		if errors.Is(err, runtimes.ErrVolumeExists) {
			return NamedVolume{}, &fault.Error{Kind: fault.KindConflict, Code: CodeVolumeExists, Message: "volume " + name + " exists already", Cause: err}
		}
		return NamedVolume{}, &fault.Error{Kind: fault.KindInternal, Code: codeRuntimeError, Message: "the runtime could not create volume " + name, Cause: err}
	}
	m.auditVolume(caller, "volume.created", name)
	return NamedVolume{Name: name}, nil
}

// NamedVolume is caller's named volume name (VOLUME::NOT_FOUND when the caller has none
// of that name).
func (m *Manager) NamedVolume(ctx context.Context, caller principal.Caller, name string) (NamedVolume, error) {
	if err := validVolumeName(name); err != nil {
		return NamedVolume{}, volumeNotFound(name, err)
	}
	k, err := m.volumeKeeper()
	if err != nil {
		return NamedVolume{}, err
	}
	claim, want, err := m.tenantVolume(ctx, caller, name)
	if err != nil {
		return NamedVolume{}, err
	}
	got, err := k.VolumeLabels(ctx, claim)
	if errors.Is(err, runtimes.ErrVolumeNotFound) {
		return NamedVolume{}, volumeNotFound(name, err)
	}
	if err != nil {
		return NamedVolume{}, &fault.Error{Kind: fault.KindInternal, Code: codeRuntimeError, Message: "the runtime could not read volume " + name, Cause: err}
	}
	if !carries(got, want) {
		return NamedVolume{}, volumeNotFound(name, runtimes.ErrVolumeForeign)
	}
	return NamedVolume{Name: name}, nil
}

// NamedVolumes are caller's named volumes, sorted by name: those the API made and those
// sandboxes' creates made.
func (m *Manager) NamedVolumes(ctx context.Context, caller principal.Caller) ([]NamedVolume, error) {
	k, err := m.volumeKeeper()
	if err != nil {
		return nil, err
	}
	prefix, labels, err := m.tenantVolume(ctx, caller, "")
	if err != nil {
		return nil, err
	}
	claims, err := k.ListVolumes(ctx, labels)
	if err != nil {
		return nil, &fault.Error{Kind: fault.KindInternal, Code: codeRuntimeError, Message: "the runtime could not list volumes", Cause: err}
	}
	out := []NamedVolume{}
	for _, claim := range claims {
		if name, ok := strings.CutPrefix(claim, prefix); ok && volumeNameRe.MatchString(name) {
			out = append(out, NamedVolume{Name: name})
		}
	}
	slices.SortFunc(out, func(a, b NamedVolume) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteNamedVolume removes caller's named volume name and what it holds; one a sandbox
// mounts is refused (VOLUME::IN_USE).
func (m *Manager) DeleteNamedVolume(ctx context.Context, caller principal.Caller, name string) error {
	if _, err := m.NamedVolume(ctx, caller, name); err != nil {
		return err
	}
	k, err := m.volumeKeeper()
	if err != nil {
		return err
	}
	claim, _, err := m.tenantVolume(ctx, caller, name)
	if err != nil {
		return err
	}
	switch err := k.RemoveVolume(ctx, claim); {
	case err == nil:
	case errors.Is(err, runtimes.ErrVolumeNotFound):
		return volumeNotFound(name, err)
	case errors.Is(err, runtimes.ErrInUse):
		return &fault.Error{Kind: fault.KindConflict, Code: CodeVolumeInUse, Message: "volume " + name + " is mounted by a sandbox; delete the sandboxes that mount it first", Cause: err}
	default:
		return &fault.Error{Kind: fault.KindInternal, Code: codeRuntimeError, Message: "the runtime could not remove volume " + name, Cause: err}
	}
	m.auditVolume(caller, "volume.deleted", name)
	return nil
}

// auditVolume records in caller's tenant's audit stream that a named volume was made or
// removed, and by which credential.
func (m *Manager) auditVolume(caller principal.Caller, what, name string) {
	js, _ := json.Marshal(map[string]any{"type": what, "volume": name, "by": caller.KeyID})
	m.host.Audit(caller.Tenant, auditSourceVolume, time.Now().UTC(), js)
}

// carries reports whether labels has every label of want.
func carries(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}
