package state

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/internal/listing"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// Snapshot states.
const (
	SnapshotCreating = "Creating"
	SnapshotReady    = "Ready"
	SnapshotFailed   = "Failed"
	SnapshotDeleting = "Deleting"
)

// SnapshotStates are every state a snapshot can be listed in, for the list's filter.
var SnapshotStates = []string{SnapshotCreating, SnapshotReady, SnapshotFailed}

// Codes of snapshots (gateway/codes.go lists them with the rest).
const (
	CodeSnapshotUnsupported = "SNAPSHOT::UNSUPPORTED"
	CodeSnapshotNotFound    = "SNAPSHOT::NOT_FOUND"
	// CodeSnapshotNotReady: a create from a snapshot still being taken (or failed).
	CodeSnapshotNotReady = "SNAPSHOT::NOT_READY"
	// CodeSnapshotInUse: a delete of a snapshot that live sandboxes were created from.
	CodeSnapshotInUse   = "SNAPSHOT::IN_USE"
	CodeSnapshotInvalid = "SNAPSHOT::INVALID_PARAMETER"
	// CodeQuotaSnapshots: the tenant keeps its limit of snapshots.
	CodeQuotaSnapshots = "QUOTA::SNAPSHOTS"
)

// reasonSandboxGone is the reason of a snapshot whose sandbox vanished before the commit.
const reasonSandboxGone = "sandbox_gone"

// snapshotTimeout bounds one commit.
const snapshotTimeout = 10 * time.Minute

// snapshotRepoPrefix starts the local image repository of every snapshot; a create naming
// such an image directly must name one of its own tenant's (see CheckSnapshotImage).
const snapshotRepoPrefix = "sandgate-snapshots/"

// SnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots.
type SnapshotRequest struct {
	Name string `json:"name,omitempty"`
}

// SnapshotQuery filters and pages GET /v1/snapshots.
type SnapshotQuery struct {
	SandboxID string
	States    []string
	// Tenant, when set, admits only that tenant's snapshots (a platform admin's list is
	// every tenant's otherwise); Admits, when set, only the snapshots it accepts.
	Tenant   string
	Admits   func(apiproto.Snapshot) bool
	Page     int
	PageSize int
}

func snapshotView(snap *store.Snapshot) apiproto.Snapshot {
	at := snap.LastTransitionAt
	return apiproto.Snapshot{ID: snap.ID, SandboxID: snap.SandboxID, Name: snap.Name, CreatedAt: snap.CreatedAt,
		Status: apiproto.Status{State: snap.State, Reason: snap.Reason, Message: snap.Message, LastTransitionAt: &at}}
}

func snapshotNotFound(id string) *fault.Error {
	return fault.Errorf(fault.KindNotFound, CodeSnapshotNotFound, "snapshot %s not found", id)
}

func (m *Manager) snapshotter() (runtimes.Snapshotter, error) {
	if sn, ok := m.runtime.(runtimes.Snapshotter); ok {
		return sn, nil
	}
	return nil, fault.Errorf(fault.KindInvalid, CodeSnapshotUnsupported,
		"snapshots are not supported on the %s runtime of this gateway (Docker only)", m.runtime.Name())
}

// snapshotImage is the local image reference of a tenant's snapshot: the repository is
// a digest of deployment and tenant, the tag the snapshot id.
func snapshotImage(cluster, tenant, id string) string {
	return snapshotRepo(cluster, tenant) + ":" + id
}

func snapshotRepo(cluster, tenant string) string {
	sum := sha256.Sum256([]byte(cluster + "\x00" + tenant))
	return snapshotRepoPrefix + hex.EncodeToString(sum[:8])
}

// CheckSnapshotImage refuses a create that names another tenant's snapshot image as its
// image: snapshots are reached by snapshotId, and only the owner's.
func CheckSnapshotImage(cluster, tenant, image string) error {
	name := familiarName(image)
	if !strings.HasPrefix(name, snapshotRepoPrefix) {
		return nil
	}
	if strings.HasPrefix(name, snapshotRepo(cluster, tenant)+":") && !strings.Contains(name, "@") {
		return nil
	}
	return fault.Errorf(fault.KindNotFound, CodeSnapshotNotFound, "image %q: no such snapshot of this tenant; create from a snapshot with snapshotId", image)
}

// familiarName is an image's short name: the engine treats
// "docker.io/sandgate-snapshots/…" and "sandgate-snapshots/…" as one image, so snapshot
// images are compared on it.
func familiarName(image string) string {
	if named, err := reference.ParseNormalizedNamed(image); err == nil {
		return reference.FamiliarString(named)
	}
	return image
}

// SnapshotOfImage is the id of the tenant's snapshot that image is, or "" when it is
// none (CheckSnapshotImage has refused another tenant's).
func SnapshotOfImage(cluster, tenant, image string) string {
	id, ok := strings.CutPrefix(familiarName(image), snapshotRepo(cluster, tenant)+":")
	if !ok || strings.Contains(id, "@") {
		return ""
	}
	return id
}

// CreateSnapshot starts a snapshot of a Running sandbox and answers at once (Creating);
// the commit runs in the background and ends Ready or Failed.
func (m *Manager) CreateSnapshot(ctx context.Context, caller principal.Caller, sandboxID string, req SnapshotRequest) (*apiproto.Snapshot, error) {
	snap, err := m.startSnapshot(ctx, caller, sandboxID, req)
	if err != nil {
		return nil, err
	}
	// The answer is the Creating record: the commit below writes the outcome into snap.
	v := snapshotView(snap)
	m.group.GoAlways(func() { m.commitSnapshot(context.Background(), snap) })
	return &v, nil
}

// startSnapshot checks a snapshot request and writes its Creating record.
func (m *Manager) startSnapshot(ctx context.Context, caller principal.Caller, sandboxID string, req SnapshotRequest) (*store.Snapshot, error) {
	if len(req.Name) > 128 || strings.ContainsRune(req.Name, 0) {
		return nil, fault.Errorf(fault.KindInvalid, CodeSnapshotInvalid, "name: at most 128 characters")
	}
	if _, err := m.snapshotter(); err != nil {
		return nil, err
	}
	sb, err := m.host.Lookup(ctx, caller, sandboxID)
	if err != nil {
		return nil, err
	}
	if sb.State != stateRunning && sb.State != statePaused {
		return nil, fault.Errorf(fault.KindConflict, codeNotRunning, "sandbox %s is %s; only a Running sandbox can be snapshotted", sandboxID, sb.State)
	}
	q, err := m.host.TenantQuotas(ctx, sb.Tenant)
	if err != nil {
		return nil, err
	}
	cluster, err := m.host.ClusterID(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	id := uuid.NewString()
	snap := &store.Snapshot{
		ID: id, Tenant: sb.Tenant, SandboxID: sb.ID, Name: req.Name, State: SnapshotCreating,
		LastTransitionAt: now, CreatedAt: now, Image: snapshotImage(cluster, sb.Tenant, id),
		SourceImage: sb.Image, Entrypoint: sb.Entrypoint, ResourceLimits: sb.ResourceLimits, EgressPolicy: sb.EgressPolicy,
	}
	if err := m.store.CreateSnapshot(ctx, snap, q.MaxSnapshots); err != nil {
		if errors.Is(err, store.ErrQuota) {
			return nil, fault.Errorf(fault.KindQuota, CodeQuotaSnapshots, "snapshots quota: tenant %s keeps its limit of %d snapshots; delete one first", sb.Tenant, q.MaxSnapshots)
		}
		return nil, err
	}
	return snap, nil
}

// commitSnapshot makes the snapshot's image and records the outcome.
func (m *Manager) commitSnapshot(ctx context.Context, snap *store.Snapshot) {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	sn, err := m.snapshotter()
	if err == nil {
		err = sn.Snapshot(ctx, snap.SandboxID, snap.Image, map[string]string{
			runtimes.LabelSnapshot: snap.ID, runtimes.LabelTenant: snap.Tenant,
		})
	}
	now := time.Now().UTC()
	snap.LastTransitionAt = now
	if err != nil {
		m.log.Warn("snapshot failed", "snapshot", snap.ID, "sandbox", snap.SandboxID, "err", err)
		snap.State, snap.Reason, snap.Message = SnapshotFailed, "commit_failed", "the runtime could not commit the sandbox's filesystem"
		if errors.Is(err, runtimes.ErrNotFound) {
			snap.Reason, snap.Message = reasonSandboxGone, "the sandbox was gone before its snapshot was taken"
		}
	} else {
		snap.State = SnapshotReady
	}
	// A snapshot deleted while it was being made stays deleted, and its image goes.
	cur, gerr := m.store.GetSnapshot(ctx, snap.Tenant, snap.ID)
	if errors.Is(gerr, store.ErrNotFound) || (gerr == nil && cur.State == SnapshotDeleting) {
		if err == nil {
			if rerr := sn.RemoveSnapshot(ctx, snap.Image); rerr != nil {
				m.log.Warn("remove the image of a snapshot deleted while it was taken", "snapshot", snap.ID, "image", snap.Image, "err", rerr)
			}
		}
		// Nobody waits on this answer (the delete returned when it marked the record): a
		// store error leaves the record Deleting, logged for the operator.
		if derr := m.store.DeleteSnapshot(ctx, snap.Tenant, snap.ID); derr != nil {
			m.log.Warn("delete a snapshot record deleted while it was taken", "snapshot", snap.ID, "err", derr)
		}
		return
	}
	if err := m.store.PutSnapshot(ctx, snap); err != nil {
		m.log.Warn("record snapshot", "snapshot", snap.ID, "err", err)
	}
}

// lookupSnapshot returns a snapshot of the caller's tenant (any tenant for the admin);
// another tenant's answers 404 like a missing one.
func (m *Manager) lookupSnapshot(ctx context.Context, caller principal.Caller, id string) (*store.Snapshot, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, snapshotNotFound(id)
	}
	if caller.Admin {
		all, err := m.store.ListSnapshots(ctx, "")
		if err != nil {
			return nil, err
		}
		for _, snap := range all {
			if snap.ID == id {
				return snap, nil
			}
		}
		return nil, snapshotNotFound(id)
	}
	snap, err := m.store.GetSnapshot(ctx, caller.Tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, snapshotNotFound(id)
	}
	return snap, err
}

// GetSnapshot returns one snapshot.
func (m *Manager) GetSnapshot(ctx context.Context, caller principal.Caller, id string) (*apiproto.Snapshot, error) {
	snap, err := m.lookupSnapshot(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	v := snapshotView(snap)
	return &v, nil
}

// ListSnapshots returns the caller's snapshots, newest first, filtered and paged.
func (m *Manager) ListSnapshots(ctx context.Context, caller principal.Caller, q SnapshotQuery) (*apiproto.SnapshotPage, error) {
	all, err := m.store.ListSnapshots(ctx, listing.Tenant(caller))
	if err != nil {
		return nil, err
	}
	states := listing.NewStateFilter(q.States)
	items := []apiproto.Snapshot{}
	for _, snap := range all {
		if q.SandboxID != "" && snap.SandboxID != q.SandboxID {
			continue
		}
		if q.Tenant != "" && snap.Tenant != q.Tenant {
			continue
		}
		if !states.Admits(snap.State) {
			continue
		}
		if v := snapshotView(snap); q.Admits == nil || q.Admits(v) {
			items = append(items, v)
		}
	}
	page, pagination := listing.Page(items, func(v apiproto.Snapshot) time.Time { return v.CreatedAt }, q.Page, q.PageSize)
	return &apiproto.SnapshotPage{Items: page, Pagination: pagination}, nil
}

// DeleteSnapshot removes a snapshot and its image. One still being made is marked
// Deleting and goes when its commit ends; one that sandboxes still run from answers 409.
func (m *Manager) DeleteSnapshot(ctx context.Context, caller principal.Caller, id string) error {
	snap, err := m.lookupSnapshot(ctx, caller, id)
	if err != nil {
		return err
	}
	if snap.State == SnapshotCreating || snap.State == SnapshotDeleting {
		snap.State, snap.LastTransitionAt = SnapshotDeleting, time.Now().UTC()
		return m.store.PutSnapshot(ctx, snap)
	}
	if snap.State == SnapshotReady {
		sn, err := m.snapshotter()
		if err != nil {
			return err
		}
		if err := m.removeSnapshotImage(ctx, sn, snap); err != nil {
			return err
		}
	}
	return m.store.DeleteSnapshot(ctx, snap.Tenant, snap.ID)
}

// snapshotRemovalSettle bounds how long a snapshot's delete waits for the runtime to
// let its image go once no sandbox record names it: a container whose delete has just
// answered may still hold the image for a moment on a busy engine.
const snapshotRemovalSettle = 5 * time.Second

// removeSnapshotImage removes snap's image. While the runtime says the image is in use,
// the sandboxes of snap's tenant created from it are named in a 409; when none is left
// (their deletes answered, the engine not yet done), the removal is tried again for up
// to snapshotRemovalSettle.
func (m *Manager) removeSnapshotImage(ctx context.Context, sn runtimes.Snapshotter, snap *store.Snapshot) error {
	deadline := time.Now().Add(snapshotRemovalSettle)
	for {
		err := sn.RemoveSnapshot(ctx, snap.Image)
		if err == nil {
			return nil
		}
		if !errors.Is(err, runtimes.ErrInUse) {
			return &fault.Error{Kind: fault.KindInternal, Code: codeRuntimeError, Message: "the runtime could not remove the snapshot's image", Cause: err}
		}
		users, lerr := m.sandboxesFromSnapshot(ctx, snap)
		if lerr != nil || len(users) > 0 || time.Now().After(deadline) {
			msg := fmt.Sprintf("snapshot %s: sandboxes created from it still exist; delete them first", snap.ID)
			if len(users) > 0 {
				msg = fmt.Sprintf("snapshot %s: sandboxes created from it still exist (%s); delete them first", snap.ID, strings.Join(users, ", "))
			}
			return fault.Errorf(fault.KindConflict, CodeSnapshotInUse, "%s", msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// maxNamedSnapshotUsers bounds how many sandboxes a snapshot's 409 names.
const maxNamedSnapshotUsers = 5

// sandboxesFromSnapshot names (up to maxNamedSnapshotUsers, then "…") the sandboxes of
// snap's tenant whose records say they were created from it.
func (m *Manager) sandboxesFromSnapshot(ctx context.Context, snap *store.Snapshot) ([]string, error) {
	all, err := m.store.ListSandboxes(ctx, snap.Tenant)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, sb := range all {
		if sb.SnapshotID != snap.ID {
			continue
		}
		if len(ids) == maxNamedSnapshotUsers {
			return append(ids, "…"), nil
		}
		ids = append(ids, sb.ID)
	}
	return ids, nil
}

// ReadySnapshot is the snapshot a create names by snapshotId: the caller's own, and
// Ready. withImage says the create names an image too, which it may not.
func (m *Manager) ReadySnapshot(ctx context.Context, caller principal.Caller, id string, withImage bool) (*store.Snapshot, error) {
	if _, err := m.snapshotter(); err != nil {
		return nil, err
	}
	if withImage {
		return nil, fault.Errorf(fault.KindInvalid, fault.CodeInvalidParameter, "give one of image and snapshotId, not both")
	}
	snap, err := m.store.GetSnapshot(ctx, caller.Tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, snapshotNotFound(id)
	}
	if err != nil {
		return nil, err
	}
	if snap.State != SnapshotReady {
		return nil, fault.Errorf(fault.KindConflict, CodeSnapshotNotReady, "snapshot %s is %s; a sandbox can be created only from a Ready snapshot", snap.ID, snap.State)
	}
	return snap, nil
}
