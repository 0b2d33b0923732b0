package docker

import (
	"slices"
	"testing"

	"github.com/sandgate/sandgate/runtimes"
)

// TestAbilities states which of the optional abilities (runtimes/capabilities.go) this
// runtime has; the core does without the others.
func TestAbilities(t *testing.T) {
	want := []string{
		"EgressEnforcer", "CredentialProxyRuntime", "EnforcerRestorer", "HelperSweeper", "HelperReleaser",
		"DeathWatcher", "ImageChecker", "ImagePuller", "Snapshotter", "UsageReader", "VolumeDiscarder",
		"VolumeKeeper", "AgentClientProvider", "GatewayAddresser",
	}
	if got := runtimes.Abilities((*Runtime)(nil)); !slices.Equal(got, want) {
		t.Errorf("abilities %q, want %q", got, want)
	}
}
