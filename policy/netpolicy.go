package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

// DefaultMaxEgressRules is the number of egress rules a sandbox may ask for
// when the platform sets no other limit. Every rule costs a DNS-proxy check
// and an nftables element, so the list stays bounded.
const DefaultMaxEgressRules = 256

// Egress actions.
const (
	ActionAllow = "allow"
	ActionDeny  = "deny"
)

// NetworkPolicy is a sandbox's egress policy, as in the OpenSandbox protocol:
// the first rule whose target matches decides, else DefaultAction does. An
// empty DefaultAction means deny.
type NetworkPolicy struct {
	DefaultAction string       `json:"defaultAction,omitempty"`
	Egress        []EgressRule `json:"egress,omitempty"`
}

// EgressRule allows or denies one target: a DNS name, a "*.name" wildcard
// (subdomains of name, not name itself), an IP address or a CIDR.
type EgressRule struct {
	Action string `json:"action"`
	Target string `json:"target"`
}

// ValidationError says which field of a request is wrong and why, in words
// fit for a 400 response.
type ValidationError struct {
	Field   string
	Message string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Message }

// ValidateNetworkPolicy checks a requested network policy and returns it
// normalized: actions and names lower-cased, trailing dots dropped. maxRules
// bounds the number of rules; zero or less means DefaultMaxEgressRules. The
// error, a *ValidationError, names the first offending field.
func ValidateNetworkPolicy(np NetworkPolicy, maxRules int) (NetworkPolicy, error) {
	if maxRules <= 0 {
		maxRules = DefaultMaxEgressRules
	}
	out := NetworkPolicy{DefaultAction: strings.ToLower(np.DefaultAction)}
	if out.DefaultAction != "" && out.DefaultAction != ActionAllow && out.DefaultAction != ActionDeny {
		return NetworkPolicy{}, &ValidationError{"networkPolicy.defaultAction", fmt.Sprintf("%q is not allow or deny", np.DefaultAction)}
	}
	if len(np.Egress) > maxRules {
		return NetworkPolicy{}, &ValidationError{"networkPolicy.egress", fmt.Sprintf("%d rules given; at most %d are allowed", len(np.Egress), maxRules)}
	}
	if np.Egress != nil {
		out.Egress = make([]EgressRule, 0, len(np.Egress))
	}
	for i, rule := range np.Egress {
		action := strings.ToLower(rule.Action)
		if action != ActionAllow && action != ActionDeny {
			return NetworkPolicy{}, &ValidationError{fmt.Sprintf("networkPolicy.egress[%d].action", i), fmt.Sprintf("%q is not allow or deny", rule.Action)}
		}
		target, err := NormalizeEgressTarget(rule.Target)
		if err != nil {
			return NetworkPolicy{}, &ValidationError{fmt.Sprintf("networkPolicy.egress[%d].target", i), err.Error()}
		}
		out.Egress = append(out.Egress, EgressRule{Action: action, Target: target})
	}
	return out, nil
}

// NormalizeEgressTarget checks one egress target and returns its canonical
// form: names lower-cased without a trailing dot, addresses and prefixes as
// given (but validated).
func NormalizeEgressTarget(target string) (string, error) {
	t := strings.TrimSpace(target)
	switch {
	case t == "":
		return "", fmt.Errorf("target is empty")
	case t != target:
		return "", fmt.Errorf("%q has surrounding spaces", target)
	case strings.Contains(t, "://"):
		return "", fmt.Errorf("%q has a scheme; give a bare host name, IP address or CIDR", target)
	}
	if strings.Contains(t, "/") {
		return normalizePrefix(t)
	}
	if strings.Contains(t, ":") {
		if addr, err := netip.ParseAddr(t); err == nil && addr.Zone() == "" {
			return addr.String(), nil
		}
		if strings.Count(t, ":") == 1 {
			return "", fmt.Errorf("%q has a port; give a bare host name or IP address", target)
		}
		return "", fmt.Errorf("%q is not a valid IPv6 address", target)
	}
	if looksNumeric(t) {
		addr, err := netip.ParseAddr(t)
		if err != nil || !addr.Is4() {
			return "", fmt.Errorf("%q is not a valid IPv4 address", target)
		}
		return addr.String(), nil
	}
	return normalizeName(t)
}

// normalizePrefix accepts a CIDR and rejects paths that look like one.
func normalizePrefix(t string) (string, error) {
	addrPart, _, _ := strings.Cut(t, "/")
	if _, err := netip.ParseAddr(addrPart); err != nil {
		return "", fmt.Errorf("%q has a path; give a bare host name, IP address or CIDR", t)
	}
	prefix, err := netip.ParsePrefix(t)
	if err != nil {
		return "", fmt.Errorf("%q is not a valid CIDR (the prefix length must fit the address: at most /32 for IPv4, /128 for IPv6)", t)
	}
	return prefix.String(), nil
}

// looksNumeric is true for dotted strings of digits only, which can only be
// IPv4 addresses (a top-level DNS label is never all digits).
func looksNumeric(t string) bool {
	labels := strings.Split(t, ".")
	last := labels[len(labels)-1]
	if last == "" && len(labels) > 1 {
		last = labels[len(labels)-2]
	}
	if last == "" {
		return false
	}
	for _, r := range last {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// normalizeName accepts "name" or "*.name" with RFC 1123 labels.
func normalizeName(t string) (string, error) {
	name := strings.ToLower(strings.TrimSuffix(t, "."))
	wildcard := strings.HasPrefix(name, "*.")
	rest := strings.TrimPrefix(name, "*.")
	if name == "*" || name == "*." || (wildcard && rest == "") {
		return "", fmt.Errorf("%q is a wildcard without a domain; write *.example.com (or use defaultAction)", t)
	}
	if strings.Contains(rest, "*") {
		return "", fmt.Errorf("%q has a misplaced wildcard; only a leading \"*.\" is allowed, as in *.example.com", t)
	}
	if len(rest) > 253 {
		return "", fmt.Errorf("%q is longer than 253 characters", t)
	}
	for _, label := range strings.Split(rest, ".") {
		if !validLabel(label) {
			return "", fmt.Errorf("%q is not a valid DNS name (label %q)", t, label)
		}
	}
	return name, nil
}

func validLabel(label string) bool {
	if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
		return false
	}
	for _, r := range label {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}
