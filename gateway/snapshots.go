package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate/apiproto"
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

// reasonSandboxGone is the reason of a snapshot whose sandbox vanished before the commit.
const reasonSandboxGone = "sandbox_gone"

// snapshotTimeout bounds one commit.
const snapshotTimeout = 10 * time.Minute

// snapshotRepoPrefix starts the local image repository of every snapshot; a create naming
// such an image directly must name one of its own tenant's (see checkSnapshotImage).
const snapshotRepoPrefix = "sandgate-snapshots/"

// SnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots.
type SnapshotRequest struct {
	Name string `json:"name,omitempty"`
}

// SnapshotView is the API form of a snapshot and SnapshotList the body of GET
// /v1/snapshots, declared once for the gateway and the Go SDK in apiproto.
type (
	SnapshotView = apiproto.Snapshot
	SnapshotList = apiproto.SnapshotPage
)

// SnapshotQuery filters and pages GET /v1/snapshots.
type SnapshotQuery struct {
	SandboxID string
	States    []string
	Page      int
	PageSize  int
}

func snapshotView(snap *store.Snapshot) SnapshotView {
	at := snap.LastTransitionAt
	return SnapshotView{ID: snap.ID, SandboxID: snap.SandboxID, Name: snap.Name, CreatedAt: snap.CreatedAt,
		Status: Status{State: snap.State, Reason: snap.Reason, Message: snap.Message, LastTransitionAt: &at}}
}

func snapshotNotFound(id string) *Error {
	return Errorf(KindNotFound, CodeSnapshotNotFound, "snapshot %s not found", id)
}

func (s *Service) snapshotter() (runtimes.Snapshotter, error) {
	if sn, ok := s.runtime.(runtimes.Snapshotter); ok {
		return sn, nil
	}
	return nil, Errorf(KindInvalid, CodeSnapshotUnsupported,
		"snapshots are not supported on the %s runtime of this gateway (Docker only)", s.runtime.Name())
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

// checkSnapshotImage refuses a create that names another tenant's snapshot image as its
// image: snapshots are reached by snapshotId, and only the owner's.
func checkSnapshotImage(cluster, tenant, image string) error {
	name := familiarName(image)
	if !strings.HasPrefix(name, snapshotRepoPrefix) {
		return nil
	}
	if strings.HasPrefix(name, snapshotRepo(cluster, tenant)+":") && !strings.Contains(name, "@") {
		return nil
	}
	return Errorf(KindNotFound, CodeSnapshotNotFound, "image %q: no such snapshot of this tenant; create from a snapshot with snapshotId", image)
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

// snapshotOfImage is the id of the tenant's snapshot that image is, or "" when it is
// none (checkSnapshotImage has refused another tenant's).
func snapshotOfImage(cluster, tenant, image string) string {
	id, ok := strings.CutPrefix(familiarName(image), snapshotRepo(cluster, tenant)+":")
	if !ok || strings.Contains(id, "@") {
		return ""
	}
	return id
}

// CreateSnapshot starts a snapshot of a Running sandbox and answers at once (Creating);
// the commit runs in the background and ends Ready or Failed.
func (s *Service) CreateSnapshot(ctx context.Context, caller Caller, sandboxID string, req SnapshotRequest) (*SnapshotView, error) {
	snap, err := s.startSnapshot(ctx, caller, sandboxID, req)
	if err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.commitSnapshot(context.Background(), snap)
	}()
	v := snapshotView(snap)
	return &v, nil
}

// startSnapshot checks a snapshot request and writes its Creating record.
func (s *Service) startSnapshot(ctx context.Context, caller Caller, sandboxID string, req SnapshotRequest) (*store.Snapshot, error) {
	if len(req.Name) > 128 || strings.ContainsRune(req.Name, 0) {
		return nil, Errorf(KindInvalid, CodeSnapshotInvalid, "name: at most 128 characters")
	}
	if _, err := s.snapshotter(); err != nil {
		return nil, err
	}
	sb, err := s.Lookup(ctx, caller, sandboxID)
	if err != nil {
		return nil, err
	}
	if sb.State != StateRunning && sb.State != StatePaused {
		return nil, Errorf(KindConflict, CodeNotRunning, "sandbox %s is %s; only a Running sandbox can be snapshotted", sandboxID, sb.State)
	}
	q, err := s.tenantQuotas(ctx, sb.Tenant)
	if err != nil {
		return nil, err
	}
	cluster, err := s.clusterID(ctx)
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
	if err := s.store.CreateSnapshot(ctx, snap, q.MaxSnapshots); err != nil {
		if errors.Is(err, store.ErrQuota) {
			return nil, Errorf(KindQuota, CodeQuotaSnapshots, "snapshots quota: tenant %s keeps its limit of %d snapshots; delete one first", sb.Tenant, q.MaxSnapshots)
		}
		return nil, err
	}
	return snap, nil
}

// commitSnapshot makes the snapshot's image and records the outcome.
func (s *Service) commitSnapshot(ctx context.Context, snap *store.Snapshot) {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	sn, err := s.snapshotter()
	if err == nil {
		err = sn.Snapshot(ctx, snap.SandboxID, snap.Image, map[string]string{
			runtimes.LabelSnapshot: snap.ID, runtimes.LabelTenant: snap.Tenant,
		})
	}
	now := time.Now().UTC()
	snap.LastTransitionAt = now
	if err != nil {
		s.log.Warn("snapshot failed", "snapshot", snap.ID, "sandbox", snap.SandboxID, "err", err)
		snap.State, snap.Reason, snap.Message = SnapshotFailed, "commit_failed", "the runtime could not commit the sandbox's filesystem"
		if errors.Is(err, runtimes.ErrNotFound) {
			snap.Reason, snap.Message = reasonSandboxGone, "the sandbox was gone before its snapshot was taken"
		}
	} else {
		snap.State = SnapshotReady
	}
	// A snapshot deleted while it was being made stays deleted, and its image goes.
	cur, gerr := s.store.GetSnapshot(ctx, snap.Tenant, snap.ID)
	if errors.Is(gerr, store.ErrNotFound) || (gerr == nil && cur.State == SnapshotDeleting) {
		if err == nil {
			if rerr := sn.RemoveSnapshot(ctx, snap.Image); rerr != nil {
				s.log.Warn("remove the image of a snapshot deleted while it was taken", "snapshot", snap.ID, "image", snap.Image, "err", rerr)
			}
		}
		// Nobody waits on this answer (the delete returned when it marked the record): a
		// store error leaves the record Deleting, logged for the operator.
		if derr := s.store.DeleteSnapshot(ctx, snap.Tenant, snap.ID); derr != nil {
			s.log.Warn("delete a snapshot record deleted while it was taken", "snapshot", snap.ID, "err", derr)
		}
		return
	}
	if err := s.store.PutSnapshot(ctx, snap); err != nil {
		s.log.Warn("record snapshot", "snapshot", snap.ID, "err", err)
	}
}

// lookupSnapshot returns a snapshot of the caller's tenant (any tenant for the admin);
// another tenant's answers 404 like a missing one.
func (s *Service) lookupSnapshot(ctx context.Context, caller Caller, id string) (*store.Snapshot, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, snapshotNotFound(id)
	}
	if caller.Admin {
		all, err := s.store.ListSnapshots(ctx, "")
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
	snap, err := s.store.GetSnapshot(ctx, caller.Tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, snapshotNotFound(id)
	}
	return snap, err
}

// GetSnapshot returns one snapshot.
func (s *Service) GetSnapshot(ctx context.Context, caller Caller, id string) (*SnapshotView, error) {
	snap, err := s.lookupSnapshot(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	v := snapshotView(snap)
	return &v, nil
}

// ListSnapshots returns the caller's snapshots, newest first, filtered and paged.
func (s *Service) ListSnapshots(ctx context.Context, caller Caller, q SnapshotQuery) (*SnapshotList, error) {
	all, err := s.store.ListSnapshots(ctx, listTenant(caller))
	if err != nil {
		return nil, err
	}
	states := newStateFilter(q.States)
	items := []SnapshotView{}
	for _, snap := range all {
		if q.SandboxID != "" && snap.SandboxID != q.SandboxID {
			continue
		}
		if !states.admits(snap.State) {
			continue
		}
		items = append(items, snapshotView(snap))
	}
	page, pagination := pageOf(items, func(v SnapshotView) time.Time { return v.CreatedAt }, q.Page, q.PageSize)
	return &SnapshotList{Items: page, Pagination: pagination}, nil
}

// DeleteSnapshot removes a snapshot and its image. One still being made is marked
// Deleting and goes when its commit ends; one that sandboxes still run from answers 409.
func (s *Service) DeleteSnapshot(ctx context.Context, caller Caller, id string) error {
	snap, err := s.lookupSnapshot(ctx, caller, id)
	if err != nil {
		return err
	}
	if snap.State == SnapshotCreating || snap.State == SnapshotDeleting {
		snap.State, snap.LastTransitionAt = SnapshotDeleting, time.Now().UTC()
		return s.store.PutSnapshot(ctx, snap)
	}
	if snap.State == SnapshotReady {
		sn, err := s.snapshotter()
		if err != nil {
			return err
		}
		if err := sn.RemoveSnapshot(ctx, snap.Image); err != nil {
			if errors.Is(err, runtimes.ErrInUse) {
				return Errorf(KindConflict, CodeSnapshotInUse, "snapshot %s: sandboxes created from it still exist; delete them first", id)
			}
			return &Error{Kind: KindInternal, Code: CodeRuntimeError, Message: "the runtime could not remove the snapshot's image", Cause: err}
		}
	}
	return s.store.DeleteSnapshot(ctx, snap.Tenant, snap.ID)
}

// resolveSnapshot turns a create's snapshotId into the create of its image: the image,
// and the source's entrypoint, resource limits and egress policy where the request gives
// none. The snapshot must be the caller's and Ready.
func (s *Service) resolveSnapshot(ctx context.Context, caller Caller, req CreateRequest) (CreateRequest, error) {
	if req.SnapshotID == "" {
		return req, nil
	}
	if _, err := s.snapshotter(); err != nil {
		return req, err
	}
	if req.Image != nil && req.Image.URI != "" {
		return req, invalid("give one of image and snapshotId, not both")
	}
	snap, err := s.store.GetSnapshot(ctx, caller.Tenant, req.SnapshotID)
	if errors.Is(err, store.ErrNotFound) {
		return req, snapshotNotFound(req.SnapshotID)
	}
	if err != nil {
		return req, err
	}
	if snap.State != SnapshotReady {
		return req, Errorf(KindConflict, CodeSnapshotNotReady, "snapshot %s is %s; a sandbox can be created only from a Ready snapshot", snap.ID, snap.State)
	}
	req.Image = &ImageSpec{URI: snap.Image}
	if len(req.Entrypoint) == 0 {
		req.Entrypoint = snap.Entrypoint
	}
	if len(req.ResourceLimits) == 0 {
		req.ResourceLimits = snap.ResourceLimits
	}
	if len(req.NetworkPolicy) == 0 && len(snap.EgressPolicy) > 0 {
		req.NetworkPolicy = snap.EgressPolicy
	}
	req.SnapshotID = ""
	return req, nil
}

// resolvePoolSnapshot makes a pool template's snapshotId the template of its image (the
// caller's own Ready snapshot), and refuses a template naming another tenant's snapshot
// image directly.
func (s *Service) resolvePoolSnapshot(ctx context.Context, caller Caller, req *PoolRequest) error {
	if req.Template == nil {
		return nil
	}
	if req.Template.SnapshotID != "" {
		tmpl, err := s.resolveSnapshot(ctx, caller, *req.Template)
		if err != nil {
			return err
		}
		req.Template = &tmpl
	}
	if req.Template.Image == nil {
		return nil
	}
	cluster, err := s.clusterID(ctx)
	if err != nil {
		return err
	}
	return checkSnapshotImage(cluster, caller.Tenant, strings.TrimSpace(req.Template.Image.URI))
}
