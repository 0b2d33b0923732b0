package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// dnsProxy answers every DNS query of the sandbox (nftables redirects port 53 to it):
// denied names get NXDOMAIN, allowed ones are forwarded upstream and their A/AAAA
// answers pinned into nftables before the reply is sent, so the workload's connect
// that follows its lookup is already allowed.
//
// The enforcer runs two: the main one, whose upstream is the sandbox's resolver (on
// Docker the embedded one at 127.0.0.11), and, when the sandbox's DNS servers are
// known, one for the queries sent to those servers (Docker's embedded resolver
// forwards there from inside the sandbox's namespace), whose upstreams are the servers
// themselves, asked in order until one answers.
type dnsProxy struct {
	enf       *enforcer
	upstreams []string
	udp       *dns.Client
	tcp       *dns.Client
	log       *slog.Logger
	// idle keeps connected, marked UDP sockets to the first upstream for reuse: a new
	// socket per query (socket, setsockopt, connect, close) is a measurable part of
	// the proxy's cost. Queries carry fresh random IDs, and the client skips replies
	// whose ID does not match, so a late answer cannot be taken for another query's.
	idle chan *dns.Conn
}

func newDNSProxy(enf *enforcer, upstreams []netip.AddrPort, mark uint32, log *slog.Logger) *dnsProxy {
	dialer := func() *net.Dialer {
		return &net.Dialer{
			Timeout: 2 * time.Second,
			// The mark is what lets these queries past the redirect and the drop
			// rules; setting it needs CAP_NET_ADMIN, which the workload lacks.
			Control: func(_, _ string, c syscall.RawConn) error {
				var serr error
				if err := c.Control(func(fd uintptr) {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, int(mark))
				}); err != nil {
					return err
				}
				if serr != nil {
					return fmt.Errorf("set SO_MARK on upstream socket: %w", serr)
				}
				return nil
			},
		}
	}
	addrs := make([]string, len(upstreams))
	for i, u := range upstreams {
		addrs[i] = u.String()
	}
	return &dnsProxy{
		enf:       enf,
		upstreams: addrs,
		udp:       &dns.Client{Net: "udp", Dialer: dialer(), Timeout: 3 * time.Second, UDPSize: dns.DefaultMsgSize},
		tcp:       &dns.Client{Net: "tcp", Dialer: dialer(), Timeout: 5 * time.Second},
		log:       log,
		idle:      make(chan *dns.Conn, 16),
	}
}

// exchange forwards req to the upstreams in order until one answers.
func (p *dnsProxy) exchange(ctx context.Context, req *dns.Msg, overTCP bool) (resp *dns.Msg, err error) {
	for i, upstream := range p.upstreams {
		if resp, err = p.exchangeWith(ctx, req, overTCP, upstream, i == 0); err == nil || ctx.Err() != nil {
			return resp, err
		}
	}
	return nil, err
}

// exchangeWith forwards req to upstream over the client's transport, reusing an idle
// UDP socket when pooled and there is one.
func (p *dnsProxy) exchangeWith(ctx context.Context, req *dns.Msg, overTCP bool, upstream string, pooled bool) (*dns.Msg, error) {
	if overTCP {
		resp, _, err := p.tcp.ExchangeContext(ctx, req, upstream)
		return resp, err
	}
	var conn *dns.Conn
	if pooled {
		select {
		case conn = <-p.idle:
		default:
		}
	}
	if conn == nil {
		c, err := p.udp.DialContext(ctx, upstream)
		if err != nil {
			return nil, err
		}
		conn = c
	}
	resp, _, err := p.udp.ExchangeWithConnContext(ctx, req, conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if !pooled {
		conn.Close()
		return resp, nil
	}
	select {
	case p.idle <- conn:
	default:
		conn.Close()
	}
	return resp, nil
}

// ServeDNS implements dns.Handler.
func (p *dnsProxy) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	if len(req.Question) != 1 || req.Opcode != dns.OpcodeQuery {
		p.reply(w, req, dns.RcodeFormatError)
		return
	}
	name := normalizeName(req.Question[0].Name)
	if !p.enf.allowName(name) {
		p.log.Debug("dns denied", "name", name)
		deniedQueries.Add(1)
		p.reply(w, req, dns.RcodeNameError)
		return
	}
	_, overTCP := w.RemoteAddr().(*net.TCPAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	clientID := req.Id
	req.Id = dns.Id()
	resp, err := p.exchange(ctx, req, overTCP)
	req.Id = clientID
	if err != nil {
		p.log.Warn("dns upstream failed", "name", name, "upstreams", p.upstreams, "err", err)
		p.reply(w, req, dns.RcodeServerFailure)
		return
	}
	if err := p.enf.pinAnswer(name, answerAddrs(resp)); err != nil {
		// Fail closed: an answer the workload could not use must not be sent.
		p.log.Error("dns pin failed", "name", name, "err", err)
		p.reply(w, req, dns.RcodeServerFailure)
		return
	}
	resp.Id = req.Id
	if err := w.WriteMsg(resp); err != nil && !errors.Is(err, net.ErrClosed) {
		p.log.Debug("dns write failed", "err", err)
	}
}

func (p *dnsProxy) reply(w dns.ResponseWriter, req *dns.Msg, rcode int) {
	m := new(dns.Msg)
	m.SetRcode(req, rcode)
	m.RecursionAvailable = true
	_ = w.WriteMsg(m)
}

// answerAddrs collects every A and AAAA record of the answer section, CNAME targets'
// included: the workload connects to whatever the chain ends in.
func answerAddrs(m *dns.Msg) []dnsAddr {
	var out []dnsAddr
	for _, rr := range m.Answer {
		var ip net.IP
		switch r := rr.(type) {
		case *dns.A:
			ip = r.A
		case *dns.AAAA:
			ip = r.AAAA
		default:
			continue
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		out = append(out, dnsAddr{addr: a.Unmap(), ttl: time.Duration(rr.Header().Ttl) * time.Second})
	}
	return out
}

// serve runs the proxy on UDP and TCP at addr until ctx ends. It returns once both
// listeners are bound (or with the bind error), so the caller can report readiness.
func (p *dnsProxy) serve(ctx context.Context, addr string) (wait func(), err error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for DNS on udp %s: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("listen for DNS on tcp %s: %w", addr, err)
	}
	udpSrv := &dns.Server{PacketConn: pc, Handler: p}
	tcpSrv := &dns.Server{Listener: ln, Handler: p, ReadTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }}
	done := make(chan struct{}, 2)
	for _, s := range []*dns.Server{udpSrv, tcpSrv} {
		// Wait until each server runs: Shutdown on a server not yet started fails and
		// would leave it serving.
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() {
			defer func() { done <- struct{}{} }()
			if err := s.ActivateAndServe(); err != nil {
				p.log.Error("dns server stopped", "err", err)
			}
		}()
		<-started
	}
	go func() {
		<-ctx.Done()
		_ = udpSrv.Shutdown()
		_ = tcpSrv.Shutdown()
	}()
	return func() { <-done; <-done }, nil
}
