package egress

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
	"github.com/sandgate/sandgate/sandbox-agent/egress/egressauth"
)

// Environment variables the enforcer reads (flags win over them).
const (
	EnvToken        = agentproto.EnvEgressToken           // API token; unset = open API
	EnvPolicy       = agentproto.EnvEgressPolicy          // initial policy JSON
	EnvUpstream     = "SANDGATE_EGRESS_UPSTREAM"          // --upstream
	EnvPlatformDeny = "SANDGATE_EGRESS_PLATFORM_DENY"     // --platform-deny
	EnvPolicyHook   = "SANDGATE_EGRESS_POLICY_HOOK"       // --policy-hook
	EnvHookToken    = "SANDGATE_EGRESS_POLICY_HOOK_TOKEN" // bearer token for the hook
	EnvDNSServers   = "SANDGATE_EGRESS_DNS_SERVERS"       // --dns-servers
)

// DefaultServersListen is where the proxy for queries to the sandbox's DNS servers
// listens.
const DefaultServersListen = "127.0.0.1:54"

// DefaultMark is the SO_MARK of the proxy's upstream sockets ("SG").
const DefaultMark = 0x5347

type config struct {
	listen        string
	dnsListen     string
	upstream      string
	resolvConf    string
	dnsServers    string
	serversListen string
	policyFile    string
	stateFile     string
	platformDeny  string
	policyHook    string
	hookToken     string
	mark          uint
	minTTL        time.Duration
	maxTTL        time.Duration
	maxRules      int
	readyFile     string
	cleanup       bool
	credProxy     bool
	vaultListen   string
	logLevel      string
	maxFileBytes  uint64
}

// noNewPrivs sets no_new_privs on every thread of the process (the flag is a thread's),
// or, in a build with cgo, which cannot do that, on this one and those it makes.
func noNewPrivs() error {
	_, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0)
	if errno == syscall.ENOTSUP {
		return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	}
	if errno != 0 {
		return errno
	}
	return nil
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("sandbox-agent egress", flag.ContinueOnError)
	fs.StringVar(&c.listen, "listen", "0.0.0.0:18080", "address of the egress policy API")
	fs.StringVar(&c.dnsListen, "dns-listen", "127.0.0.1:53", "IPv4 address:port of the DNS proxy every port-53 packet is redirected to")
	fs.StringVar(&c.upstream, "upstream", os.Getenv(EnvUpstream), "upstream resolver ip:port (default: first nameserver of --resolv-conf, port 53)")
	fs.StringVar(&c.resolvConf, "resolv-conf", "/etc/resolv.conf", "file the default upstream is read from, once, at start")
	fs.StringVar(&c.dnsServers, "dns-servers", os.Getenv(EnvDNSServers), "comma-separated IPv4 addresses of the sandbox's DNS servers, those Docker's embedded resolver forwards to: port-53 packets to them go to a second proxy, which asks them directly")
	fs.StringVar(&c.serversListen, "dns-servers-listen", DefaultServersListen, "IPv4 loopback address:port of the second proxy (with --dns-servers)")
	fs.StringVar(&c.policyFile, "policy-file", "", "initial policy JSON file (default: $"+EnvPolicy+", else deny all)")
	fs.StringVar(&c.stateFile, "state-file", "", "file the policy in force is kept in, so that a restarted enforcer installs it instead of the initial one (default: none)")
	fs.StringVar(&c.platformDeny, "platform-deny", os.Getenv(EnvPlatformDeny), "comma-separated targets denied ahead of any policy")
	fs.StringVar(&c.policyHook, "policy-hook", os.Getenv(EnvPolicyHook), "URL that must approve every policy change made through the API")
	fs.UintVar(&c.mark, "mark", DefaultMark, "SO_MARK that lets the proxy's upstream queries out")
	fs.DurationVar(&c.minTTL, "min-ttl", 30*time.Second, "shortest time a DNS answer's addresses stay allowed")
	fs.DurationVar(&c.maxTTL, "max-ttl", 24*time.Hour, "longest time a DNS answer's addresses stay allowed")
	fs.IntVar(&c.maxRules, "max-rules", DefaultMaxRules, "most rules one policy may have")
	fs.StringVar(&c.readyFile, "ready-file", "", "file written once the rules are installed and the proxy listens")
	fs.BoolVar(&c.credProxy, "credential-proxy", false, "serve the credential vault and intercept the hosts its bindings name (needs $"+EnvVaultCACert+" and $"+EnvVaultCAKey+")")
	fs.StringVar(&c.vaultListen, "vault-listen", "127.0.0.1:"+strconv.Itoa(DefaultVaultPort), "IPv4 loopback address:port of the credential proxy intercepted connections are redirected to")
	fs.BoolVar(&c.cleanup, "cleanup", false, "delete the nftables table on exit (default: leave it, so the sandbox stays closed)")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.Uint64Var(&c.maxFileBytes, "max-file-bytes", 0, "largest file the enforcer may write, its log included (RLIMIT_FSIZE; 0: no bound)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	c.hookToken = os.Getenv(EnvHookToken)
	return c, nil
}

// Main runs the enforcer with command-line args (those after "egress") until ctx
// ends. It returns an error if the rules cannot be installed; once installed they stay
// in the kernel whatever happens to this process (unless --cleanup).
func Main(ctx context.Context, args []string) error {
	startedAt := time.Now()
	// Nothing the enforcer could exec gains a privilege (a sidecar has this from the
	// engine already; a host process from here).
	if err := noNewPrivs(); err != nil {
		return fmt.Errorf("egress: no_new_privs: %w", err)
	}
	// Nor does it reach the kernel beyond what it needs (syscallfilter.go).
	if err := installSyscallFilter(); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	// Past --max-file-bytes a write fails instead of the signal ending the enforcer.
	signal.Ignore(syscall.SIGXFSZ)
	c, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil // the usage is printed already
	}
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	if c.maxFileBytes > 0 {
		limit := unix.Rlimit{Cur: c.maxFileBytes, Max: c.maxFileBytes}
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &limit); err != nil {
			return fmt.Errorf("egress: --max-file-bytes: %w", err)
		}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return fmt.Errorf("egress: --log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("component", "egress")

	proxyAddr, err := netip.ParseAddrPort(c.dnsListen)
	if err != nil || !proxyAddr.Addr().Is4() {
		return fmt.Errorf("egress: --dns-listen %q must be an IPv4 address:port", c.dnsListen)
	}
	upstream, err := resolveUpstream(c.upstream, c.resolvConf)
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	if upstream == proxyAddr {
		return fmt.Errorf("egress: upstream %s is the proxy itself; pass --upstream", upstream)
	}
	servers, err := parseDNSServers(c.dnsServers)
	if err != nil {
		return fmt.Errorf("egress: --dns-servers: %w", err)
	}
	serversAddr, err := netip.ParseAddrPort(c.serversListen)
	if err != nil || !serversAddr.Addr().Is4() || !serversAddr.Addr().IsLoopback() || serversAddr == proxyAddr {
		return fmt.Errorf("egress: --dns-servers-listen %q must be an IPv4 loopback address:port other than --dns-listen", c.serversListen)
	}
	platform, err := parsePlatformDeny(c.platformDeny)
	if err != nil {
		return fmt.Errorf("egress: --platform-deny: %w", err)
	}
	fw, err := newFirewall(firewallConfig{proxy: proxyAddr, upstream: upstream, servers: servers, serversProxy: serversAddr, mark: uint32(c.mark)})
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	defer fw.close()
	enf := newEnforcer(fw, platform, c.minTTL, c.maxTTL)
	enf.inherit(fw.existingPins())
	var vproxy *vaultProxy
	if c.credProxy {
		vaddr, err := netip.ParseAddrPort(c.vaultListen)
		if err != nil || !vaddr.Addr().IsLoopback() || !vaddr.Addr().Is4() {
			return fmt.Errorf("egress: --vault-listen %q must be an IPv4 loopback address:port", c.vaultListen)
		}
		vproxy, err = newVaultProxy(enf, []byte(os.Getenv(EnvVaultCACert)), []byte(os.Getenv(EnvVaultCAKey)), []byte(os.Getenv(EnvVaultUpstreamCA)), uint32(c.mark), log)
		if err != nil {
			return fmt.Errorf("egress: %w", err)
		}
		enf.vaultPort = vaddr.Port()
	}
	var state *stateFile
	if c.stateFile != "" {
		state = &stateFile{path: c.stateFile}
	}
	// A policy saved by an earlier run is the one in force: it was set through the API
	// after the initial one, and a restart must not undo that.
	initial, restored, err := state.load(c.maxRules)
	if err == nil && !restored {
		initial, err = loadInitialPolicy(c.policyFile, c.maxRules)
		if err == nil {
			err = state.save(initial)
		}
	}
	if err != nil {
		// Fail closed: a sandbox whose policy cannot be read gets no network at all.
		if derr := enf.apply(Policy{DefaultAction: ActionDeny, Egress: []Rule{}}); derr != nil {
			log.Error("install deny-all after a bad initial policy", "err", derr)
		}
		return fmt.Errorf("egress: %w", err)
	}
	if c.credProxy {
		// The vault a previous run saved is in force again, its interception included.
		enf.vault.Store(state.savedVault())
	}
	if err := enf.apply(initial); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	if c.cleanup {
		defer func() {
			if err := fw.remove(); err != nil {
				log.Error("cleanup failed", "err", err)
			}
		}()
	}
	log.Info("egress rules installed", "table", "inet "+TableName, "mode", initial.Mode(), "restored", restored, "upstream", upstream.String(), "proxy", proxyAddr.String(), "dns_servers", c.dnsServers)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	proxy := newDNSProxy(enf, []netip.AddrPort{upstream}, uint32(c.mark), log)
	waitMain, err := proxy.serve(ctx, c.dnsListen)
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	waitDNS := waitMain
	if len(servers) > 0 {
		ups := make([]netip.AddrPort, len(servers))
		for i, a := range servers {
			ups[i] = netip.AddrPortFrom(a, 53)
		}
		waitServers, err := newDNSProxy(enf, ups, uint32(c.mark), log).serve(ctx, c.serversListen)
		if err != nil {
			cancel()
			waitMain()
			return fmt.Errorf("egress: %w", err)
		}
		waitDNS = func() { waitMain(); waitServers() }
	}

	waitVault := func() {}
	var bound *boundHosts
	if vproxy != nil {
		if waitVault, err = vproxy.serve(ctx, c.vaultListen); err != nil {
			cancel()
			waitDNS()
			return fmt.Errorf("egress: %w", err)
		}
		bound = newBoundHosts(enf, proxy.lookupA, log)
		resolved := make(chan struct{})
		go func() { defer close(resolved); bound.run(ctx) }()
		waitProxy := waitVault
		waitVault = func() { waitProxy(); <-resolved }
	}

	ready := &atomic.Bool{}
	a := &api{enf: enf, hook: newPolicyHook(c.policyHook, c.hookToken), state: state, maxRules: c.maxRules, ready: ready, log: log, proxy: vproxy, bound: bound}
	if tok := os.Getenv(EnvToken); tok != "" {
		// Requests signed before this process started are refused: one captured by a
		// workload that held the port while no enforcer ran cannot be replayed to it.
		a.token, a.verifier = tok, egressauth.NewVerifier(tok, startedAt)
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		cancel()
		waitDNS()
		waitVault()
		return fmt.Errorf("egress: listen for the policy API on %s: %w", c.listen, err)
	}
	srv := &http.Server{Handler: a.handler(), ReadHeaderTimeout: 10 * time.Second}
	apiErr := make(chan error, 1)
	go func() { apiErr <- srv.Serve(ln) }()

	ready.Store(true)
	if c.readyFile != "" {
		if err := os.WriteFile(c.readyFile, []byte("ready\n"), 0o644); err != nil {
			log.Error("write ready file", "path", c.readyFile, "err", err)
		}
	}
	log.Info("egress enforcer ready", "api", ln.Addr().String(), "dns", c.dnsListen)

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-apiErr:
		runErr = fmt.Errorf("egress: policy API stopped: %w", err)
	}
	cancel()
	shutdownCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	_ = srv.Shutdown(shutdownCtx)
	waitDNS()
	waitVault()
	return runErr
}

// resolveUpstream picks the resolver the proxy forwards to: the flag, else the first
// nameserver of resolv.conf as it is now. The enforcer never rewrites resolv.conf: the
// redirect catches queries to any resolver, so the file can stay as the runtime wrote it.
func resolveUpstream(flagValue, resolvConf string) (netip.AddrPort, error) {
	if flagValue != "" {
		if ap, err := netip.ParseAddrPort(flagValue); err == nil {
			return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
		}
		if a, err := netip.ParseAddr(flagValue); err == nil {
			return netip.AddrPortFrom(a.Unmap(), 53), nil
		}
		return netip.AddrPort{}, fmt.Errorf("--upstream %q is not ip or ip:port", flagValue)
	}
	f, err := os.Open(resolvConf)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("no --upstream and cannot read %s: %w", resolvConf, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil && a.Zone() == "" {
				return netip.AddrPortFrom(a.Unmap(), 53), nil
			}
		}
	}
	return netip.AddrPort{}, fmt.Errorf("no --upstream and no usable nameserver in %s", resolvConf)
}

// parseDNSServers reads the comma-separated list of the sandbox's DNS servers: IPv4
// addresses (the redirect to the second proxy is IPv4), none loopback, since Docker asks
// a loopback server from the host's namespace, where no rule of the sandbox applies.
func parseDNSServers(list string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Unmap().Is4() {
			return nil, fmt.Errorf("%q is not an IPv4 address", s)
		}
		a = a.Unmap()
		if a.IsLoopback() || a.IsUnspecified() {
			return nil, fmt.Errorf("%s is not a DNS server's address", a)
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out, nil
}

// parsePlatformDeny turns the comma-separated list into deny rules.
func parsePlatformDeny(list string) ([]Rule, error) {
	var rules []Rule
	for i, t := range strings.Split(list, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		n, err := NormalizeTarget(t)
		if err != nil {
			return nil, fmt.Errorf("entry %s: %w", strconv.Itoa(i), err)
		}
		rules = append(rules, Rule{Action: ActionDeny, Target: n})
	}
	return rules, nil
}

func loadInitialPolicy(path string, maxRules int) (Policy, error) {
	var data []byte
	switch {
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			return Policy{}, fmt.Errorf("read --policy-file: %w", err)
		}
		data = b
	default:
		data = []byte(os.Getenv(EnvPolicy))
	}
	p, err := ParsePolicy(data, maxRules)
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			return Policy{}, fmt.Errorf("initial policy: %w", err)
		}
		return Policy{}, err
	}
	return p, nil
}
