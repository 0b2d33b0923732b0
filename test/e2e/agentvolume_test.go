package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentBinaryReadOnly: every sandbox runs the agent from one volume shared by all
// sandboxes (runtimes/docker/agentvolume.go), so root in one sandbox must not be able to
// change it: not by writing, removing or renaming it, nor by remounting its directory.
// The binary stays the one the gateway was given, for this sandbox and the next.
func TestAgentBinaryReadOnly(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	bin, err := os.ReadFile(filepath.Join(binDir, "sandbox-agent"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bin)
	want := hex.EncodeToString(sum[:])
	id := g.createSandbox(map[string]any{})
	a := g.agent(id)
	for _, attack := range []string{
		"echo x >> /.sandgate/bin/sandbox-agent",
		"cp /bin/true /.sandgate/bin/sandbox-agent",
		"rm -f /.sandgate/bin/sandbox-agent && test ! -e /.sandgate/bin/sandbox-agent",
		"mv /.sandgate/bin/sandbox-agent /.sandgate/bin/moved",
		"touch /.sandgate/bin/planted",
		"mount -o remount,rw /.sandgate/bin",
		"umount -l /.sandgate/bin && test ! -e /.sandgate/bin/sandbox-agent",
	} {
		if evs := a.run(attack + " 2>/dev/null"); lastEvent(evs).Type == "execution_complete" {
			t.Errorf("%q succeeded in the sandbox", attack)
		}
	}
	for _, sb := range []string{id, g.createSandbox(map[string]any{})} {
		got := strings.Fields(stdoutOf(g.agent(sb).run("sha256sum /.sandgate/bin/sandbox-agent")))
		if len(got) == 0 || got[0] != want {
			t.Fatalf("sandbox %s runs an agent with sha256 %v, want %s", sb, got, want)
		}
	}
}
