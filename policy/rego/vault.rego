# Package sandgate.vault decides which credential-vault bindings a sandbox may
# hold, so that an operator can forbid "send my key to any host". The engine
# evaluates data.sandgate.vault.deny for each binding a POST or PATCH of
# /credential-vault would create or replace: a set of {"code", "message"}; an
# empty set allows it.
#
# Input: {"tenant", "sandbox", "binding": {"name", "match": {"schemes",
# "ports", "hosts", "methods", "paths"}, "auth": {"type", "name"?}},
# "networkPolicy": the sandbox's effective egress policy}. A credential's value
# is never part of it.
#
# By default a binding must be https only, and every host it names must be one
# the sandbox's egress policy allows (first matching rule wins, as in the
# enforcer; no match falls to the default action). The schemes a binding may
# name are data.sandgate.platform.vault_schemes (the gateway's vault_schemes,
# SANDGATE_VAULT_SCHEMES; default ["https"]): with "http" the enforcer injects
# into plain HTTP, readable by anyone on the path to the upstream. Operators add
# their own vetoes in files of this package, e.g.
#
#	deny contains {"code": "VAULT::HOST_NOT_ALLOWED", "message": "no GitHub"} if {
#		some h in input.binding.match.hosts
#		endswith(h, "github.com")
#	}
package sandgate.vault

binding := object.get(input, "binding", {})

name := object.get(binding, "name", "")

schemes := object.get(binding, ["match", "schemes"], ["https"])

hosts := object.get(binding, ["match", "hosts"], [])

rules := r if {
	r := input.networkPolicy.egress
	is_array(r)
} else := []

default_action := lower(input.networkPolicy.defaultAction) if {
	is_string(input.networkPolicy.defaultAction)
} else := "deny"

allowed_schemes := {lower(s) | some s in data.sandgate.platform.vault_schemes} if {
	is_array(data.sandgate.platform.vault_schemes)
} else := {"https"}

deny contains {"code": "VAULT::SCHEME_NOT_ALLOWED", "message": msg} if {
	some s in schemes
	not lower(s) in allowed_schemes
	msg := sprintf("binding %s: scheme %s is not allowed; the vault injects credentials over %s only", [name, s, concat(" and ", sort(allowed_schemes))])
}

deny contains {"code": "VAULT::HOST_NOT_ALLOWED", "message": msg} if {
	some h in hosts
	not egress_allows(lower(h))
	msg := sprintf("binding %s: host %s is not allowed by the sandbox's egress policy, so no credential may be bound to it", [name, h])
}

# covers(target, host): the rule target applies to host (a name or a "*."
# wildcard, which a wildcard target covers when it is the same or below).
covers(target, host) if lower(target) == host

covers(target, host) if {
	startswith(target, "*.")
	endswith(host, substring(lower(target), 1, -1))
}

first_match(host) := min({i | some i, r in rules; covers(r.target, host)})

egress_allows(host) if {
	i := first_match(host)
	lower(rules[i].action) == "allow"
}

egress_allows(host) if {
	not first_match(host)
	default_action == "allow"
}
