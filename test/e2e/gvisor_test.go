package e2e

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/runtimes/docker"
)

// gvisorRuntime is the name scripts/gvisor.sh registers runsc under with dockerd.
const gvisorRuntime = "runsc"

// requireGVisor skips the test unless dockerd knows the runsc runtime.
func requireGVisor(t *testing.T) {
	t.Helper()
	out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").CombinedOutput()
	if err != nil {
		t.Fatalf("docker info: %v: %s", err, out)
	}
	if !strings.Contains(string(out), `"`+gvisorRuntime+`"`) {
		t.Skipf("dockerd has no %q runtime (its runtimes: %s); build and register it with scripts/gvisor.sh", gvisorRuntime, strings.TrimSpace(string(out)))
	}
}

// gvisorKernel checks that a sandbox's processes talk to gVisor's kernel, not the host's:
// gVisor's dmesg is its own boot log, and uname reports its emulated kernel.
func gvisorKernel(t *testing.T, a *agent) {
	t.Helper()
	dmesg := stdoutOf(a.run("dmesg"))
	if !strings.Contains(dmesg, "gVisor") {
		t.Fatalf("dmesg shows no gVisor boot log:\n%s", tail(dmesg, 2000))
	}
	host, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	if guest := stdoutOf(a.run("uname -r")); guest == strings.TrimSpace(string(host)) {
		t.Fatalf("uname -r in the sandbox is the host's kernel %s", guest)
	}
}

// TestGVisor runs a sandbox under runsc and sees gVisor's kernel from inside it, then
// checks that the agent and the usual denials still work there.
func TestGVisor(t *testing.T) {
	requireGVisor(t)

	t.Run("runtime Spec.Runtime", func(t *testing.T) {
		e := newEnv(t, nil)
		a := startRuntimeSandbox(t, e, docker.Options{}, gvisorRuntime)
		gvisorKernel(t, a)
		for _, tt := range []struct{ name, command string }{
			{"mount a tmpfs", "mkdir -p /mnt/x && mount -t tmpfs none /mnt/x"},
			{"set the clock", "date -s '2001-02-03 04:05:06'"},
			{"open a raw socket", `python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)'`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				if last := lastEvent(a.run(tt.command)); last.Type != "error" {
					t.Fatalf("%q succeeded under gVisor (%+v), want a failure", tt.command, last)
				}
			})
		}
		if got := stdoutOf(a.run("echo hi > /tmp/f && cat /tmp/f")); got != "hi" {
			t.Fatalf("writing a file under gVisor: got %q", got)
		}
	})

	t.Run("egress enforcement is refused, not skipped", func(t *testing.T) {
		e := newEnv(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rt, err := docker.New(ctx, docker.Options{Network: e.Network, AgentBinary: filepath.Join(binDir, "sandbox-agent")})
		if err != nil {
			t.Fatalf("docker runtime: %v", err)
		}
		t.Cleanup(func() { rt.Close() })
		spec := runtimes.Spec{
			ID: "gv-" + randomHex(6), Tenant: "e2e", Image: baseImage, Entrypoint: []string{"tail", "-f", "/dev/null"},
			AgentToken: randomHex(16), EgressToken: randomHex(16), CreatedAt: time.Now(), Runtime: gvisorRuntime,
			Egress: &runtimes.EgressSpec{Policy: []byte(`{"defaultAction":"deny"}`)},
		}
		_, err = rt.Create(ctx, spec)
		t.Cleanup(func() { _ = rt.Delete(context.Background(), spec.ID) })
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("create under runsc with an egress policy: err = %v, want errors.ErrUnsupported", err)
		}
		if left := e.containers(); len(left) != 0 {
			t.Fatalf("a refused create left containers behind: %v", left)
		}
	})

	t.Run("through the gateway with extensions.runtime", func(t *testing.T) {
		// Egress enforcement and gVisor do not combine yet (see the subtest above).
		e := newEnv(t, nil)
		g := e.startGateway("SANDGATE_EGRESS=off")
		id := g.createSandbox(map[string]any{"extensions": map[string]string{"runtime": gvisorRuntime}})
		out, err := exec.Command("docker", "inspect", "-f", "{{.HostConfig.Runtime}}", "sandgate-"+id).CombinedOutput()
		if err != nil {
			t.Fatalf("docker inspect: %v: %s", err, out)
		}
		if got := strings.TrimSpace(string(out)); got != gvisorRuntime {
			t.Fatalf("the gateway started the sandbox under runtime %q: it must pass extensions.runtime to runtimes.Spec.Runtime", got)
		}
		gvisorKernel(t, g.agent(id))
	})

	t.Run("read-only rootfs under runsc", func(t *testing.T) {
		e := newEnv(t, nil)
		a := startRuntimeSandbox(t, e, docker.Options{ReadOnlyRootfs: true}, gvisorRuntime)
		gvisorKernel(t, a)
		if last := lastEvent(a.run("touch /etc/x")); last.Type != "error" {
			t.Fatalf("writing the read-only root under gVisor succeeded")
		}
		if got := stdoutOf(a.run("echo ok > /workspace/f && cat /workspace/f")); got != "ok" {
			t.Fatalf("workspace under gVisor: got %q", got)
		}
	})
}
