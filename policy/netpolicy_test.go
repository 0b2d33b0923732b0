package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNormalizeEgressTarget(t *testing.T) {
	tests := []struct {
		target  string
		want    string
		wantErr string // substring of the error; empty means valid
	}{
		{target: "example.com", want: "example.com"},
		{target: "Example.COM.", want: "example.com"},
		{target: "*.example.com", want: "*.example.com"},
		{target: "*.Example.com.", want: "*.example.com"},
		{target: "localhost", want: "localhost"},
		{target: "xn--bcher-kva.example", want: "xn--bcher-kva.example"},
		{target: "a-b.c0", want: "a-b.c0"},
		{target: "1.2.3.4", want: "1.2.3.4"},
		{target: "10.0.0.0/8", want: "10.0.0.0/8"},
		{target: "192.168.1.0/24", want: "192.168.1.0/24"},
		{target: "0.0.0.0/0", want: "0.0.0.0/0"},
		{target: "2001:db8::1", want: "2001:db8::1"},
		{target: "2001:DB8::1", want: "2001:db8::1"},
		{target: "2001:db8::/32", want: "2001:db8::/32"},
		{target: "", wantErr: "empty"},
		{target: " example.com", wantErr: "spaces"},
		{target: "http://x", wantErr: "scheme"},
		{target: "https://pypi.org/simple", wantErr: "scheme"},
		{target: "x.com:443", wantErr: "port"},
		{target: "1.2.3.4:80", wantErr: "port"},
		{target: "x.com/path", wantErr: "path"},
		{target: "*.", wantErr: "wildcard without a domain"},
		{target: "*", wantErr: "wildcard without a domain"},
		{target: "a.*.b", wantErr: "misplaced wildcard"},
		{target: "*.*.b", wantErr: "misplaced wildcard"},
		{target: "foo*.com", wantErr: "misplaced wildcard"},
		{target: "300.1.1.1", wantErr: "not a valid IPv4 address"},
		{target: "1.2.3", wantErr: "not a valid IPv4 address"},
		{target: "01.2.3.4", wantErr: "not a valid IPv4 address"},
		{target: "10.0.0.0/33", wantErr: "not a valid CIDR"},
		{target: "2001:db8::/129", wantErr: "not a valid CIDR"},
		{target: "10.0.0.0/x", wantErr: "not a valid CIDR"},
		{target: "fe80::1%eth0", wantErr: "IPv6"},
		{target: "2001:db8:::1", wantErr: "IPv6"},
		{target: "-bad.com", wantErr: "not a valid DNS name"},
		{target: "bad-.com", wantErr: "not a valid DNS name"},
		{target: "under_score.com", wantErr: "not a valid DNS name"},
		{target: "a..b", wantErr: "not a valid DNS name"},
		{target: strings.Repeat("a", 64) + ".com", wantErr: "not a valid DNS name"},
		{target: strings.Repeat("abcdefghi.", 26) + "com", wantErr: "longer than 253"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			got, err := NormalizeEgressTarget(tt.target)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("NormalizeEgressTarget(%q) = %q, %v; want %q", tt.target, got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NormalizeEgressTarget(%q) error = %v, want one containing %q", tt.target, err, tt.wantErr)
			}
		})
	}
}

func rules(n int) []EgressRule {
	out := make([]EgressRule, n)
	for i := range out {
		out[i] = EgressRule{Action: "allow", Target: fmt.Sprintf("h%d.example.com", i)}
	}
	return out
}

func TestValidateNetworkPolicy(t *testing.T) {
	tests := []struct {
		name      string
		np        NetworkPolicy
		maxRules  int
		want      NetworkPolicy
		wantField string
		wantMsg   string
	}{
		{
			name: "normalizes",
			np:   NetworkPolicy{DefaultAction: "DENY", Egress: []EgressRule{{"Allow", "PyPI.org."}, {"deny", "*.Evil.com"}}},
			want: NetworkPolicy{DefaultAction: "deny", Egress: []EgressRule{{"allow", "pypi.org"}, {"deny", "*.evil.com"}}},
		},
		{name: "empty is valid", np: NetworkPolicy{}, want: NetworkPolicy{}},
		{name: "default max is 256", np: NetworkPolicy{Egress: rules(256)}, want: NetworkPolicy{Egress: rules(256)}},
		{
			name: "too many rules (default limit)", np: NetworkPolicy{Egress: rules(257)},
			wantField: "networkPolicy.egress", wantMsg: "257 rules given; at most 256 are allowed",
		},
		{
			name: "too many rules (configured limit)", np: NetworkPolicy{Egress: rules(3)}, maxRules: 2,
			wantField: "networkPolicy.egress", wantMsg: "3 rules given; at most 2 are allowed",
		},
		{
			name: "unknown action", np: NetworkPolicy{Egress: []EgressRule{{"allow", "a.com"}, {"log", "b.com"}}},
			wantField: "networkPolicy.egress[1].action", wantMsg: `"log" is not allow or deny`,
		},
		{
			name: "empty action", np: NetworkPolicy{Egress: []EgressRule{{"", "a.com"}}},
			wantField: "networkPolicy.egress[0].action", wantMsg: `"" is not allow or deny`,
		},
		{
			name: "unknown default action", np: NetworkPolicy{DefaultAction: "block"},
			wantField: "networkPolicy.defaultAction", wantMsg: `"block" is not allow or deny`,
		},
		{
			name: "bare wildcard", np: NetworkPolicy{Egress: []EgressRule{{"allow", "*."}}},
			wantField: "networkPolicy.egress[0].target", wantMsg: `"*." is a wildcard without a domain; write *.example.com (or use defaultAction)`,
		},
		{
			name: "url", np: NetworkPolicy{Egress: []EgressRule{{"allow", "http://x"}}},
			wantField: "networkPolicy.egress[0].target", wantMsg: `"http://x" has a scheme; give a bare host name, IP address or CIDR`,
		},
		{
			name: "bad ipv4", np: NetworkPolicy{Egress: []EgressRule{{"deny", "300.1.1.1"}}},
			wantField: "networkPolicy.egress[0].target", wantMsg: `"300.1.1.1" is not a valid IPv4 address`,
		},
		{
			name: "bad prefix", np: NetworkPolicy{Egress: []EgressRule{{"deny", "10.0.0.0/33"}}},
			wantField: "networkPolicy.egress[0].target", wantMsg: `"10.0.0.0/33" is not a valid CIDR (the prefix length must fit the address: at most /32 for IPv4, /128 for IPv6)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ValidateNetworkPolicy(tt.np, tt.maxRules)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("ValidateNetworkPolicy: %v", err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("normalized (-want +got):\n%s", diff)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error = %v, want a *ValidationError", err)
			}
			if ve.Field != tt.wantField || ve.Message != tt.wantMsg {
				t.Errorf("error = %q / %q, want %q / %q", ve.Field, ve.Message, tt.wantField, tt.wantMsg)
			}
			if err.Error() != tt.wantField+": "+tt.wantMsg {
				t.Errorf("Error() = %q", err.Error())
			}
		})
	}
}

// TestGoAndRegoAgreeOnTargets keeps the two validators in step: the Rego one
// guards operators' and direct callers' input, the Go one gives precise
// messages.
func TestGoAndRegoAgreeOnTargets(t *testing.T) {
	e := newTestEngine(t, Options{})
	targets := []string{
		"example.com", "*.example.com", "Example.COM.", "1.2.3.4", "10.0.0.0/8", "2001:db8::1", "2001:db8::/32",
		"http://x", "x.com:443", "x.com/path", "*.", "*", "a.*.b", "300.1.1.1", "1.2.3", "10.0.0.0/33",
		"-bad.com", "under_score.com", "a..b", "", "fe80::1%eth0", "01.2.3.4", "1.2.3.4.", "::ffff:1.2.3.4", "localhost",
	}
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			_, goErr := NormalizeEgressTarget(target)
			raw, _, err := e.Explain(t.Context(), EgressQuery+".allow",
				[]byte(fmt.Sprintf(`{"networkPolicy": {"egress": [{"action": "allow", "target": %q}]}}`, target)))
			if err != nil {
				t.Fatal(err)
			}
			regoValid := strings.Contains(string(raw), `"value":true`)
			if regoValid != (goErr == nil) {
				t.Errorf("Go says valid=%v (%v), Rego says valid=%v", goErr == nil, goErr, regoValid)
			}
		})
	}
}
