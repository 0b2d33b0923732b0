package egress

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
)

func TestParsePolicyNormalizes(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Policy
	}{
		{"empty_is_deny_all", ``, Policy{DefaultAction: "deny", Egress: []Rule{}}},
		{"null_is_deny_all", `null`, Policy{DefaultAction: "deny", Egress: []Rule{}}},
		{"object_is_deny_all", `{}`, Policy{DefaultAction: "deny", Egress: []Rule{}}},
		{"allow_default", `{"defaultAction":"allow"}`, Policy{DefaultAction: "allow", Egress: []Rule{}}},
		{"name_lowercased_trailing_dot_dropped", `{"egress":[{"action":"allow","target":"Api.Example.COM."}]}`,
			Policy{DefaultAction: "deny", Egress: []Rule{{"allow", "api.example.com"}}}},
		{"wildcard", `{"egress":[{"action":"deny","target":"*.Example.com"}]}`,
			Policy{DefaultAction: "deny", Egress: []Rule{{"deny", "*.example.com"}}}},
		{"ipv4", `{"egress":[{"action":"allow","target":"1.2.3.4"}]}`,
			Policy{DefaultAction: "deny", Egress: []Rule{{"allow", "1.2.3.4"}}}},
		{"cidr_masked", `{"egress":[{"action":"allow","target":"10.1.2.3/8"}]}`,
			Policy{DefaultAction: "deny", Egress: []Rule{{"allow", "10.0.0.0/8"}}}},
		{"ipv6_canonical", `{"egress":[{"action":"allow","target":"2001:DB8:0::1"}]}`,
			Policy{DefaultAction: "deny", Egress: []Rule{{"allow", "2001:db8::1"}}}},
		{"mapped_ipv4_unmapped", `{"egress":[{"action":"allow","target":"::ffff:1.2.3.4"}]}`,
			Policy{DefaultAction: "deny", Egress: []Rule{{"allow", "1.2.3.4"}}}},
		{"single_label_and_underscore", `{"egress":[{"action":"allow","target":"_svc.internal"},{"action":"allow","target":"localhost"}]}`,
			Policy{DefaultAction: "deny", Egress: []Rule{{"allow", "_svc.internal"}, {"allow", "localhost"}}}},
		{"full_length_cidr_is_an_address", `{"egress":[{"action":"allow","target":"1.2.3.4/32"}]}`,
			Policy{DefaultAction: "deny", Egress: []Rule{{"allow", "1.2.3.4"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePolicy([]byte(tt.in), DefaultMaxRules)
			if err != nil {
				t.Fatalf("ParsePolicy(%s): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("ParsePolicy(%s) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParsePolicyRejects(t *testing.T) {
	rule := func(action, target string) string {
		return fmt.Sprintf(`{"egress":[{"action":%q,"target":%q}]}`, action, target)
	}
	var many []string
	for i := 0; i < 4; i++ {
		many = append(many, fmt.Sprintf(`{"action":"allow","target":"h%d.test"}`, i))
	}
	tests := []struct {
		name    string
		in      string
		wantMsg string
	}{
		{"bare_wildcard", rule("allow", "*."), `egress[0]: target "*.": wildcard "*." needs a domain after it`},
		{"star", rule("allow", "*"), `egress[0]: target "*": "*" alone is not a target`},
		{"inner_wildcard", rule("allow", "a.*.com"), `a wildcard is only allowed as a leading "*." label`},
		{"double_wildcard", rule("allow", "*.*.com"), `label "*" has invalid character '*'`},
		{"url", rule("allow", "http://x"), `egress[0]: target "http://x": a URL is not a target`},
		{"bad_ipv4", rule("allow", "300.1.1.1"), `egress[0]: target "300.1.1.1": invalid IPv4 address`},
		{"short_ipv4", rule("allow", "1.2.3"), `invalid IPv4 address`},
		{"prefix_too_long", rule("allow", "10.0.0.0/33"), `egress[0]: target "10.0.0.0/33": prefix length 33 exceeds 32 for IPv4`},
		{"ipv6_prefix_too_long", rule("allow", "2001:db8::/129"), `prefix length 129 exceeds 128 for IPv6`},
		{"negative_prefix", rule("allow", "10.0.0.0/-1"), `invalid prefix length "-1"`},
		{"empty_prefix", rule("allow", "10.0.0.0/"), `invalid prefix length ""`},
		{"bad_cidr_address", rule("allow", "10.0.0/8"), `invalid address "10.0.0" in CIDR block`},
		{"unknown_action", rule("permit", "a.test"), `egress[0]: action "permit" is not "allow" or "deny"`},
		{"unknown_default", `{"defaultAction":"block"}`, `defaultAction "block" is not "allow" or "deny"`},
		{"empty_target", rule("allow", ""), `target is empty`},
		{"port", rule("allow", "example.com:443"), `a host name must not carry a port`},
		{"zone", rule("allow", "fe80::1%eth0"), `an IPv6 zone is not allowed`},
		{"space", rule("allow", "ex ample.com"), `target contains whitespace`},
		{"empty_label", rule("allow", "a..b"), `name has an empty label`},
		{"hyphen", rule("allow", "-a.com"), `label "-a" starts or ends with a hyphen`},
		{"long_label", rule("allow", strings.Repeat("a", 64)+".com"), `is longer than 63 bytes`},
		{"numeric_tld", rule("allow", "host.123"), `top-level label "123" is all digits`},
		{"unknown_field", `{"egress":[{"action":"allow","target":"a.test","port":1}]}`, `unknown field "port"`},
		{"not_json", `{"egress":`, `policy is not valid JSON`},
		{"trailing_data", `{} {}`, `trailing data`},
		{"too_many_rules", `{"egress":[` + strings.Join(many, ",") + `]}`, `egress has 4 rules; the limit is 3`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePolicy([]byte(tt.in), 3)
			if err == nil {
				t.Fatalf("ParsePolicy(%s) succeeded, want error containing %q", tt.in, tt.wantMsg)
			}
			if _, ok := err.(*ValidationError); !ok {
				t.Errorf("error %T is not a *ValidationError", err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("ParsePolicy(%s) = %q, want it to contain %q", tt.in, err, tt.wantMsg)
			}
		})
	}
}

func TestAllowName(t *testing.T) {
	tests := []struct {
		name   string
		policy string
		query  string
		want   bool
	}{
		{"exact_allowed", `{"egress":[{"action":"allow","target":"example.com"}]}`, "example.com", true},
		{"exact_does_not_admit_subdomain", `{"egress":[{"action":"allow","target":"example.com"}]}`, "a.example.com", false},
		{"wildcard_admits_subdomain", `{"egress":[{"action":"allow","target":"*.example.com"}]}`, "a.example.com", true},
		{"wildcard_admits_deep_subdomain", `{"egress":[{"action":"allow","target":"*.example.com"}]}`, "a.b.example.com", true},
		{"wildcard_not_apex", `{"egress":[{"action":"allow","target":"*.example.com"}]}`, "example.com", false},
		{"wildcard_not_suffix_lookalike", `{"egress":[{"action":"allow","target":"*.example.com"}]}`, "badexample.com", false},
		{"first_match_wins_deny", `{"egress":[{"action":"deny","target":"bad.example.com"},{"action":"allow","target":"*.example.com"}]}`, "bad.example.com", false},
		{"first_match_wins_allow", `{"egress":[{"action":"allow","target":"*.example.com"},{"action":"deny","target":"bad.example.com"}]}`, "bad.example.com", true},
		{"default_deny", `{"egress":[{"action":"allow","target":"a.test"}]}`, "b.test", false},
		{"default_allow", `{"defaultAction":"allow","egress":[{"action":"deny","target":"a.test"}]}`, "b.test", true},
		{"default_allow_denied_name", `{"defaultAction":"allow","egress":[{"action":"deny","target":"a.test"}]}`, "a.test", false},
		{"ip_rules_do_not_match_names", `{"egress":[{"action":"allow","target":"0.0.0.0/0"}]}`, "a.test", false},
		{"query_normalized", `{"egress":[{"action":"allow","target":"example.com"}]}`, normalizeName("EXAMPLE.com."), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePolicy([]byte(tt.policy), DefaultMaxRules)
			if err != nil {
				t.Fatal(err)
			}
			if got := compileRules(nil, p).allowName(tt.query); got != tt.want {
				t.Fatalf("allowName(%q) = %v, want %v", tt.query, got, tt.want)
			}
		})
	}
}

func TestPlatformDenyComesFirst(t *testing.T) {
	platform, err := parsePlatformDeny("169.254.169.254, metadata.google.internal")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := ParsePolicy([]byte(`{"defaultAction":"allow","egress":[{"action":"allow","target":"169.254.0.0/16"},{"action":"allow","target":"metadata.google.internal"}]}`), 10)
	rs := compileRules(platform, p)
	if rs.allowName("metadata.google.internal") {
		t.Error("platform-denied name allowed")
	}
	if allow, matched := rs.addrVerdict(netip.MustParseAddr("169.254.169.254")); allow || !matched {
		t.Errorf("platform-denied address: allow=%v matched=%v", allow, matched)
	}
	if allow, _ := rs.addrVerdict(netip.MustParseAddr("169.254.1.1")); !allow {
		t.Error("rest of the sandbox's allowed CIDR not allowed")
	}
	if _, err := parsePlatformDeny("10.0.0.0/33"); err == nil {
		t.Error("bad platform deny accepted")
	}
}

func TestIPRulesFirstMatchWins(t *testing.T) {
	tests := []struct {
		name    string
		rules   string
		addr    string
		allow   bool
		matched bool
	}{
		{"deny_before_allow_inside", `[{"action":"deny","target":"198.18.0.0/24"},{"action":"allow","target":"198.18.0.0/16"}]`, "198.18.0.5", false, true},
		{"deny_before_allow_outside", `[{"action":"deny","target":"198.18.0.0/24"},{"action":"allow","target":"198.18.0.0/16"}]`, "198.18.1.5", true, true},
		{"allow_before_deny", `[{"action":"allow","target":"198.18.0.0/16"},{"action":"deny","target":"198.18.0.0/24"}]`, "198.18.0.5", true, true},
		{"hole_punched", `[{"action":"allow","target":"198.18.0.10"},{"action":"deny","target":"198.18.0.0/24"}]`, "198.18.0.10", true, true},
		{"hole_neighbour_denied", `[{"action":"allow","target":"198.18.0.10"},{"action":"deny","target":"198.18.0.0/24"}]`, "198.18.0.11", false, true},
		{"unmatched", `[{"action":"allow","target":"198.18.0.0/24"}]`, "198.19.0.1", false, false},
		{"everything", `[{"action":"deny","target":"0.0.0.0/0"}]`, "255.255.255.255", false, true},
		{"ipv6", `[{"action":"deny","target":"2001:db8::1"},{"action":"allow","target":"2001:db8::/32"}]`, "2001:db8::1", false, true},
		{"ipv6_rest", `[{"action":"deny","target":"2001:db8::1"},{"action":"allow","target":"2001:db8::/32"}]`, "2001:db8::2", true, true},
		{"families_apart", `[{"action":"deny","target":"::/0"}]`, "1.2.3.4", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePolicy([]byte(`{"egress":`+tt.rules+`}`), 10)
			if err != nil {
				t.Fatal(err)
			}
			rs := compileRules(nil, p)
			allow, matched := rs.addrVerdict(netip.MustParseAddr(tt.addr))
			if allow != tt.allow || matched != tt.matched {
				t.Fatalf("addrVerdict(%s) = %v,%v want %v,%v", tt.addr, allow, matched, tt.allow, tt.matched)
			}
			for _, pair := range [][2][]addrRange{{rs.allow4, rs.deny4}, {rs.allow6, rs.deny6}} {
				for _, a := range pair[0] {
					for _, d := range pair[1] {
						if a.from.Compare(d.to) <= 0 && d.from.Compare(a.to) <= 0 {
							t.Fatalf("allow %v overlaps deny %v", a, d)
						}
					}
				}
			}
		})
	}
}

func TestIntervalElements(t *testing.T) {
	r := func(from, to string) addrRange {
		return addrRange{netip.MustParseAddr(from), netip.MustParseAddr(to)}
	}
	el := func(ip string, end bool) nftables.SetElement {
		return nftables.SetElement{Key: netip.MustParseAddr(ip).AsSlice(), IntervalEnd: end}
	}
	tests := []struct {
		name   string
		ranges []addrRange
		want   []nftables.SetElement
	}{
		{"empty", nil, nil},
		{"one_range", []addrRange{r("198.18.0.0", "198.18.0.255")},
			[]nftables.SetElement{el("0.0.0.0", true), el("198.18.0.0", false), el("198.18.1.0", true)}},
		{"from_zero", []addrRange{r("0.0.0.0", "0.255.255.255")},
			[]nftables.SetElement{el("0.0.0.0", false), el("1.0.0.0", true)}},
		{"to_top", []addrRange{r("198.19.0.0", "255.255.255.255")},
			[]nftables.SetElement{el("0.0.0.0", true), el("198.19.0.0", false)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, intervalElements(tt.ranges, 4)); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestMergeAndRemove(t *testing.T) {
	existing := []Rule{{"allow", "a.test"}, {"deny", "b.test"}, {"allow", "10.0.0.0/8"}}
	got := MergeRules(existing, []Rule{{"allow", "b.test"}, {"allow", "c.test"}})
	want := []Rule{{"allow", "b.test"}, {"allow", "c.test"}, {"allow", "a.test"}, {"allow", "10.0.0.0/8"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("MergeRules (-want +got):\n%s", diff)
	}
	target, err := NormalizeTarget("10.1.1.1/8")
	if err != nil {
		t.Fatal(err)
	}
	left, n := RemoveTargets(got, []string{target, "nothere.test"})
	if n != 1 || len(left) != 3 {
		t.Fatalf("RemoveTargets removed %d, left %v", n, left)
	}
}

func TestMode(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		want string
	}{
		{"deny_all", Policy{DefaultAction: "deny"}, "deny_all"},
		{"allow_all", Policy{DefaultAction: "allow"}, "allow_all"},
		{"enforcing", Policy{DefaultAction: "allow", Egress: []Rule{{"deny", "a.test"}}}, "enforcing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Mode(); got != tt.want {
				t.Fatalf("Mode() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestResolveUpstream(t *testing.T) {
	dir := t.TempDir()
	conf := dir + "/resolv.conf"
	if err := writeFile(conf, "# docker\nsearch example\nnameserver fe80::1%eth0\nnameserver 127.0.0.11\nnameserver 9.9.9.9\noptions ndots:0\n"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		flag string
		file string
		want string
	}{
		{"from_resolv_conf", "", conf, "127.0.0.11:53"},
		{"flag_ip_port", "198.18.0.1:5353", conf, "198.18.0.1:5353"},
		{"flag_ip", "198.18.0.1", conf, "198.18.0.1:53"},
		{"flag_ipv6", "[2001:db8::1]:53", conf, "[2001:db8::1]:53"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolveUpstream(tt.flag, tt.file)
			if err != nil || got.String() != tt.want {
				t.Fatalf("resolveUpstream = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
	if _, err := resolveUpstream("", dir+"/missing"); err == nil {
		t.Error("missing resolv.conf accepted")
	}
	if _, err := resolveUpstream("dns.example:53", conf); err == nil {
		t.Error("host name upstream accepted")
	}
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }

func TestMergeRulesFirstDuplicateInPatchWins(t *testing.T) {
	got := MergeRules([]Rule{{"allow", "a.test"}}, []Rule{{"deny", "b.test"}, {"allow", "b.test"}, {"deny", "a.test"}, {"allow", "a.test"}})
	want := []Rule{{"deny", "b.test"}, {"deny", "a.test"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("MergeRules (-want +got):\n%s", diff)
	}
}

func TestReverseLookups(t *testing.T) {
	rs := compileRules([]Rule{{"deny", "8.8.4.0/24"}}, Policy{DefaultAction: ActionAllow})
	deny := compileRules(nil, Policy{DefaultAction: ActionDeny, Egress: []Rule{{"allow", "1.1.1.1"}}})
	tests := []struct {
		name string
		rs   *ruleSet
		want bool
	}{
		{"10.0.18.172.in-addr.arpa", rs, false},                // private: a neighbour sandbox
		{"1.0.0.127.in-addr.arpa", rs, false},                  // loopback
		{"5.0.64.100.in-addr.arpa", rs, false},                 // CGNAT
		{"8.4.8.8.in-addr.arpa", rs, false},                    // platform deny
		{"1.1.1.1.in-addr.arpa", rs, true},                     // public, default allow
		{"18.172.in-addr.arpa", rs, false},                     // a whole zone
		{"01.1.1.1.in-addr.arpa", rs, false},                   // not canonical
		{"1.1.1.1.in-addr.arpa", deny, true},                   // allowed by an IP rule
		{"2.2.2.2.in-addr.arpa", deny, false},                  // default deny
		{strings.Repeat("0.", 31) + "d.f.ip6.arpa", rs, false}, // ULA fd00::
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, isRev := reverseAddr(tt.name); !isRev {
				t.Fatalf("%s not taken for a reverse name", tt.name)
			}
			if got := tt.rs.allowReverse(tt.name); got != tt.want {
				t.Fatalf("allowReverse(%s) = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
	if a, _ := reverseAddr("1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa"); a.String() != "2001:db8::1" {
		t.Fatalf("ip6.arpa parsed as %v", a)
	}
}

func TestStateFileRoundTrip(t *testing.T) {
	s := &stateFile{path: t.TempDir() + "/sub/policy.json"}
	if _, ok, err := s.load(10); ok || err != nil {
		t.Fatalf("empty state: ok %v err %v", ok, err)
	}
	p := Policy{DefaultAction: ActionDeny, Egress: []Rule{{"allow", "a.test"}}}
	if err := s.save(p); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.load(10)
	if err != nil || !ok {
		t.Fatalf("load: %v %v", ok, err)
	}
	if diff := cmp.Diff(p, got); diff != "" {
		t.Fatalf("state (-want +got):\n%s", diff)
	}
}
