package docker

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
	"github.com/sandgate/sandgate/test/testenv"
)

// spoofScript runs in a container the test starts in B's network namespace with
// NET_ADMIN and NET_RAW (what a hole in the enforcer would give a workload). It sends a
// control datagram from B's own address to the sink, then claims A's IP with B's MAC
// and, after that, A's IP and MAC, each time announcing it by gratuitous ARP and sending
// datagrams from A's address to the sink.
const spoofScript = `
import os, socket, struct, subprocess, time
a_ip, a_mac, b_ip, b_mac, sink = (os.environ[k] for k in ("A_IP", "A_MAC", "B_IP", "B_MAC", "SINK"))
dev = "eth0"
raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
raw.bind((dev, 0))
aip = socket.inet_aton(a_ip)

def garp(mac):
    m = bytes.fromhex(mac.replace(":", ""))
    return b"\xff" * 6 + m + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 2) + m + aip + b"\xff" * 6 + aip

def datagram(src, msg):
    if not sink:
        return
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind((src, 0))
        s.sendto(msg.encode(), (sink, 9999))
    except OSError as e:
        print("send", msg, e, flush=True)
    finally:
        s.close()

for _ in range(5):
    datagram(b_ip, "control")
    time.sleep(0.1)
subprocess.run(["ip", "addr", "add", a_ip + "/32", "dev", dev], check=True)
print("claimed", a_ip, "with", b_mac, flush=True)
end = time.time() + 4
while time.time() < end:
    raw.send(garp(b_mac))
    datagram(a_ip, "spoof")
    time.sleep(0.1)
subprocess.run(["ip", "link", "set", "dev", dev, "address", a_mac], check=True)
print("claimed", a_ip, "with", a_mac, flush=True)
end = time.time() + 4
while time.time() < end:
    raw.send(garp(a_mac))
    datagram(a_ip, "spoof")
    time.sleep(0.1)
print("attack done", flush=True)
`

// sinkScript is a UDP server printing the source address of every datagram.
const sinkScript = `
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 9999))
print("ready", flush=True)
while True:
    data, addr = s.recvfrom(2048)
    print(addr[0], data.decode(errors="replace"), flush=True)
`

// TestSandboxCannotTakeANeighboursAddress is the attack of a process with NET_ADMIN and
// NET_RAW in sandbox B's network namespace (a container the test starts there) on its
// neighbour A: B claims A's IP, then A's IP and MAC, announcing them by gratuitous ARP,
// and sends datagrams from A's address. Every frame of B's port that carries A's
// addresses is dropped on the host side: the host's calls to A's address keep reaching
// A's agent (A's token is accepted; B's agent would refuse it), the host's neighbour
// entry and the bridge's forwarding table keep A where it is, and the sink the test
// starts receives B's control datagram but nothing from A's address. Shown on a network
// the runtime creates (A in a spare holder's namespace, B in its own) and on one the
// operator made and names (A in its own, B in a holder's); the pins of A and B go when
// they are deleted, and the table when the runtime is closed on an empty network. A
// restarted gateway pins A and B again and drops the pins of gone ports, and a running
// one makes the table again when it is removed under it.
func TestSandboxCannotTakeANeighboursAddress(t *testing.T) {
	agent, image := antiSpoofPrerequisites(t)
	for _, tc := range []struct {
		name string
		// operator: a network the test creates (inter-container traffic on, a bridge
		// name of its own) rather than one the runtime creates.
		operator bool
	}{
		{name: "network_sandgate_creates"},
		{name: "network_the_operator_names", operator: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			network := "sg-as-" + testenv.RandomHex(4)
			t.Cleanup(func() { _ = exec.Command("docker", "network", "rm", network).Run() })
			if tc.operator {
				bridge := "sgop" + testenv.RandomHex(4)
				if out, err := exec.Command("docker", "network", "create", "-o", "com.docker.network.bridge.name="+bridge, network).CombinedOutput(); err != nil {
					t.Fatalf("create network: %v: %s", err, out)
				}
			}
			r, err := New(ctx, Options{Network: network, AgentBinary: agent, Spares: 1})
			if err != nil {
				t.Fatalf("runtime: %v", err)
			}
			closed := false
			t.Cleanup(func() {
				if !closed {
					r.Close()
				}
			})
			bridge := r.antiSpoof.bridge
			if tc.operator && !strings.HasPrefix(bridge, "sgop") {
				t.Fatalf("bridge %q: the network's own bridge name was not used", bridge)
			}

			// A and B: one in a spare holder's namespace (with an egress policy that lets
			// B's datagrams out), one in its own (no enforcer).
			waitSpare(t, r)
			inHolder := enforcedSpec(t, r, image, `{"defaultAction":"allow"}`)
			own := enforcedSpec(t, r, image, "")
			own.Egress = nil
			specA, specB := inHolder, own
			if tc.operator {
				specA, specB = own, inHolder
			}
			a, err := r.Create(ctx, specA)
			if err != nil {
				t.Fatalf("create A: %v", err)
			}
			b, err := r.Create(ctx, specB)
			if err != nil {
				t.Fatalf("create B: %v", err)
			}
			_, macA, portA := antiSpoofEndpoint(t, r, specA.ID)
			netnsB, macB, portB := antiSpoofEndpoint(t, r, specB.ID)
			ports, err := portsOf(bridge)
			if err != nil || !slices.Contains(ports, portA) || !slices.Contains(ports, portB) {
				t.Fatalf("pinned ports %v (err %v): want A's %s and B's %s", ports, err, portA, portB)
			}

			// A restarted gateway (a second runtime on the network) finds the table lost
			// and replaced by one pinning only a port that no longer exists: it pins A and
			// B again and drops the stale port, and the attack below meets its rules.
			table := AntiSpoofTable(bridge)
			for _, cmd := range [][]string{
				{"delete", "table", "bridge", table},
				{"add", "table", "bridge", table},
				{"add", "map", "bridge", table, "ports", "{ type ifname : verdict; }"},
				{"add", "chain", "bridge", table, "port_sgstale0"},
				{"add", "element", "bridge", table, "ports", `{ "sgstale0" : jump port_sgstale0 }`},
			} {
				if out, err := exec.Command("nft", cmd...).CombinedOutput(); err != nil {
					t.Fatalf("nft %v: %v: %s", cmd, err, out)
				}
			}
			restarted, err := New(ctx, Options{Network: network, AgentBinary: agent, Spares: -1})
			if err != nil {
				t.Fatalf("restarted runtime: %v", err)
			}
			restarted.Close()
			ports, err = portsOf(bridge)
			if err != nil || !slices.Contains(ports, portA) || !slices.Contains(ports, portB) || slices.Contains(ports, "sgstale0") {
				t.Fatalf("pinned ports after a restart %v (err %v): want A's %s and B's %s, not sgstale0", ports, err, portA, portB)
			}
			// The table removed under a running gateway (a firewall reload flushing the
			// ruleset): the reconciler's helper sweep makes it again with A and B.
			if out, err := exec.Command("nft", "delete", "table", "bridge", table).CombinedOutput(); err != nil {
				t.Fatalf("nft delete table: %v: %s", err, out)
			}
			if _, err := r.SweepHelpers(ctx); err != nil {
				t.Fatalf("sweep: %v", err)
			}
			ports, err = portsOf(bridge)
			if err != nil || !slices.Contains(ports, portA) || !slices.Contains(ports, portB) {
				t.Fatalf("pinned ports after the sweep %v (err %v): want A's %s and B's %s", ports, err, portA, portB)
			}

			if err := pingAgent(ctx, a.Address, specA.AgentToken); err != nil {
				t.Fatalf("A's agent before the attack: %v", err)
			}
			if err := pingAgent(ctx, b.Address, specB.AgentToken); err != nil {
				t.Fatalf("B's agent before the attack: %v", err)
			}

			sink, sinkIP := "", ""
			if tc.operator {
				sink, sinkIP = startSink(t, network, image)
			}
			spoofer := "sg-spoof-" + testenv.RandomHex(4)
			t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", spoofer).Run() })
			if out, err := exec.Command("docker", "run", "-d", "--name", spoofer, "--network", "container:"+netnsB,
				"--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW", "--user", "0", "--entrypoint", "python3",
				"-e", "A_IP="+a.Address, "-e", "A_MAC="+macA, "-e", "B_IP="+b.Address, "-e", "B_MAC="+macB, "-e", "SINK="+sinkIP,
				image, "-u", "-c", spoofScript).CombinedOutput(); err != nil {
				t.Fatalf("start the spoofer: %v: %s", err, out)
			}

			// While the attack runs, the host keeps calling A's address with A's token.
			var failures []string
			deadline := time.Now().Add(90 * time.Second)
			for running(t, spoofer) {
				if time.Now().After(deadline) {
					t.Fatal("the spoofer did not end within 90 s")
				}
				if err := pingAgent(ctx, a.Address, specA.AgentToken); err != nil {
					failures = append(failures, err.Error())
				}
				time.Sleep(100 * time.Millisecond)
			}
			logs, _ := exec.Command("docker", "logs", spoofer).CombinedOutput()
			if !strings.Contains(string(logs), "attack done") {
				t.Fatalf("the attack did not run to its end:\n%s", logs)
			}
			if len(failures) > 0 {
				t.Errorf("%d calls to A's address during the attack did not reach A's agent, e.g. %s", len(failures), failures[0])
			}
			if err := pingAgent(ctx, a.Address, specA.AgentToken); err != nil {
				t.Errorf("A's agent after the attack: %v", err)
			}
			neigh, _ := exec.Command("ip", "neigh", "show", a.Address, "dev", bridge).CombinedOutput()
			if strings.Contains(strings.ToLower(string(neigh)), strings.ToLower(macB)) {
				t.Errorf("the host's neighbour entry of A's address names B's MAC: %s", neigh)
			}
			fdb, _ := exec.Command("bridge", "fdb", "show", "br", bridge).CombinedOutput()
			for _, line := range strings.Split(string(fdb), "\n") {
				if strings.HasPrefix(strings.ToLower(line), strings.ToLower(macA)) && strings.Contains(line, "dev "+portB+" ") {
					t.Errorf("the bridge learned A's MAC on B's port: %s", line)
				}
			}
			if tc.operator {
				sunk := sinkLines(sink)
				if !slices.ContainsFunc(sunk, func(l string) bool { return l == b.Address+" control" }) {
					t.Errorf("the sink did not receive B's control datagram (the path is not shown open): %q", sunk)
				}
				if i := slices.IndexFunc(sunk, func(l string) bool { return strings.HasPrefix(l, a.Address+" ") }); i >= 0 {
					t.Errorf("the sink received datagrams from A's address: %q", sunk[i:])
				}
			}

			// The pins go with their sandboxes, and the table with the last container.
			for _, id := range []string{specA.ID, specB.ID} {
				if err := r.Delete(ctx, id); err != nil {
					t.Fatalf("delete %s: %v", id, err)
				}
			}
			ports, err = portsOf(bridge)
			if err != nil || slices.Contains(ports, portA) || slices.Contains(ports, portB) {
				t.Errorf("pinned ports after A and B were deleted: %v (err %v): A's %s and B's %s must be gone", ports, err, portA, portB)
			}
			_ = exec.Command("docker", "rm", "-f", spoofer).Run()
			if sink != "" {
				_ = exec.Command("docker", "rm", "-f", sink).Run()
			}
			closed = true
			r.Close()
			if out, _ := exec.Command("nft", "list", "tables", "bridge").CombinedOutput(); strings.Contains(string(out), AntiSpoofTable(bridge)) {
				t.Errorf("table bridge %s left after the runtime closed on an empty network:\n%s", AntiSpoofTable(bridge), out)
			}
		})
	}
}

// antiSpoofPrerequisites returns the built agent and the base image, or skips.
func antiSpoofPrerequisites(t *testing.T) (agent, image string) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker command")
	}
	if os.Geteuid() != 0 {
		t.Skip("anti-spoofing needs root on the engine's host")
	}
	binDir := os.Getenv("SANDGATE_E2E_BIN")
	if binDir == "" {
		binDir = "../../bin"
	}
	agent, _ = filepath.Abs(filepath.Join(binDir, "sandbox-agent"))
	if _, err := os.Stat(agent); err != nil {
		t.Skipf("no agent binary at %s (make build)", agent)
	}
	version, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	image = "sandgate/base:" + strings.TrimSpace(string(version))
	if err := exec.Command("docker", "image", "inspect", image).Run(); err != nil {
		t.Skipf("image %s not built", image)
	}
	return agent, image
}

// antiSpoofEndpoint returns the container holding sandbox id's network namespace (its
// holder or itself), the MAC the engine gave it, and its host-side bridge port.
func antiSpoofEndpoint(t *testing.T, r *Runtime, id string) (netns, mac, port string) {
	t.Helper()
	ctx := context.Background()
	netns = holderName(id)
	res, err := r.cli.ContainerInspect(ctx, netns, client.ContainerInspectOptions{})
	if err != nil {
		netns = containerName(id)
		if res, err = r.cli.ContainerInspect(ctx, netns, client.ContainerInspectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ep := res.Container.NetworkSettings.Networks[r.opts.Network]
	if ep == nil {
		t.Fatalf("%s is not on %s", netns, r.opts.Network)
	}
	port, err = r.antiSpoof.hostPort(res.Container.State.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return netns, net.HardwareAddr(ep.MacAddress).String(), port
}

// pingAgent calls the agent at addr with token on a connection of its own.
func pingAgent(ctx context.Context, addr, token string) error {
	c := agentclient.New()
	defer c.HTTP().CloseIdleConnections()
	return c.Ping(ctx, addr, token, 2*time.Second)
}

func running(t *testing.T, name string) bool {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", name).Output()
	if err != nil {
		t.Fatalf("inspect %s: %v", name, err)
	}
	return strings.TrimSpace(string(out)) == "true"
}

// startSink starts the UDP sink on network and returns its name and address.
func startSink(t *testing.T, network, image string) (name, addr string) {
	t.Helper()
	name = "sg-sink-" + testenv.RandomHex(4)
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	if out, err := exec.Command("docker", "run", "-d", "--name", name, "--network", network, "--entrypoint", "python3",
		image, "-u", "-c", sinkScript).CombinedOutput(); err != nil {
		t.Fatalf("start the sink: %v: %s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Contains(sinkLines(name), "ready") {
		if time.Now().After(deadline) {
			t.Fatal("the sink did not start within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, err := exec.Command("docker", "inspect", "-f", fmt.Sprintf(`{{(index .NetworkSettings.Networks %q).IPAddress}}`, network), name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return name, strings.TrimSpace(string(out))
}

// sinkLines is what the sink printed: "ready", then "<source address> <payload>" lines.
func sinkLines(name string) []string {
	out, _ := exec.Command("docker", "logs", name).CombinedOutput()
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestRuntimeRefusesToStartWithoutAntiSpoof: a gateway that cannot pin sandbox ports
// (here: the test binary again, as root without CAP_NET_ADMIN and CAP_SYS_ADMIN) does
// not start, and says which setting starts it without the protection; with that
// setting it starts.
func TestRuntimeRefusesToStartWithoutAntiSpoof(t *testing.T) {
	agent, _ := antiSpoofPrerequisites(t)
	ctx := context.Background()
	if network := os.Getenv("SANDGATE_TEST_ANTISPOOF_NETWORK"); network != "" {
		_, err := New(ctx, Options{Network: network, AgentBinary: agent, Spares: -1})
		if err == nil || !strings.Contains(err.Error(), "SANDGATE_ANTISPOOF=off") {
			t.Fatalf("New without the privilege: %v; want a refusal naming SANDGATE_ANTISPOOF=off", err)
		}
		t.Logf("refused: %v", err)
		r, err := New(ctx, Options{Network: network, AgentBinary: agent, Spares: -1, NoAntiSpoof: true})
		if err != nil {
			t.Fatalf("New with NoAntiSpoof: %v", err)
		}
		r.Close()
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv command")
	}
	network := "sg-as-" + testenv.RandomHex(4)
	if out, err := exec.Command("docker", "network", "create", network).CombinedOutput(); err != nil {
		t.Fatalf("create network: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "network", "rm", network).Run() })
	cmd := exec.Command(setpriv, "--bounding-set", "-net_admin,-sys_admin", "--",
		os.Args[0], "-test.run", "^TestRuntimeRefusesToStartWithoutAntiSpoof$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "SANDGATE_TEST_ANTISPOOF_NETWORK="+network)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "refused: ") {
		t.Fatalf("the unprivileged run: %v\n%s", err, out)
	}
	t.Logf("the unprivileged run:\n%s", out)
	id, err := exec.Command("docker", "network", "inspect", "-f", "{{.Id}}", network).Output()
	if err != nil || len(id) < 12 {
		t.Fatalf("inspect network: %v", err)
	}
	if tables, _ := exec.Command("nft", "list", "tables", "bridge").CombinedOutput(); strings.Contains(string(tables), AntiSpoofTable("br-"+string(id[:12]))) {
		t.Errorf("a table was left:\n%s", tables)
	}
}
