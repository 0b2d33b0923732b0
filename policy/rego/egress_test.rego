package sandgate.egress_test

import data.sandgate.egress

decide(doc) := d if {
	d := egress.decision with input as doc
}

platform_defaults := [
	{"action": "deny", "target": "169.254.0.0/16"},
	{"action": "deny", "target": "fe80::/10"},
]

test_sandbox_rules_follow_platform_rules if {
	d := decide({"tenant": "t1", "sandbox": "sb", "networkPolicy": {"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.org"}]}})
	d.allow == true
	d.policy == {"defaultAction": "deny", "egress": array.concat(platform_defaults, [{"action": "allow", "target": "pypi.org"}])}
}

test_targets_normalized if {
	d := decide({"networkPolicy": {"defaultAction": "ALLOW", "egress": [{"action": "Deny", "target": "Example.COM."}]}})
	d.policy.defaultAction == "allow"
	d.policy.egress[count(d.policy.egress) - 1] == {"action": "deny", "target": "example.com"}
}

test_missing_default_action_denies if {
	decide({"networkPolicy": {"egress": [{"action": "allow", "target": "pypi.org"}]}}).policy.defaultAction == "deny"
	decide({"networkPolicy": {"defaultAction": "", "egress": []}}).policy.defaultAction == "deny"
	decide({"networkPolicy": {"defaultAction": null}}).policy.defaultAction == "deny"
}

test_no_network_policy_gets_platform_default if {
	decide({"tenant": "t1"}).policy == {"defaultAction": "deny", "egress": platform_defaults}
	decide({"tenant": "t1", "networkPolicy": null}).policy == {"defaultAction": "deny", "egress": platform_defaults}
}

test_platform_default_action_configurable if {
	d := decide({"tenant": "t1"}) with data.sandgate.platform as {"default_action": "allow"}
	d.policy.defaultAction == "allow"
}

test_platform_rule_order if {
	platform := {
		"gateway_addresses": ["10.9.0.1", "fd00::1"],
		"always_deny": ["evil.example"],
		"always_allow": ["*.PyPI.org"],
	}
	d := decide({"networkPolicy": {"defaultAction": "deny", "egress": [{"action": "deny", "target": "files.pypi.org"}]}}) with data.sandgate.platform as platform
	d.policy.egress == [
		{"action": "deny", "target": "169.254.0.0/16"},
		{"action": "deny", "target": "fe80::/10"},
		{"action": "deny", "target": "10.9.0.1"},
		{"action": "deny", "target": "fd00::1"},
		{"action": "deny", "target": "evil.example"},
		{"action": "allow", "target": "*.pypi.org"},
		{"action": "deny", "target": "files.pypi.org"},
	]
}

test_no_network_policy_keeps_operator_allows if {
	d := decide({}) with data.sandgate.platform as {"always_allow": ["pypi.org"]}
	d.policy == {"defaultAction": "deny", "egress": array.concat(platform_defaults, [{"action": "allow", "target": "pypi.org"}])}
}

test_null_egress_is_empty if {
	decide({"networkPolicy": {"defaultAction": "allow", "egress": null}}).policy == {"defaultAction": "allow", "egress": platform_defaults}
}

test_valid_targets if {
	every target in ["example.com", "*.example.com", "a-b.c", "localhost", "1.2.3.4", "10.0.0.0/8", "2001:db8::1", "2001:db8::/32", "example.com."] {
		decide({"networkPolicy": {"egress": [{"action": "allow", "target": target}]}}).allow == true
	}
}

test_invalid_targets if {
	every target in ["http://x", "x.com:443", "x.com/path", "*.", "*", "a.*.b", "300.1.1.1", "10.0.0.0/33", "2001:db8::/129", "", "-bad.com", "under_score.com", "1.2.3"] {
		d := decide({"networkPolicy": {"egress": [{"action": "allow", "target": target}]}})
		d.allow == false
		d.code == "EGRESS::INVALID_POLICY"
		d.message == "networkPolicy.egress[0].target must be a DNS name, *.name wildcard, IP address or CIDR"
	}
}

test_non_string_target_invalid if {
	decide({"networkPolicy": {"egress": [{"action": "allow", "target": 42}]}}).allow == false
	decide({"networkPolicy": {"egress": [{"action": "allow"}]}}).allow == false
	decide({"networkPolicy": {"egress": ["pypi.org"]}}).allow == false
}

test_invalid_action if {
	d := decide({"networkPolicy": {"egress": [{"action": "allow", "target": "a.com"}, {"action": "log", "target": "b.com"}]}})
	d.allow == false
	d.message == "networkPolicy.egress[1].action must be allow or deny"
}

test_invalid_default_action if {
	d := decide({"networkPolicy": {"defaultAction": "maybe"}})
	d.allow == false
	d.message == "networkPolicy.defaultAction must be allow or deny"
}

test_network_policy_must_be_object if {
	decide({"networkPolicy": "deny"}).message == "networkPolicy must be an object"
}

test_egress_must_be_array if {
	decide({"networkPolicy": {"egress": {"action": "allow"}}}).message == "networkPolicy.egress must be an array"
}

test_max_rules if {
	rules := [{"action": "allow", "target": "a.com"} | some _ in numbers.range(1, 3)]
	d := decide({"networkPolicy": {"egress": rules}}) with data.sandgate.platform as {"max_rules": 2}
	d.allow == false
	d.message == "networkPolicy.egress has 3 rules; at most 2 are allowed"
	decide({"networkPolicy": {"egress": rules}}).allow == true
}

test_default_max_rules_is_256 if {
	ok := [{"action": "allow", "target": "a.com"} | some _ in numbers.range(1, 256)]
	decide({"networkPolicy": {"egress": ok}}).allow == true
	too_many := [{"action": "allow", "target": "a.com"} | some _ in numbers.range(1, 257)]
	decide({"networkPolicy": {"egress": too_many}}).allow == false
}

test_errors_joined_and_sorted if {
	d := decide({"networkPolicy": {"defaultAction": "x", "egress": [{"action": "y", "target": "a.com"}]}})
	d.message == "networkPolicy.defaultAction must be allow or deny; networkPolicy.egress[0].action must be allow or deny"
}

# A tenant cannot open the gateway host's addresses: neither defaultAction allow nor an
# allow of the address itself or of a range holding it comes before the platform's
# deny of it, and the enforcer applies the first rule that matches.
test_tenant_cannot_allow_host_addresses if {
	platform := {"gateway_addresses": ["172.17.0.1", "192.0.2.2", "fd00::1"]}
	requested := {"defaultAction": "allow", "egress": [
		{"action": "allow", "target": "172.17.0.1"},
		{"action": "allow", "target": "192.0.2.0/24"},
		{"action": "allow", "target": "FD00::1"},
	]}
	d := decide({"tenant": "t1", "networkPolicy": requested}) with data.sandgate.platform as platform
	d.allow == true
	d.policy.defaultAction == "allow"
	every host in platform.gateway_addresses {
		some i
		d.policy.egress[i] == {"action": "deny", "target": host}
		not allowed_before(d.policy.egress, host, i)
	}

	# The tenant's own rules are kept (after the denies) and its allow still counts.
	count([r | some r in d.policy.egress; r.action == "allow"]) == 3
}

allowed_before(rules, host, i) if {
	some j, rule in rules
	j < i
	rule.action == "allow"
	net.cidr_contains(as_cidr(rule.target), host)
}

as_cidr(t) := t if contains(t, "/")

else := concat("", [t, "/128"]) if contains(t, ":")

else := concat("", [t, "/32"])
