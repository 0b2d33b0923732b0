package docker

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/test/testenv"
)

// runTestContainer starts a container of image on network (removed when the test
// ends) and returns its name and address.
func runTestContainer(t *testing.T, network, image string, cmd ...string) (name, addr string) {
	t.Helper()
	name = "sg-rt-aux-" + testenv.RandomHex(4)
	args := append([]string{"run", "-d", "--name", name, "--network", network, image}, cmd...)
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("docker run %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	out, err := exec.Command("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name).Output()
	if err != nil {
		t.Fatalf("inspect %s: %v", name, err)
	}
	return name, strings.TrimSpace(string(out))
}

// inSandbox runs sh -c script in the sandbox's workload container and returns its
// output, trimmed.
func inSandbox(t *testing.T, id, script string) string {
	t.Helper()
	out, err := exec.Command("docker", "exec", containerName(id), "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Logf("in %s: %s: %v", id, script, err)
	}
	return strings.TrimSpace(string(out))
}

// TestAllowedNameResolves: a sandbox allowed one external name resolves it through
// its enforcer and reaches the address, in a namespace of its own and in a spare
// holder's. Docker's embedded resolver forwards the query from inside the sandbox's
// namespace, unmarked, to the sandbox's DNS server (here one the test runs, named by
// Options.SandboxDNS); the enforcer sends that forward through the same policy
// straight to the server instead of back to 127.0.0.11, where it would loop. Nothing
// goes around the enforcer: a denied name is refused (NXDOMAIN), also when the
// workload asks the DNS server itself, whose other ports are closed, and the server is
// never asked a denied name.
func TestAllowedNameResolves(t *testing.T) {
	image := baseImage(t)
	// ICC on: the sandboxes must reach the test's DNS and HTTP servers on this network.
	network := "sg-rt-" + testenv.RandomHex(4)
	if out, err := exec.Command("docker", "network", "create", network).CombinedOutput(); err != nil {
		t.Fatalf("create network: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "network", "rm", network).Run() })
	_, web := runTestContainer(t, network, image, "python3", "-m", "http.server", "8000", "--bind", "0.0.0.0")
	resolverName, resolver := runTestContainer(t, network, image, "python3", "-c", testenv.DNSZoneScript, web)
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := exec.Command("docker", "logs", resolverName).CombinedOutput()
		if strings.Contains(string(out), "ready") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test's DNS server is not ready: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := testRuntimeOn(t, Options{Network: network, SandboxDNS: []netip.Addr{netip.MustParseAddr(resolver)}})
	ctx := context.Background()
	policy := `{"defaultAction":"deny","egress":[{"action":"allow","target":"allowed.sandgate-test"}]}`

	for _, tt := range []struct {
		name  string
		spare bool
	}{
		{"own namespace", false},
		{"spare holder's namespace", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := enforcedSpec(t, r, image, policy)
			if tt.spare {
				waitSpare(t, r)
			}
			if _, err := r.create(ctx, spec, tt.spare); err != nil {
				t.Fatalf("create: %v", err)
			}
			res, err := r.cli.ContainerInspect(ctx, containerName(spec.ID), client.ContainerInspectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if inHolder := res.Container.Config.Labels[labelHolder] != ""; inHolder != tt.spare {
				t.Fatalf("workload in a holder's namespace: %t, want %t", inHolder, tt.spare)
			}
			id := spec.ID
			inSandbox(t, id, "cat > /tmp/dnsq.py <<'EOF'\n"+testenv.DNSProbeScript+"EOF")
			query := func(server string, port int, name, proto string) string {
				return inSandbox(t, id, "python3 /tmp/dnsq.py "+server+" "+strconv.Itoa(port)+" "+name+" A "+proto)
			}

			if got := inSandbox(t, id, "getent hosts allowed.sandgate-test | awk '{print $1}'"); got != web {
				t.Fatalf("getent hosts allowed.sandgate-test = %q, want %s", got, web)
			}
			for _, proto := range []string{"udp", "tcp"} {
				if got := query("127.0.0.11", 53, "allowed.sandgate-test", proto); got != "rcode=0 an=1 "+web {
					t.Fatalf("%s query of the allowed name = %q", proto, got)
				}
			}
			// The answer's address is in the allow set: the workload reaches it.
			if got := inSandbox(t, id, "curl -s -o /dev/null -m 5 -w '%{http_code}' http://allowed.sandgate-test:8000/"); got != "200" {
				t.Fatalf("GET http://allowed.sandgate-test:8000/ = %q, want 200", got)
			}

			if got := inSandbox(t, id, "getent hosts denied.sandgate-test; echo exit=$?"); got != "exit=2" {
				t.Fatalf("getent hosts denied.sandgate-test = %q, want not found", got)
			}
			for _, proto := range []string{"udp", "tcp"} {
				if got := query("127.0.0.11", 53, "denied.sandgate-test", proto); !strings.HasPrefix(got, "rcode=3 an=0") {
					t.Fatalf("%s query of the denied name = %q, want NXDOMAIN", proto, got)
				}
				// Asked directly, the sandbox's DNS server is the enforcer's filtered
				// listener: the same refusal, the same answer for the allowed name.
				if got := query(resolver, 53, "denied.sandgate-test", proto); !strings.HasPrefix(got, "rcode=3 an=0") {
					t.Fatalf("%s query of the denied name to %s:53 = %q, want NXDOMAIN", proto, resolver, got)
				}
				if got := query(resolver, 53, "allowed.sandgate-test", proto); got != "rcode=0 an=1 "+web {
					t.Fatalf("%s query of the allowed name to %s:53 = %q", proto, resolver, got)
				}
			}
			// The enforcer's listener for the forwarded queries is on the namespace's
			// loopback, which the workload shares: asked there directly, it refuses alike.
			for _, proto := range []string{"udp", "tcp"} {
				if got := query("127.0.0.1", 54, "denied.sandgate-test", proto); !strings.HasPrefix(got, "rcode=3 an=0") {
					t.Fatalf("%s query of the denied name to the enforcer's 127.0.0.1:54 = %q, want NXDOMAIN", proto, got)
				}
				if got := query("127.0.0.1", 54, "allowed.sandgate-test", proto); got != "rcode=0 an=1 "+web {
					t.Fatalf("%s query of the allowed name to the enforcer's 127.0.0.1:54 = %q", proto, got)
				}
			}
			if got := query(resolver, 5353, "denied.sandgate-test", "udp"); !strings.HasPrefix(got, "error") {
				t.Fatalf("query to the DNS server's port 5353 = %q, want no answer", got)
			}

			out, err := exec.Command("docker", "logs", resolverName).CombinedOutput()
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if line != "ready" && line != "asked allowed.sandgate-test" {
					t.Fatalf("the sandbox's DNS server was %s", line)
				}
			}
		})
	}
}

// TestEngineForwardsTo: the servers the engine forwards to without HostConfig.DNS,
// read from the host's files as libnetwork reads them.
func TestEngineForwardsTo(t *testing.T) {
	tests := []struct {
		name, etc, resolved string
		want                []string
	}{
		{"nameservers", "search example\nnameserver 192.0.2.53\nnameserver 198.51.100.53\n", "", []string{"192.0.2.53", "198.51.100.53"}},
		{"loopback ones are the host's own", "nameserver 127.0.0.1\nnameserver 192.0.2.53\n", "", []string{"192.0.2.53"}},
		{"only loopback", "nameserver 127.0.0.1\n", "", nil},
		{"IPv6 ones are not forwarded to", "nameserver 2001:db8::53\nnameserver 192.0.2.53\n", "", []string{"192.0.2.53"}},
		{"none: the engine's defaults", "search example\n", "", []string{"8.8.8.8", "8.8.4.4"}},
		{"systemd-resolved's stub", "nameserver 127.0.0.53\n", "nameserver 192.0.2.53\n", []string{"192.0.2.53"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			etc, resolved := filepath.Join(dir, "etc"), filepath.Join(dir, "resolved")
			if err := os.WriteFile(etc, []byte(tt.etc), 0o644); err != nil {
				t.Fatal(err)
			}
			if tt.resolved != "" {
				if err := os.WriteFile(resolved, []byte(tt.resolved), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			for _, a := range engineForwardsTo(etc, resolved) {
				got = append(got, a.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("engineForwardsTo = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestParseSandboxDNS: the operator's servers are IPv4 addresses a sandbox can reach.
func TestParseSandboxDNS(t *testing.T) {
	for _, tt := range []struct {
		name string
		list []string
		ok   bool
	}{
		{"addresses", []string{"192.0.2.53", " 198.51.100.53", "192.0.2.53"}, true},
		{"a name", []string{"dns.example"}, false},
		{"IPv6", []string{"2001:db8::53"}, false},
		{"loopback", []string{"127.0.0.1"}, false},
		{"unspecified", []string{"0.0.0.0"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSandboxDNS(tt.list)
			if (err == nil) != tt.ok {
				t.Fatalf("ParseSandboxDNS(%q) = %v, %v", tt.list, got, err)
			}
			if tt.ok && len(got) != 2 {
				t.Fatalf("ParseSandboxDNS(%q) = %v, want two addresses", tt.list, got)
			}
		})
	}
}
