package egress

// The vault proxy: the nat chain sends TCP for a bound host's address on a bound port
// here (127.0.0.1, --vault-listen), whether or not the workload asked DNS for it (the
// enforcer resolves bound hosts itself: vaultresolve.go). It reads the original destination from conntrack
// (SO_ORIGINAL_DST) and peeks at the first bytes:
//
//   - TLS whose SNI a binding names, to an address that host resolved to: the TLS is
//     terminated with a leaf certificate for that host signed by the sandbox's CA (the
//     workload trusts it; the CA key lives only here), each request is matched against
//     the bindings (exactly one match injects, two or more refuse, none passes through
//     untouched), and sent upstream over TLS verified against the system roots plus
//     the operator's bundle (SANDGATE_VAULT_UPSTREAM_CA) for that same host.
//   - any other TLS (an address shared with an unbound host): spliced to the original
//     destination byte for byte, never terminated.
//   - plaintext HTTP (a binding with scheme http): proxied request by request over
//     upstream connections kept per destination address, with injection only when the
//     Host resolved to the destination.
//
// Bindings match the path as the workload sent it. A path the upstream may read as
// another once it normalises it (a dot segment, an encoded dot, slash or backslash:
// ambiguousPath) is refused with 400 VAULT::AMBIGUOUS_PATH, before any binding is
// matched, whenever a binding names the request's scheme, host, port and method; it is
// never normalised here, so the upstream gets what the workload sent or nothing.
//
// Secret values are redacted from response headers. Each injection is logged as an
// audit record (binding, host, method, path, status), never with the value.

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"
	"golang.org/x/sys/unix"
)

// Environment of a sandbox with the credential proxy (set by the runtime, read once).
const (
	EnvVaultCACert     = "SANDGATE_VAULT_CA_CERT"     // PEM: the sandbox's CA certificate
	EnvVaultCAKey      = "SANDGATE_VAULT_CA_KEY"      // PEM: its private key (sidecar only)
	EnvVaultUpstreamCA = "SANDGATE_VAULT_UPSTREAM_CA" // PEM: extra roots for upstream TLS
)

// DefaultVaultPort is where the vault proxy listens on 127.0.0.1.
const DefaultVaultPort = 15443

type vaultProxy struct {
	enf     *enforcer
	ca      *x509.Certificate
	caKey   crypto.Signer
	leafKey *ecdsa.PrivateKey
	leaves  sync.Map // host -> *tls.Certificate
	roots   *x509.CertPool
	dialer  *net.Dialer
	client  *http.Transport
	log     *slog.Logger

	auditMu      sync.Mutex
	audit        []VaultAuditRecord // oldest first, at most maxVaultAudit
	auditDropped int
}

// VaultAuditRecord is one injection, as the gateway drains it into the tenant's audit
// stream (and the enforcer logs it): never a value.
type VaultAuditRecord struct {
	Time    time.Time `json:"time"`
	Binding string    `json:"binding"`
	Host    string    `json:"host"`
	Method  string    `json:"method"`
	Path    string    `json:"path"`
	Status  int       `json:"status"`
}

// maxVaultAudit bounds the records kept until the gateway drains them; older ones are
// dropped (and counted), the enforcer's log keeps every one.
const maxVaultAudit = 1000

func (p *vaultProxy) record(rec VaultAuditRecord) {
	p.auditMu.Lock()
	defer p.auditMu.Unlock()
	if len(p.audit) >= maxVaultAudit {
		p.audit = p.audit[1:]
		p.auditDropped++
	}
	p.audit = append(p.audit, rec)
}

// drainAudit returns and forgets the records kept so far.
func (p *vaultProxy) drainAudit() ([]VaultAuditRecord, int) {
	p.auditMu.Lock()
	defer p.auditMu.Unlock()
	out, dropped := p.audit, p.auditDropped
	p.audit, p.auditDropped = nil, 0
	if out == nil {
		out = []VaultAuditRecord{}
	}
	return out, dropped
}

// dstKey carries the original destination of an intercepted connection to the
// transport's dialers.
type dstKey struct{}

func newVaultProxy(enf *enforcer, caCertPEM, caKeyPEM, upstreamCA []byte, mark uint32, log *slog.Logger) (*vaultProxy, error) {
	pair, err := tls.X509KeyPair(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("credential proxy CA ($%s, $%s): %w", EnvVaultCACert, EnvVaultCAKey, err)
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || !ca.IsCA {
		return nil, fmt.Errorf("credential proxy CA: not a CA certificate")
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("credential proxy CA: key cannot sign")
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	useBundledRootsWhereNone()
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if len(bytes.TrimSpace(upstreamCA)) > 0 && !roots.AppendCertsFromPEM(upstreamCA) {
		return nil, fmt.Errorf("$%s holds no PEM certificate", EnvVaultUpstreamCA)
	}
	p := &vaultProxy{enf: enf, ca: ca, caKey: signer, leafKey: leafKey, roots: roots, log: log,
		dialer: &net.Dialer{Timeout: 10 * time.Second, Control: markControl(mark)}}
	p.client = &http.Transport{
		DialContext:           p.dialPlain,
		DialTLSContext:        p.dialTLS,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       60 * time.Second,
		ResponseHeaderTimeout: 120 * time.Second,
		DisableCompression:    true,
	}
	return p, nil
}

// useBundledRootsWhereNone gives upstream TLS the roots bundled with the binary when
// the sidecar's image has none (the agent image is one file); a system bundle, when
// there is one, wins. It is done when the credential proxy starts, not at every start
// of the binary: parsing the bundle takes milliseconds, and the agent starts in every
// sandbox and enforcer.
var useBundledRootsWhereNone = sync.OnceFunc(func() {
	pool := x509.NewCertPool()
	for root := range bundle.Roots() {
		cert, err := x509.ParseCertificate(root.Certificate)
		if err != nil {
			continue
		}
		if root.Constraint != nil {
			pool.AddCertWithConstraint(cert, root.Constraint)
		} else {
			pool.AddCert(cert)
		}
	}
	x509.SetFallbackRoots(pool)
})

// markControl sets SO_MARK, which lets the proxy's own connections past the redirect.
func markControl(mark uint32) func(_, _ string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, int(mark))
		}); err != nil {
			return err
		}
		return serr
	}
}

func (p *vaultProxy) dialPlain(ctx context.Context, _, _ string) (net.Conn, error) {
	dst, ok := ctx.Value(dstKey{}).(netip.AddrPort)
	if !ok {
		return nil, errors.New("no original destination")
	}
	return p.dialer.DialContext(ctx, "tcp", dst.String())
}

func (p *vaultProxy) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	c, err := p.dialPlain(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: p.roots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream TLS for %s: %w", host, err)
	}
	return tc, nil
}

// serve accepts intercepted connections at addr until ctx ends.
func (p *vaultProxy) serve(ctx context.Context, addr string) (wait func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for the credential proxy on %s: %w", addr, err)
	}
	done := make(chan struct{})
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.handleConn(c)
		}
	}()
	return func() { <-done }, nil
}

// originalDst reads the destination the workload connected to, before the redirect.
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("not a TCP connection")
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var dst netip.AddrPort
	var serr error
	if err := raw.Control(func(fd uintptr) {
		// The kernel writes a sockaddr_in; IPv6Mreq is merely a 20-byte buffer for it.
		m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = err
			return
		}
		b := m.Multiaddr
		dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), uint16(b[2])<<8|uint16(b[3]))
	}); err != nil {
		return netip.AddrPort{}, err
	}
	return dst, serr
}

// recordingConn is read by a throw-away TLS server that only wants the ClientHello;
// what it reads is kept so that it can be replayed.
type recordingConn struct {
	net.Conn
	r   io.Reader
	buf bytes.Buffer
}

func (c *recordingConn) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.buf.Write(b[:n])
	return n, err
}

func (c *recordingConn) Write(b []byte) (int, error) { return len(b), nil }

// prefixConn reads from r (replayed bytes, then the connection) and writes to Conn.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(b []byte) (int, error) { return c.r.Read(b) }

var errHelloSeen = errors.New("client hello seen")

func (p *vaultProxy) handleConn(c net.Conn) {
	dst, err := originalDst(c)
	if err != nil || !dst.IsValid() || dst.Addr().IsLoopback() {
		// A connection made to the proxy's own port: nothing to forward it to.
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	if err != nil {
		c.Close()
		return
	}
	if first[0] != 0x16 {
		_ = c.SetReadDeadline(time.Time{})
		p.serveHTTP(&prefixConn{Conn: c, r: br}, "http", "", dst)
		return
	}
	rec := &recordingConn{Conn: c, r: br}
	var sni string
	_ = tls.Server(rec, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni = strings.ToLower(strings.TrimSuffix(h.ServerName, "."))
		return nil, errHelloSeen
	}}).Handshake()
	_ = c.SetReadDeadline(time.Time{})
	replay := &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(rec.buf.Bytes()), br)}
	if sni == "" || !p.bound("https", sni, int(dst.Port())) || !p.enf.pinnedFor(dst.Addr(), sni) {
		p.splice(replay, dst)
		return
	}
	tc := tls.Server(replay, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.leaf(sni)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		p.log.Debug("vault: client TLS handshake failed", "host", sni, "err", err)
		tc.Close()
		return
	}
	p.serveHTTP(tc, "https", sni, dst)
}

// bound reports whether a binding could match some request to host on port.
func (p *vaultProxy) bound(scheme, host string, port int) bool {
	v := p.enf.vault.Load()
	if v == nil {
		return false
	}
	for _, b := range v.Bindings {
		if hostPortScheme(b.Match, scheme, host, port) {
			return true
		}
	}
	return false
}

func hostPortScheme(m BindingMatch, scheme, host string, port int) bool {
	okScheme, okPort, okHost := false, false, false
	for _, s := range m.Schemes {
		okScheme = okScheme || s == scheme
	}
	for _, pt := range m.Ports {
		okPort = okPort || pt == port
	}
	for _, h := range m.Hosts {
		okHost = okHost || hostMatches(h, host)
	}
	return okScheme && okPort && okHost
}

// splice relays an intercepted connection to its destination untouched.
func (p *vaultProxy) splice(c net.Conn, dst netip.AddrPort) {
	defer c.Close()
	up, err := p.dialer.Dial("tcp", dst.String())
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(up, c)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(c, up)
		if pc, ok := c.(*prefixConn); ok {
			if tc, ok := pc.Conn.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

// leaf returns a certificate for host signed by the sandbox's CA, cached.
func (p *vaultProxy) leaf(host string) (*tls.Certificate, error) {
	if v, ok := p.leaves.Load(host); ok {
		if c := v.(*tls.Certificate); time.Until(c.Leaf.NotAfter) > time.Hour {
			return c, nil
		}
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	notAfter := time.Now().Add(7 * 24 * time.Hour)
	if notAfter.After(p.ca.NotAfter) {
		notAfter = p.ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &p.leafKey.PublicKey, p.caKey)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, p.ca.Raw}, PrivateKey: p.leafKey, Leaf: leaf}
	p.leaves.Store(host, c)
	return c, nil
}

// oneConn is a listener that yields one connection, then waits for it to close.
type oneConn struct {
	c    net.Conn
	once sync.Once
	done chan struct{}
}

func (l *oneConn) Accept() (net.Conn, error) {
	var c net.Conn
	l.once.Do(func() { c = l.c })
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}
func (l *oneConn) Close() error   { return nil }
func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }

// serveHTTP serves the requests of one intercepted connection.
func (p *vaultProxy) serveHTTP(c net.Conn, scheme, sni string, dst netip.AddrPort) {
	l := &oneConn{c: c, done: make(chan struct{})}
	var closeOnce sync.Once
	srv := &http.Server{
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.forward(w, r, scheme, sni, dst)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				closeOnce.Do(func() { close(l.done) })
			}
		},
	}
	_ = srv.Serve(l)
}

// hopHeaders are connection-scoped and never forwarded.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *vaultProxy) refuse(w http.ResponseWriter, status int, code, msg string) {
	writeError(w, status, code, msg)
}

// forward sends one request upstream, with the headers of the one binding it matches.
func (p *vaultProxy) forward(w http.ResponseWriter, r *http.Request, scheme, sni string, dst netip.AddrPort) {
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(host, ".")
	if scheme == "https" && host != sni {
		p.refuse(w, http.StatusMisdirectedRequest, CodeVaultHostMismatch, "the Host header names another host than the TLS server name")
		return
	}
	v := p.enf.vault.Load()
	port := int(dst.Port())
	req := vaultRequest{scheme: scheme, host: host, port: port, method: r.Method, path: r.URL.Path}
	if ambiguousPath(r.URL.EscapedPath(), r.URL.Path) && v.namedAllButPath(req) {
		p.log.Warn("vault refused a request whose path the upstream may read as another", "host", host, "method", r.Method, "path", r.URL.EscapedPath())
		p.refuse(w, http.StatusBadRequest, CodeVaultAmbiguousPath, "the request path has a dot segment or an encoded dot, slash or backslash, which the server may read as another path than the one credential bindings are matched against; send the path normalised")
		return
	}
	matched := v.matching(req)
	if len(matched) > 1 {
		names := make([]string, len(matched))
		for i, b := range matched {
			names[i] = b.Name
		}
		p.log.Warn("vault refused a request that matches several bindings", "bindings", strings.Join(names, ","), "host", host, "method", r.Method, "path", r.URL.Path)
		p.refuse(w, http.StatusForbidden, CodeVaultAmbiguous, "the request matches more than one credential binding ("+strings.Join(names, ", ")+"); the vault never guesses")
		return
	}
	if len(matched) == 1 && scheme == "http" && !p.enf.pinnedFor(dst.Addr(), host) {
		// Plain HTTP has no certificate: the Host header alone must not steer a
		// credential to an address that host never resolved to.
		p.refuse(w, http.StatusForbidden, CodeVaultHostMismatch, "the Host header does not resolve to the address this request was sent to")
		return
	}
	out := r.Clone(context.WithValue(r.Context(), dstKey{}, dst))
	out.RequestURI = ""
	out.URL.Scheme = scheme
	out.URL.Host = net.JoinHostPort(host, strconv.Itoa(port))
	if scheme == "http" {
		// The transport keeps idle connections per URL host. Over TLS a connection
		// is verified for its host, whatever address it went to; in plain HTTP only
		// the address tells one upstream from another, so connections are kept per
		// address: a request that may be injected never rides one opened for another
		// address under the same Host.
		out.URL.Host = dst.String()
	}
	out.Host = r.Host
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	if r.ContentLength == 0 {
		out.Body = nil
	}
	if len(matched) == 1 {
		for _, kv := range v.headers(matched[0]) {
			out.Header.Del(kv[0])
			out.Header.Set(kv[0], kv[1])
		}
	}
	resp, err := p.client.RoundTrip(out)
	if err != nil {
		p.log.Warn("vault upstream failed", "host", host, "err", redact(err.Error(), v.secrets()))
		p.refuse(w, http.StatusBadGateway, CodeVaultUpstreamError, "the upstream server could not be reached or failed TLS verification")
		return
	}
	defer resp.Body.Close()
	secrets := v.secrets()
	for k, vals := range resp.Header {
		if containsFold(hopHeaders, k) {
			continue
		}
		for _, val := range vals {
			w.Header().Add(k, redact(val, secrets))
		}
	}
	w.WriteHeader(resp.StatusCode)
	if len(matched) == 1 {
		p.log.Info("vault injection", "audit", true, "binding", matched[0].Name, "host", host, "method", r.Method, "path", r.URL.Path, "status", resp.StatusCode)
		p.record(VaultAuditRecord{Time: time.Now().UTC(), Binding: matched[0].Name, Host: host, Method: r.Method, Path: r.URL.Path, Status: resp.StatusCode})
	}
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// redact replaces every secret in s.
func redact(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "[REDACTED]")
		}
	}
	return s
}
