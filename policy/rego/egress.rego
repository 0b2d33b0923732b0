# Package sandgate.egress turns a sandbox's requested networkPolicy into the
# effective policy its egress enforcer applies. The engine evaluates
# data.sandgate.egress.decision: {"allow": true, "policy": {defaultAction,
# egress}} or {"allow": false, "code", "message"} for invalid input.
#
# Rule order (first match wins in the enforcer):
#  1. platform always-deny: link-local/metadata ranges, the gateway's own
#     addresses (data.sandgate.platform.gateway_addresses: every address of the
#     gateway's host and its Docker bridges) and the operator's
#     data.sandgate.platform.always_deny. Being first, no rule of a sandbox
#     (an allow of one of these addresses or of a range holding it) and no
#     defaultAction allow reaches them;
#  2. the operator's data.sandgate.platform.always_allow;
#  3. the sandbox's own rules, targets lower-cased and trailing dot dropped.
# A networkPolicy without defaultAction means deny. A sandbox without a
# networkPolicy gets the platform default: defaultAction
# data.sandgate.platform.default_action (itself "deny" by default) with only
# the platform rules, so it reaches what the operator always allows.
package sandgate.egress

default platform := {}

platform := data.sandgate.platform

# Cloud metadata services and link-local ranges: never reachable.
builtin_deny := ["169.254.0.0/16", "fe80::/10"]

max_rules := object.get(platform, "max_rules", 256)

has_policy if is_object(input.networkPolicy)

# The sandbox's own rules; a null or absent list is empty.
requested_rules := rules if {
	has_policy
	rules := object.get(input.networkPolicy, "egress", [])
	rules != null
} else := []

default_action := lower(input.networkPolicy.defaultAction) if {
	has_policy
	is_string(input.networkPolicy.defaultAction)
	input.networkPolicy.defaultAction != ""
} else := "deny" if {
	has_policy
} else := object.get(platform, "default_action", "deny")

normalize(target) := trim_suffix(lower(target), ".")

platform_rules := array.concat(
	[{"action": "deny", "target": normalize(t)} |
		some t in array.concat(
			array.concat(builtin_deny, object.get(platform, "gateway_addresses", [])),
			object.get(platform, "always_deny", []),
		)
	],
	[{"action": "allow", "target": normalize(t)} | some t in object.get(platform, "always_allow", [])],
)

sandbox_rules := [{"action": lower(r.action), "target": normalize(r.target)} | some r in requested_rules]

effective := {
	"defaultAction": default_action,
	"egress": array.concat(platform_rules, sandbox_rules),
}

decision := {"allow": true, "policy": effective} if {
	count(invalid) == 0
} else := {
	"allow": false,
	"code": "EGRESS::INVALID_POLICY",
	"message": concat("; ", sort(invalid)),
}

# invalid collects why the input cannot be turned into a policy.
invalid contains "networkPolicy must be an object" if {
	not has_policy
	input.networkPolicy != null
}

invalid contains "networkPolicy.defaultAction must be allow or deny" if {
	has_policy
	d := input.networkPolicy.defaultAction
	not d in {null, ""}
	not valid_action(d)
}

invalid contains "networkPolicy.egress must be an array" if {
	has_policy
	not is_array(requested_rules)
}

invalid contains msg if {
	is_array(requested_rules)
	count(requested_rules) > max_rules
	msg := sprintf("networkPolicy.egress has %d rules; at most %d are allowed", [count(requested_rules), max_rules])
}

invalid contains msg if {
	is_array(requested_rules)
	some i, rule in requested_rules
	not valid_action(field(rule, "action"))
	msg := sprintf("networkPolicy.egress[%d].action must be allow or deny", [i])
}

invalid contains msg if {
	is_array(requested_rules)
	some i, rule in requested_rules
	not valid_target(field(rule, "target"))
	msg := sprintf("networkPolicy.egress[%d].target must be a DNS name, *.name wildcard, IP address or CIDR", [i])
}

# field(rule, key) is rule[key], or null when rule is no object or lacks
# key, so that a malformed rule is reported rather than skipped.
field(rule, key) := object.get(rule, key, null) if is_object(rule) else := null

valid_action(a) if {
	is_string(a)
	lower(a) in {"allow", "deny"}
}

# A target is a DNS name (optionally "*." + name), an IP address or a CIDR;
# never a URL, a host:port or a path.
valid_target(t) if {
	is_string(t)
	valid_name(normalize(t))
}

valid_target(t) if {
	is_string(t)
	regex.match(`^[0-9]{1,3}(\.[0-9]{1,3}){3}$`, t)
	net.cidr_is_valid(concat("", [t, "/32"]))
}

valid_target(t) if {
	is_string(t)
	contains(t, ":")
	not contains(t, "/")
	net.cidr_is_valid(concat("", [t, "/128"]))
}

valid_target(t) if {
	is_string(t)
	contains(t, "/")
	net.cidr_is_valid(t)
}

valid_name(name) if {
	count(name) <= 253
	regex.match(`^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`, name)

	# A top-level label is never all digits: such a target is a bad IPv4 address.
	labels := split(name, ".")
	not regex.match(`^[0-9]+$`, labels[count(labels) - 1])
}
