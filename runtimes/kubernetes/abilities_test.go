package kubernetes

import (
	"slices"
	"testing"

	"github.com/sandgate/sandgate/runtimes"
)

// TestAbilities states which of the optional abilities (runtimes/capabilities.go) this
// runtime has; the core does without the others.
func TestAbilities(t *testing.T) {
	want := []string{
		"EgressEnforcer", "CredentialProxyRuntime", "DeathWatcher",
		// Not yet: the enforcer is a native sidecar the kubelet restarts (no EnforcerRestorer,
		// HelperSweeper, HelperReleaser); images are pulled by the nodes (no ImageChecker,
		// ImagePuller); no snapshots (Snapshotter); usage comes from the agent (UsageReader);
		// a failed create removes its claims itself (VolumeDiscarder); the core makes its own agent
		// client (AgentClientProvider); the cluster's nodes are denied by the operator's list
		// (GatewayAddresser).
	}
	if got := runtimes.Abilities((*Runtime)(nil)); !slices.Equal(got, want) {
		t.Errorf("abilities %q, want %q", got, want)
	}
}
