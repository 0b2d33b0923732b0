package runtimes

// The runtime's contract beyond Runtime: every optional ability the core asks a runtime
// for, in one place. The core type-asserts these and does without what a runtime lacks
// (or refuses what needs it with a clear error); a runtime states in a test which it
// has (TestAbilities in each runtime package, against Abilities), so that the author of
// another runtime learns here what there is to implement and what the core does
// without it.

import (
	"context"

	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
)

// EgressEnforcer runs an egress enforcer beside each sandbox made with an egress policy
// (Spec.Egress). Without it, or when EnforcesEgress is false, sandboxes run with open
// egress and the core refuses a networkPolicy it could not keep.
type EgressEnforcer interface {
	EnforcesEgress() bool
}

// CredentialProxyRuntime can run the credential vault (EgressSpec.CredentialProxy): a CA
// per sandbox whose key only the enforcer holds, its certificate in the workload's trust
// store. Without it the core refuses credentialProxy.
type CredentialProxyRuntime interface {
	RunsCredentialProxy() bool
}

// EnforcerRestorer runs the enforcer as a part of a sandbox that can die alone (Docker's
// sidecar). Without it a sandbox's enforcer lives and dies with the sandbox.
type EnforcerRestorer interface {
	// MissingEnforcers returns the ids among instances (as List returned them) whose
	// enforcer is not running.
	MissingEnforcers(ctx context.Context, instances []Instance) ([]string, error)
	// RestoreEnforcer starts a new enforcer for a running sandbox with egress and token.
	RestoreEnforcer(ctx context.Context, id, egressToken string, egress EgressSpec) error
}

// EnforcerRestartCounter starts enforcers again itself when they exit (Docker's
// enforcers as host processes), and counts those restarts for the metrics.
type EnforcerRestartCounter interface {
	// EnforcerProcessRestarts is how many enforcers this runtime has started again.
	EnforcerProcessRestarts() uint64
}

// HelperSweeper runs helper containers beside a sandbox (Docker's enforcer and namespace
// holder). SweepHelpers removes the helpers whose sandbox no longer exists, and what
// else such a sandbox left (Docker: its agent directory volume, and agent binary
// volumes of other builds nothing mounts), and returns how many it removed; the
// reconciler calls it every few passes.
type HelperSweeper interface {
	SweepHelpers(ctx context.Context) (int, error)
}

// HelperReleaser can remove a dead sandbox's helpers while its workload is kept for its
// logs until Delete. Without it they go at Delete.
type HelperReleaser interface {
	ReleaseHelpers(ctx context.Context, id string) error
}

// DeathWatcher reports, as the engine sees them, sandboxes whose workload stopped by
// itself (not through Delete), until ctx ends or its source breaks (then it returns the
// error and the caller calls it again). Without it deaths are found by the reconciler's
// and the pool manager's passes.
type DeathWatcher interface {
	WatchDeaths(ctx context.Context, dead func(id string)) error
}

// ImageChecker tells whether an image is present for a tenant without pulling it
// (admission's registry check, a pool's image check). Without it images are found at
// create.
type ImageChecker interface {
	HasImage(ctx context.Context, image, tenant string) (bool, error)
}

// ImagePuller pulls images on the gateway's behalf (a new pool's image). Without it the
// runtime pulls on its own nodes at create.
type ImagePuller interface {
	ImageChecker
	// CheckRegistry refuses an image whose registry the platform does not allow to be
	// contacted (an address of the platform's own, say) before anything is sent to it.
	CheckRegistry(ctx context.Context, image string) error
	Pull(ctx context.Context, image string, auth *ImageAuth, progress func(PullProgress)) error
}

// Snapshotter keeps a sandbox's filesystem as an image and removes such images. Without
// it snapshots and forks answer unsupported.
type Snapshotter interface {
	Snapshot(ctx context.Context, id, ref string, labels map[string]string) error
	RemoveSnapshot(ctx context.Context, ref string) error
}

// UsageReader reads a sandbox's resource use from the engine. Without it the core asks
// the sandbox's agent.
type UsageReader interface {
	Usage(ctx context.Context, id string, withDisk bool) (Usage, error)
}

// VolumeDiscarder removes the named volumes a failed create made, after its sandbox was
// removed. Without it (Kubernetes removes its claims in Create) nothing is to do.
type VolumeDiscarder interface {
	DiscardVolumes(ctx context.Context, id string)
}

// VolumeKeeper keeps named volumes apart from any sandbox, for the API of a tenant's
// volumes: made, read, listed and removed by their engine name (namespaced per tenant by
// the core). Without it that API answers VOLUME::UNSUPPORTED; sandboxes still mount
// named volumes their create makes.
type VolumeKeeper interface {
	// CreateVolume makes named volume claim with labels, its root directory owned by
	// root, or by root's uid and gid when root is not nil; ErrVolumeExists when one of
	// that name exists already.
	CreateVolume(ctx context.Context, claim string, labels map[string]string, root *VolumeOwner) error
	// VolumeLabels are the labels of named volume claim; ErrVolumeNotFound when there is
	// none of that name.
	VolumeLabels(ctx context.Context, claim string) (map[string]string, error)
	// ListVolumes names the named volumes that carry every one of labels.
	ListVolumes(ctx context.Context, labels map[string]string) ([]string, error)
	// RemoveVolume removes named volume claim; ErrInUse while a sandbox mounts it,
	// ErrVolumeNotFound when there is none of that name.
	RemoveVolume(ctx context.Context, claim string) error
}

// VolumeOwner is the owner a new named volume's root directory gets: the uid and gid of
// the user the sandboxes that mount it run as, so that user writes there without root.
type VolumeOwner struct {
	UID, GID int
}

// AgentClientProvider shares the runtime's client of sandbox agents and enforcers (its
// connections and their keep-alives) with the core. Without it the core makes its own.
type AgentClientProvider interface {
	AgentClient() *agentclient.Client
}

// GatewayAddresser names the addresses at which the engine's host answers sandboxes
// (Docker's bridge gateways): egress must never reach them. Without it only the
// gateway host's own addresses and the operator's list are denied.
type GatewayAddresser interface {
	GatewayAddresses(ctx context.Context) ([]string, error)
}

// Abilities lists, by name, the optional abilities above that rt has, in the order
// they are declared.
func Abilities(rt any) []string {
	var has []string
	for _, a := range []struct {
		name string
		ok   bool
	}{
		{"EgressEnforcer", is[EgressEnforcer](rt)},
		{"CredentialProxyRuntime", is[CredentialProxyRuntime](rt)},
		{"EnforcerRestorer", is[EnforcerRestorer](rt)},
		{"HelperSweeper", is[HelperSweeper](rt)},
		{"HelperReleaser", is[HelperReleaser](rt)},
		{"DeathWatcher", is[DeathWatcher](rt)},
		{"ImageChecker", is[ImageChecker](rt)},
		{"ImagePuller", is[ImagePuller](rt)},
		{"Snapshotter", is[Snapshotter](rt)},
		{"UsageReader", is[UsageReader](rt)},
		{"VolumeDiscarder", is[VolumeDiscarder](rt)},
		{"VolumeKeeper", is[VolumeKeeper](rt)},
		{"AgentClientProvider", is[AgentClientProvider](rt)},
		{"GatewayAddresser", is[GatewayAddresser](rt)},
	} {
		if a.ok {
			has = append(has, a.name)
		}
	}
	return has
}

func is[T any](v any) bool {
	_, ok := v.(T)
	return ok
}
