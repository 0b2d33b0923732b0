package egress

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// The test topology, all inside network namespaces the test creates: a "server"
// namespace holding an authoritative DNS server and HTTP servers on addresses of the
// benchmarking range 198.18.0.0/15 (and 2001:db8::/32 for IPv6), and a "sandbox"
// namespace joined to it by a veth pair, where the enforcer and the probes run. No
// packet leaves the machine.
const (
	sandboxIP    = "198.18.0.2"
	dnsServerIP  = "198.18.0.1"  // the upstream resolver
	otherDNSIP   = "198.18.0.53" // another resolver the workload might try
	allowedIP    = "198.18.0.10" // allowed.test
	deniedIP     = "198.18.0.11" // denied.test
	subdomainIP  = "198.18.0.12" // a.example.test
	apexIP       = "198.18.0.13" // example.test
	shortIP      = "198.18.0.14" // short.test, answered with a 1s TTL
	platformIP   = "198.18.0.20" // platform.test, inside the platform deny range
	platformCIDR = "198.18.0.16/28"
	cidrInIP     = "198.18.0.70"  // inside the CIDR rule 198.18.0.64/26
	cidrOutIP    = "198.18.0.130" // outside it
	serverIP6    = "2001:db8:5347::1"
	sandboxIP6   = "2001:db8:5347::2"
)

// serverAddrs are the addresses of the server namespace; its HTTP server listens on
// all of them and answers with the address it was reached on.
var serverAddrs = []string{dnsServerIP, otherDNSIP, allowedIP, deniedIP, subdomainIP, apexIP, shortIP, platformIP, cidrInIP, cidrOutIP}

// testZone is what the authoritative server answers.
var testZone = map[string]string{
	"allowed.test.":   allowedIP,
	"denied.test.":    deniedIP,
	"a.example.test.": subdomainIP,
	"example.test.":   apexIP,
	"platform.test.":  platformIP,
	"short.test.":     shortIP,
	"v6.test.":        serverIP6,
	// A reverse name the upstream knows: answered NOERROR (no PTR record) when asked, so
	// an NXDOMAIN proves the proxy refused it itself.
	"10.0.18.198.in-addr.arpa.": allowedIP,
}

const childEnv = "SANDGATE_EGRESS_TEST_CHILD"

// TestMain lets the test binary double as the enforcer: the tests start it again with
// childEnv set inside the sandbox namespace (`ip netns exec`), which runs Main exactly
// as `sandbox-agent egress` would; with filterChildEnv set it is the child of
// TestEnforcerSyscallFilter.
func TestMain(m *testing.M) {
	if mode := os.Getenv(filterChildEnv); mode != "" {
		os.Exit(syscallFilterChild(mode))
	}
	if os.Getenv(childEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		err := Main(ctx, os.Args[1:])
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "egress:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// requireNetAdmin skips when the test cannot create namespaces or nftables tables.
func requireNetAdmin(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("skipping: needs root to create network namespaces and nftables tables")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		tb.Skip("skipping: needs the ip command (iproute2)")
	}
}

// requireNftables skips when the kernel has no nf_tables: it adds and deletes a
// scratch table in the given namespace.
func requireNftables(tb testing.TB, netns string) {
	tb.Helper()
	f, err := os.Open(filepath.Join("/var/run/netns", netns))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		tb.Skipf("skipping: no netlink for nftables: %v", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "sandgate_probe"})
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		tb.Skipf("skipping: no nftables support in this kernel: %v", err)
	}
}

type topology struct {
	sandbox string // netns names
	server  string
}

func run(tb testing.TB, args ...string) {
	tb.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newTopology builds the two namespaces, the veth pair, the DNS and HTTP servers.
func newTopology(tb testing.TB) *topology {
	tb.Helper()
	requireNetAdmin(tb)
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	id := hex.EncodeToString(suffix)
	top := &topology{sandbox: "sg-eg-sbx-" + id, server: "sg-eg-srv-" + id}
	vethSbx, vethSrv := "sgeb"+id, "sges"+id
	run(tb, "ip", "netns", "add", top.server)
	tb.Cleanup(func() { _ = exec.Command("ip", "netns", "del", top.server).Run() })
	run(tb, "ip", "netns", "add", top.sandbox)
	tb.Cleanup(func() { _ = exec.Command("ip", "netns", "del", top.sandbox).Run() })
	requireNftables(tb, top.sandbox)
	// Created inside the sandbox namespace, so deleting the namespaces removes it.
	run(tb, "ip", "-n", top.sandbox, "link", "add", vethSbx, "type", "veth", "peer", "name", vethSrv, "netns", top.server)
	for _, ns := range []string{top.sandbox, top.server} {
		run(tb, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(tb, "ip", "-n", top.sandbox, "addr", "add", sandboxIP+"/24", "dev", vethSbx)
	run(tb, "ip", "-n", top.sandbox, "addr", "add", sandboxIP6+"/64", "dev", vethSbx, "nodad")
	run(tb, "ip", "-n", top.sandbox, "link", "set", vethSbx, "up")
	for _, a := range serverAddrs {
		run(tb, "ip", "-n", top.server, "addr", "add", a+"/24", "dev", vethSrv)
	}
	run(tb, "ip", "-n", top.server, "addr", "add", serverIP6+"/64", "dev", vethSrv, "nodad")
	run(tb, "ip", "-n", top.server, "link", "set", vethSrv, "up")
	// The kernel reports carrier asynchronously; a packet sent before it is dropped
	// and costs the first probe a 1s ARP retry.
	for _, link := range [][2]string{{top.sandbox, vethSbx}, {top.server, vethSrv}} {
		deadline := time.Now().Add(5 * time.Second)
		for {
			out, _ := exec.Command("ip", "-n", link[0], "-o", "link", "show", "dev", link[1]).CombinedOutput()
			if strings.Contains(string(out), "state UP") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("%s in %s not up: %s", link[1], link[0], out)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	top.startServers(tb)
	return top
}

// inNetns runs fn on an OS thread switched into the named namespace. Sockets created
// there stay in that namespace after the thread switches back. The goroutine is
// dedicated so that, if switching back fails, its thread dies with it.
func inNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(filepath.Join("/var/run/netns", name))
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// startServers starts, in the server namespace, the authoritative DNS server (UDP and
// TCP on port 53 of every address, and TCP 5353 for the "DNS elsewhere" probe) and an
// HTTP server on port 80 of every address, v4 and v6.
func (top *topology) startServers(tb testing.TB) {
	tb.Helper()
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		q := r.Question[0]
		name := strings.ToLower(q.Name)
		ip, ok := testZone[name]
		var n int
		if _, err := fmt.Sscanf(name, "n%d.bench.test.", &n); err == nil {
			// Distinct addresses for the benchmark of first lookups (pin writes).
			ip, ok = fmt.Sprintf("198.19.%d.%d", n/256%256, n%256), true
		}
		ttl := uint32(60)
		if name == "short.test." {
			ttl = 1
		}
		isV6 := strings.Contains(ip, ":")
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA && !isV6:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: net.ParseIP(ip)})
		case q.Qtype == dns.TypeAAAA && isV6:
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: net.ParseIP(ip)})
		}
		_ = w.WriteMsg(m)
	})
	var servers []*dns.Server
	var httpLn []net.Listener
	err := inNetns(top.server, func() error {
		pc, err := net.ListenPacket("udp", ":53")
		if err != nil {
			return err
		}
		servers = append(servers, &dns.Server{PacketConn: pc, Handler: handler})
		for _, addr := range []string{":53", ":5353"} {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			servers = append(servers, &dns.Server{Listener: ln, Handler: handler})
		}
		ln, err := net.Listen("tcp", ":80")
		if err != nil {
			return err
		}
		httpLn = append(httpLn, ln)
		return nil
	})
	if err != nil {
		tb.Fatalf("start servers in %s: %v", top.server, err)
	}
	for _, s := range servers {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() { _ = s.ActivateAndServe() }()
		<-started
		tb.Cleanup(func() { _ = s.Shutdown() })
	}
	srv := &http.Server{Handler: http.HandlerFunc(echoServer)}
	go func() { _ = srv.Serve(httpLn[0]) }()
	tb.Cleanup(func() { _ = srv.Close() })
}

// echoServer answers with the address it was reached on and, when the request has an
// Authorization header, a second line with its SHA-256 (so that a test can tell which
// credential arrived without the body carrying it back).
func echoServer(w http.ResponseWriter, r *http.Request) {
	local := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	fmt.Fprint(w, local.String())
	if auth := r.Header.Get("Authorization"); auth != "" {
		fmt.Fprintf(w, "\nauthorization-sha256=%x", sha256.Sum256([]byte(auth)))
	}
}

// enforcerProc is a running enforcer (this test binary in child mode) in the sandbox
// namespace.
type enforcerProc struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan struct{}
}

// startEnforcer runs the enforcer in the sandbox namespace with extra args and env,
// waits for its ready file, and stops it (SIGTERM) in cleanup.
func (top *topology) startEnforcer(tb testing.TB, env []string, args ...string) *enforcerProc {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	ready := filepath.Join(tb.TempDir(), "ready")
	full := append([]string{"netns", "exec", top.sandbox, exe,
		"--upstream", dnsServerIP + ":53", "--ready-file", ready, "--log-level", "debug"}, args...)
	cmd := exec.Command("ip", full...)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	p := &enforcerProc{cmd: cmd, stderr: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	cmd.Stdout = p.stderr
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start enforcer: %v", err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if tb.Failed() {
			tb.Logf("enforcer output:\n%s", p.stderr.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			return p
		}
		select {
		case <-p.done:
			tb.Fatalf("enforcer exited before ready:\n%s", p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("enforcer not ready after 10s:\n%s", p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the enforcer at once, as a crash would.
func (p *enforcerProc) kill(tb testing.TB) {
	tb.Helper()
	// ip netns exec execs the binary, so the pid is the enforcer's own.
	_ = p.cmd.Process.Kill()
	<-p.done
}

// lookup sends one query from the sandbox namespace to server (ip:port) over network
// ("udp" or "tcp") and returns the response.
func (top *topology) lookup(network, server, name string, qtype uint16) (*dns.Msg, error) {
	var resp *dns.Msg
	err := inNetns(top.sandbox, func() error {
		c := &dns.Client{Net: network, Timeout: 2 * time.Second}
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), qtype)
		var err error
		resp, _, err = c.Exchange(m, server)
		return err
	})
	return resp, err
}

// resolve looks name up the way a workload whose resolv.conf names the upstream does.
func (top *topology) resolve(tb testing.TB, name string) (ip string, rcode int) {
	tb.Helper()
	resp, err := top.lookup("udp", dnsServerIP+":53", name, dns.TypeA)
	if err != nil {
		tb.Fatalf("lookup %s: %v", name, err)
	}
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String(), resp.Rcode
		}
	}
	return "", resp.Rcode
}

// httpGet connects from the sandbox namespace to addr (ip:port) and returns the body,
// or the connect error (a drop shows as a timeout).
func (top *topology) httpGet(addr string, timeout time.Duration) (string, error) {
	var conn net.Conn
	err := inNetns(top.sandbox, func() error {
		var err error
		conn, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: x\r\n\r\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		return "", err
	}
	_, body, _ := strings.Cut(string(b), "\r\n\r\n")
	return body, nil
}

// apiClient talks to the enforcer's API from the server namespace, as the gateway
// would from outside the sandbox.
func (top *topology) apiClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			err := inNetns(top.server, func() error {
				var err error
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
	}}
}

func isTimeoutOrRefused(err error) bool {
	var ne net.Error
	return err != nil && (errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EPERM))
}

func mustExe(tb testing.TB) string {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	return exe
}

func cmdEnv() []string { return os.Environ() }

// outputChainDrops reports whether the enforcer's table is in the namespace with its
// output chain's policy still drop (read over netlink, no nft binary needed).
func outputChainDrops(tb testing.TB, netns string) bool {
	tb.Helper()
	f, err := os.Open(filepath.Join("/var/run/netns", netns))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		tb.Fatal(err)
	}
	ch, err := c.ListChain(&nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}, "output")
	if err != nil {
		return false
	}
	return ch.Policy != nil && *ch.Policy == nftables.ChainPolicyDrop
}
