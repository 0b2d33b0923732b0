package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/sandbox-agent/strictjson"
)

// Actions a rule or the default may take.
const (
	ActionAllow = "allow"
	ActionDeny  = "deny"
)

// DefaultMaxRules bounds the rules of one policy so that a caller cannot make the
// enforcer build sets of unbounded size; --max-rules overrides it.
const DefaultMaxRules = 1000

// Rule is one egress rule: an action applied to a host name, a "*." wildcard, an IP
// address or a CIDR block.
type Rule struct {
	Action string `json:"action"`
	Target string `json:"target"`
}

// Policy is the egress policy as the OpenSandbox protocol spells it. A missing
// DefaultAction means deny.
type Policy struct {
	DefaultAction string `json:"defaultAction,omitempty"`
	Egress        []Rule `json:"egress"`
}

// ValidationError says precisely why a policy was rejected; its message is safe to
// show to the caller.
type ValidationError struct {
	msg string
}

func (e *ValidationError) Error() string { return e.msg }

func invalidf(format string, args ...any) error {
	return &ValidationError{msg: fmt.Sprintf(format, args...)}
}

// ParsePolicy decodes a JSON policy strictly (unknown fields rejected) and normalizes
// it. An empty document, "{}" or "null" is the deny-all policy, as in OpenSandbox.
func ParsePolicy(data []byte, maxRules int) (Policy, error) {
	trimmed := strings.TrimSpace(string(data))
	if trimmed == "" || trimmed == "null" {
		return Policy{DefaultAction: ActionDeny, Egress: []Rule{}}, nil
	}
	var p Policy
	if err := strictjson.Decode([]byte(trimmed), &p); err != nil {
		return Policy{}, invalidf("policy is not valid JSON: %v", err)
	}
	return NormalizePolicy(p, maxRules)
}

// NormalizePolicy validates p and returns it with every target in canonical form
// (lower case, no trailing dot, masked CIDR) and DefaultAction filled in.
func NormalizePolicy(p Policy, maxRules int) (Policy, error) {
	out := Policy{DefaultAction: p.DefaultAction, Egress: make([]Rule, 0, len(p.Egress))}
	switch p.DefaultAction {
	case "":
		out.DefaultAction = ActionDeny
	case ActionAllow, ActionDeny:
	default:
		return Policy{}, invalidf("defaultAction %q is not %q or %q", p.DefaultAction, ActionAllow, ActionDeny)
	}
	if maxRules > 0 && len(p.Egress) > maxRules {
		return Policy{}, invalidf("egress has %d rules; the limit is %d", len(p.Egress), maxRules)
	}
	for i, r := range p.Egress {
		n, err := normalizeRule(r)
		if err != nil {
			return Policy{}, invalidf("egress[%d]: %v", i, err)
		}
		out.Egress = append(out.Egress, n)
	}
	return out, nil
}

func normalizeRule(r Rule) (Rule, error) {
	if r.Action != ActionAllow && r.Action != ActionDeny {
		return Rule{}, fmt.Errorf("action %q is not %q or %q", r.Action, ActionAllow, ActionDeny)
	}
	t, err := parseTarget(r.Target)
	if err != nil {
		return Rule{}, fmt.Errorf("target %q: %w", r.Target, err)
	}
	return Rule{Action: r.Action, Target: t.String()}, nil
}

// targetKind tells how a rule's target matches.
type targetKind int

const (
	kindName     targetKind = iota // exact host name
	kindWildcard                   // "*.suffix": any name strictly below suffix
	kindPrefix                     // IP address (as a full-length prefix) or CIDR block
)

type target struct {
	kind   targetKind
	name   string       // kindName: the name; kindWildcard: the suffix without "*."
	prefix netip.Prefix // kindPrefix
}

func (t target) String() string {
	switch t.kind {
	case kindWildcard:
		return "*." + t.name
	case kindPrefix:
		if t.prefix.IsSingleIP() {
			return t.prefix.Addr().String()
		}
		return t.prefix.String()
	default:
		return t.name
	}
}

// parseTarget classifies and validates one rule target.
func parseTarget(s string) (target, error) {
	switch {
	case s == "":
		return target{}, errors.New("target is empty")
	case strings.Contains(s, "://"):
		return target{}, errors.New("a URL is not a target; give a host name, IP address or CIDR block")
	case strings.ContainsAny(s, " \t\r\n"):
		return target{}, errors.New("target contains whitespace")
	case strings.Contains(s, "/"):
		p, err := parseCIDR(s)
		if err != nil {
			return target{}, err
		}
		return target{kind: kindPrefix, prefix: p}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return target{}, errors.New("an IPv6 zone is not allowed")
		}
		a = a.Unmap()
		return target{kind: kindPrefix, prefix: netip.PrefixFrom(a, a.BitLen())}, nil
	}
	if strings.Contains(s, ":") {
		return target{}, errors.New("invalid IPv6 address (a host name must not carry a port)")
	}
	lower := strings.ToLower(s)
	switch lower {
	case "*.":
		return target{}, errors.New(`wildcard "*." needs a domain after it`)
	case "*":
		return target{}, errors.New(`"*" alone is not a target; set defaultAction instead`)
	}
	name := strings.TrimSuffix(lower, ".")
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		if err := validateName(rest); err != nil {
			return target{}, err
		}
		return target{kind: kindWildcard, name: rest}, nil
	}
	if strings.Contains(name, "*") {
		return target{}, errors.New(`a wildcard is only allowed as a leading "*." label`)
	}
	if err := validateName(name); err != nil {
		return target{}, err
	}
	return target{kind: kindName, name: name}, nil
}

// parseCIDR parses "addr/bits" itself so that errors name the exact problem
// (netip's messages do not say which part was wrong in a way users read easily).
func parseCIDR(s string) (netip.Prefix, error) {
	addrPart, bitsPart, _ := strings.Cut(s, "/")
	a, err := netip.ParseAddr(addrPart)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("invalid address %q in CIDR block", addrPart)
	}
	if a.Zone() != "" {
		return netip.Prefix{}, errors.New("an IPv6 zone is not allowed")
	}
	a = a.Unmap()
	bits, err := strconv.Atoi(bitsPart)
	if err != nil || bitsPart == "" || bitsPart[0] == '+' || bitsPart[0] == '-' {
		return netip.Prefix{}, fmt.Errorf("invalid prefix length %q", bitsPart)
	}
	if bits > a.BitLen() {
		return netip.Prefix{}, fmt.Errorf("prefix length %d exceeds %d for %s", bits, a.BitLen(), familyName(a))
	}
	return netip.PrefixFrom(a, bits).Masked(), nil
}

func familyName(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// validateName checks a lower-cased host name: LDH labels (underscore tolerated, as
// service names use it), 1-63 bytes each, 253 in all, and a last label that is not
// all digits, so that "300.1.1.1" is reported as the bad address it is.
func validateName(name string) error {
	if len(name) > 253 {
		return fmt.Errorf("name is %d bytes long; the limit is 253", len(name))
	}
	labels := strings.Split(name, ".")
	allNumeric := true
	for _, l := range labels {
		if l == "" {
			return errors.New("name has an empty label")
		}
		if len(l) > 63 {
			return fmt.Errorf("label %q is longer than 63 bytes", l)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with a hyphen", l)
		}
		numeric := true
		for i := 0; i < len(l); i++ {
			c := l[i]
			switch {
			case c >= '0' && c <= '9':
			case c >= 'a' && c <= 'z', c == '-', c == '_':
				numeric = false
			default:
				return fmt.Errorf("label %q has invalid character %q", l, c)
			}
		}
		allNumeric = allNumeric && numeric
	}
	if allNumeric {
		return errors.New("invalid IPv4 address")
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" {
		return fmt.Errorf("top-level label %q is all digits", last)
	}
	return nil
}

// normalizeName turns a DNS question name into the form rules use.
func normalizeName(qname string) string {
	return strings.TrimSuffix(strings.ToLower(qname), ".")
}

// MergeRules returns the rules of a PATCH ahead of the existing ones; an existing rule
// whose target the patch names again is dropped, so a patch can flip a rule.
func MergeRules(existing, patch []Rule) []Rule {
	out := make([]Rule, 0, len(existing)+len(patch))
	seen := make(map[string]bool, len(patch))
	// Within the patch, too, the first rule for a target wins (OpenSandbox's
	// egress-api.yaml): a later duplicate is dropped, not kept behind it.
	for _, r := range patch {
		if !seen[r.Target] {
			out = append(out, r)
			seen[r.Target] = true
		}
	}
	for _, r := range existing {
		if !seen[r.Target] {
			out = append(out, r)
		}
	}
	return out
}

// RemoveTargets returns rules without those whose target is listed, and how many
// were removed. targets must be normalized.
func RemoveTargets(rules []Rule, targets []string) ([]Rule, int) {
	drop := make(map[string]bool, len(targets))
	for _, t := range targets {
		drop[t] = true
	}
	out := make([]Rule, 0, len(rules))
	for _, r := range rules {
		if !drop[r.Target] {
			out = append(out, r)
		}
	}
	return out, len(rules) - len(out)
}

// NormalizeTarget validates one target and returns its canonical form, for DELETE.
func NormalizeTarget(s string) (string, error) {
	t, err := parseTarget(s)
	if err != nil {
		return "", invalidf("target %q: %v", s, err)
	}
	return t.String(), nil
}

// Mode is the summary the GET /policy response reports.
func (p Policy) Mode() string {
	if len(p.Egress) == 0 {
		if p.DefaultAction == ActionAllow {
			return "allow_all"
		}
		return "deny_all"
	}
	return "enforcing"
}
