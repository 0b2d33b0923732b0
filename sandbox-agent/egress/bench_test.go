package egress

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// benchLookups sends b.N queries for name over one UDP socket of the sandbox
// namespace to server and checks each answer's rcode.
func benchLookups(b *testing.B, top *topology, server, name string, wantRcode int) {
	b.Helper()
	err := inNetns(top.sandbox, func() error {
		nc, err := net.Dial("udp", server)
		if err != nil {
			return err
		}
		conn := &dns.Conn{Conn: nc}
		defer conn.Close()
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(name), dns.TypeA)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			q.Id = dns.Id()
			_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
			if err := conn.WriteMsg(q); err != nil {
				return err
			}
			resp, err := conn.ReadMsg()
			if err != nil {
				return err
			}
			// No b.Fatal here: it would end this goroutine, not the benchmark's.
			if resp.Id != q.Id || resp.Rcode != wantRcode {
				return fmt.Errorf("answer id %d rcode %s, want id %d rcode %s", resp.Id, dns.RcodeToString[resp.Rcode], q.Id, dns.RcodeToString[wantRcode])
			}
		}
		b.StopTimer()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDNSLookup compares a lookup straight to the upstream resolver (baseline,
// no enforcer) with the same lookup through the proxy (redirected, filtered,
// forwarded with a marked socket, answer pinned), and with a denied name the proxy
// answers itself.
func BenchmarkDNSLookup(b *testing.B) {
	top := newTopology(b)
	b.Run("direct_upstream", func(b *testing.B) {
		benchLookups(b, top, dnsServerIP+":53", "allowed.test", dns.RcodeSuccess)
	})
	benchPolicy := strings.Replace(basePolicy, `"egress":[`, `"egress":[{"action":"allow","target":"*.bench.test"},`, 1)
	top.startEnforcer(b, []string{EnvPolicy + "=" + benchPolicy}, "--log-level", "info")
	b.Run("through_proxy_allowed", func(b *testing.B) {
		benchLookups(b, top, dnsServerIP+":53", "allowed.test", dns.RcodeSuccess)
	})
	b.Run("through_proxy_denied", func(b *testing.B) {
		benchLookups(b, top, dnsServerIP+":53", "denied.test", dns.RcodeNameError)
	})
	// Every lookup is a new name with a new address, so every answer costs a netlink
	// write into the pinned set before it is sent.
	b.Run("through_proxy_new_pin", func(b *testing.B) {
		err := inNetns(top.sandbox, func() error {
			nc, err := net.Dial("udp", dnsServerIP+":53")
			if err != nil {
				return err
			}
			conn := &dns.Conn{Conn: nc}
			defer conn.Close()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				q := new(dns.Msg)
				q.SetQuestion(fmt.Sprintf("n%d.bench.test.", benchPinSeq), dns.TypeA)
				benchPinSeq++
				_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
				if err := conn.WriteMsg(q); err != nil {
					return err
				}
				resp, err := conn.ReadMsg()
				if err != nil {
					return err
				}
				if resp.Id != q.Id || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
					return fmt.Errorf("n%d.bench.test: %v", benchPinSeq-1, resp)
				}
			}
			b.StopTimer()
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	})
}

// benchPinSeq numbers the names of through_proxy_new_pin across its runs, so no
// address is pinned twice.
var benchPinSeq int

// benchConnects opens and resets b.N TCP connections from the sandbox namespace to
// addr (SO_LINGER 0, so no TIME_WAIT piles up).
func benchConnects(b *testing.B, top *topology, addr string) {
	b.Helper()
	err := inNetns(top.sandbox, func() error {
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				return err
			}
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
		}
		b.StopTimer()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkTCPConnect compares connecting to an allowed address without the
// enforcer (baseline) and with its rules, for an address allowed by a CIDR rule
// (interval set) and one allowed by a pinned DNS answer (timeout set).
func BenchmarkTCPConnect(b *testing.B) {
	top := newTopology(b)
	b.Run("no_rules", func(b *testing.B) {
		benchConnects(b, top, net.JoinHostPort(cidrInIP, "80"))
	})
	top.startEnforcer(b, []string{EnvPolicy + "=" + basePolicy}, "--log-level", "info")
	b.Run("enforcer_cidr_allow", func(b *testing.B) {
		benchConnects(b, top, net.JoinHostPort(cidrInIP, "80"))
	})
	if ip, _ := top.resolve(b, "allowed.test"); ip != allowedIP {
		b.Fatalf("allowed.test = %q", ip)
	}
	b.Run("enforcer_dns_pinned", func(b *testing.B) {
		benchConnects(b, top, net.JoinHostPort(allowedIP, "80"))
	})
}
