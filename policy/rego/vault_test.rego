package sandgate.vault_test

import data.sandgate.vault

bind(hosts, schemes) := {"name": "b", "match": {"schemes": schemes, "hosts": hosts}, "auth": {"type": "bearer"}}

deny_policy := {"defaultAction": "deny", "egress": [
	{"action": "deny", "target": "169.254.0.0/16"},
	{"action": "deny", "target": "bad.example.com"},
	{"action": "allow", "target": "*.example.com"},
	{"action": "allow", "target": "api.test"},
]}

denials(b, np) := d if {
	d := vault.deny with input as {"binding": b, "networkPolicy": np}
}

test_allowed_host_over_https if {
	count(denials(bind(["api.test"], ["https"]), deny_policy)) == 0
	count(denials(bind(["x.example.com", "*.a.example.com"], ["https"]), deny_policy)) == 0
}

test_host_the_egress_denies if {
	some d in denials(bind(["bad.example.com"], ["https"]), deny_policy)
	d.code == "VAULT::HOST_NOT_ALLOWED"
}

test_host_no_rule_allows if {
	some d in denials(bind(["evil.test"], ["https"]), deny_policy)
	d.code == "VAULT::HOST_NOT_ALLOWED"
}

test_http_refused if {
	some d in denials(bind(["api.test"], ["https", "http"]), deny_policy)
	d.code == "VAULT::SCHEME_NOT_ALLOWED"
}

test_http_allowed_by_the_operator if {
	d := vault.deny with input as {"binding": bind(["api.test"], ["https", "http"]), "networkPolicy": deny_policy}
		with data.sandgate.platform.vault_schemes as ["https", "http"]
	count(d) == 0
}

test_operator_schemes_still_refuse_others if {
	some d in vault.deny with input as {"binding": bind(["api.test"], ["https"]), "networkPolicy": deny_policy}
		with data.sandgate.platform.vault_schemes as ["http"]
	d.code == "VAULT::SCHEME_NOT_ALLOWED"
}

test_default_allow_allows_any_host if {
	count(denials(bind(["anything.test"], ["https"]), {"defaultAction": "allow", "egress": []})) == 0
}

test_no_egress_policy_denies_every_host if {
	some d in vault.deny with input as {"binding": bind(["api.test"], ["https"])}
	d.code == "VAULT::HOST_NOT_ALLOWED"
}
