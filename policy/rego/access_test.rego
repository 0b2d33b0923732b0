package sandgate.access_test

import data.sandgate.access

key(role, tenant) := {"kind": "api_key", "id": "k1", "tenant": tenant, "role": role}

session(role, tenant) := {"kind": "session", "id": "k1", "tenant": tenant, "role": role}

req(principal, action, resource) := {
	"principal": principal,
	"tenant": object.get(principal, "tenant", ""),
	"action": action,
	"resource": resource,
	"request": {"method": "GET", "path": "/v1/x"},
}

sandbox(tenant) := {"kind": "sandbox", "id": "sb-1", "tenant": tenant}

decide(input_doc) := d if {
	d := access.decision with input as input_doc
}

allowed(input_doc) if decide(input_doc).allow == true

code(input_doc) := decide(input_doc).code

# --- admin ---

test_admin_may_do_anything_in_any_tenant if {
	allowed(req(key("admin", ""), "tenant.create", {"kind": "tenant", "id": "t2"}))
	allowed(req(key("admin", "ops"), "sandbox.delete", sandbox("t2")))
	allowed(req(key("admin", "ops"), "policy.write", {"kind": "policy"}))
	allowed(req(key("admin", "ops"), "policy.read", {"kind": "policy"}))
}

# A console session carries its key's role: the same grants, the same limits.
test_session_is_its_key if {
	allowed(req(session("admin", ""), "policy.write", {"kind": "policy"}))
	allowed(req(session("member", "t1"), "sandbox.proxy", sandbox("t1")))
	code(req(session("member", "t1"), "policy.read", {"kind": "policy"})) == "POLICY::DENIED"
	code(req(session("viewer", "t1"), "sandbox.delete", sandbox("t1"))) == "POLICY::DENIED"
	code(req(session("member", "t1"), "sandbox.delete", sandbox("t2"))) == "POLICY::NOT_FOUND"
}

# --- tenant-admin ---

test_tenant_admin_manages_its_tenant if {
	every action in ["key.create", "key.delete", "plugin.create", "pool.delete", "sandbox.create", "audit.read", "tenant.get"] {
		allowed(req(key("tenant-admin", "t1"), action, {"kind": split(action, ".")[0], "tenant": "t1"}))
	}
}

test_tenant_admin_no_platform_actions if {
	every action in ["tenant.create", "tenant.update", "tenant.delete", "tenant.list", "policy.write", "policy.read"] {
		code(req(key("tenant-admin", "t1"), action, {})) == "POLICY::DENIED"
	}
}

test_tenant_admin_other_tenant_not_found if {
	code(req(key("tenant-admin", "t1"), "sandbox.get", sandbox("t2"))) == "POLICY::NOT_FOUND"
	code(req(key("tenant-admin", "t1"), "tenant.get", {"kind": "tenant", "id": "t2"})) == "POLICY::NOT_FOUND"
}

# --- member ---

test_member_uses_sandboxes_pools_batches if {
	every action in ["sandbox.create", "sandbox.get", "sandbox.list", "sandbox.update", "sandbox.delete", "sandbox.proxy", "pool.create", "pool.delete", "batch.create", "snapshot.create", "volume.create", "volume.delete"] {
		allowed(req(key("member", "t1"), action, {"kind": split(action, ".")[0], "tenant": "t1"}))
	}
}

test_member_reads_other_areas if {
	allowed(req(key("member", "t1"), "plugin.list", {"kind": "plugin"}))
	allowed(req(key("member", "t1"), "audit.read", {}))
}

test_member_no_key_or_tenant_management if {
	every action in ["key.create", "key.list", "key.delete", "tenant.update", "plugin.create", "policy.write"] {
		code(req(key("member", "t1"), action, {})) == "POLICY::DENIED"
	}
}

test_member_other_tenant_not_found if {
	code(req(key("member", "t1"), "sandbox.delete", sandbox("t2"))) == "POLICY::NOT_FOUND"
	code(object.union(req(key("member", "t1"), "sandbox.list", {}), {"tenant": "t2"})) == "POLICY::NOT_FOUND"
}

# --- viewer ---

test_viewer_reads if {
	every action in ["sandbox.get", "sandbox.list", "pool.list", "batch.get", "audit.read", "tenant.get"] {
		allowed(req(key("viewer", "t1"), action, {"kind": split(action, ".")[0], "tenant": "t1"}))
	}
}

test_viewer_writes_nothing if {
	every action in ["sandbox.create", "sandbox.delete", "sandbox.update", "sandbox.proxy", "pool.create", "volume.create", "volume.delete", "key.list", "tenant.list", "policy.read", "policy.write"] {
		code(req(key("viewer", "t1"), action, sandbox("t1"))) == "POLICY::DENIED"
	}
}

test_unknown_role_denied if {
	code(req(key("owner", "t1"), "sandbox.get", sandbox("t1"))) == "POLICY::DENIED"
	decide(req(key("owner", "t1"), "sandbox.get", sandbox("t1"))).message == "role owner may not perform sandbox.get"
}

test_session_kind_carries_a_role if {
	allowed(req({"kind": "session", "tenant": "t1", "role": "member"}, "sandbox.create", sandbox("t1")))
}

test_role_ignored_on_bound_credentials if {
	not allowed(req({"kind": "sandbox_token", "tenant": "t1", "role": "admin", "sandbox": "sb-1"}, "sandbox.delete", sandbox("t1")))
}

# --- sandbox-bound credentials ---

test_sandbox_token_proxies_its_sandbox_any_port if {
	p := {"kind": "sandbox_token", "tenant": "t1", "sandbox": "sb-1"}
	allowed(req(p, "sandbox.proxy", object.union(sandbox("t1"), {"port": 44772})))
	allowed(req(p, "sandbox.proxy", object.union(sandbox("t1"), {"port": 8080})))
}

test_sandbox_token_other_sandbox_denied if {
	p := {"kind": "sandbox_token", "tenant": "t1", "sandbox": "sb-1"}
	code(req(p, "sandbox.proxy", {"kind": "sandbox", "id": "sb-2", "tenant": "t1", "port": 44772})) == "POLICY::DENIED"
}

test_sandbox_token_only_proxies if {
	p := {"kind": "sandbox_token", "tenant": "t1", "sandbox": "sb-1"}
	code(req(p, "sandbox.get", sandbox("t1"))) == "POLICY::DENIED"
	decide(req(p, "sandbox.get", sandbox("t1"))).message == "a sandbox_token credential may not perform sandbox.get"
}

test_sandbox_token_tenant_mismatch_not_found if {
	p := {"kind": "sandbox_token", "tenant": "t2", "sandbox": "sb-1"}
	code(req(p, "sandbox.proxy", object.union(sandbox("t1"), {"port": 80}))) == "POLICY::NOT_FOUND"
}

test_signed_link_bound_to_port if {
	p := {"kind": "signed_link", "tenant": "t1", "sandbox": "sb-1", "port": 3000}
	allowed(req(p, "sandbox.proxy", object.union(sandbox("t1"), {"port": 3000})))
	not allowed(req(p, "sandbox.proxy", object.union(sandbox("t1"), {"port": 3001})))
}

test_signed_link_without_port_denied if {
	p := {"kind": "signed_link", "tenant": "t1", "sandbox": "sb-1"}
	not allowed(req(p, "sandbox.proxy", object.union(sandbox("t1"), {"port": 3000})))
}

test_cookie_bound_to_sandbox_and_port if {
	p := {"kind": "cookie", "tenant": "t1", "sandbox": "sb-1", "port": 5173}
	allowed(req(p, "sandbox.proxy", object.union(sandbox("t1"), {"port": 5173})))
	not allowed(req(p, "sandbox.proxy", object.union(sandbox("t1"), {"port": 22})))
	not allowed(req(p, "sandbox.proxy", {"kind": "sandbox", "id": "sb-9", "tenant": "t1", "port": 5173}))
}

test_bound_credential_without_sandbox_denied if {
	not allowed(req({"kind": "sandbox_token", "tenant": "t1"}, "sandbox.proxy", sandbox("t1")))
	not allowed(req({"kind": "sandbox_token", "tenant": "t1", "sandbox": ""}, "sandbox.proxy", {"kind": "sandbox", "id": "", "tenant": "t1"}))
}

# --- public sandboxes and anonymous callers ---

test_public_sandbox_open_to_anonymous if {
	allowed(req({"kind": "anonymous"}, "sandbox.proxy", object.union(sandbox("t1"), {"public": true, "port": 8080})))
}

test_public_sandbox_open_to_other_tenants if {
	allowed(req(key("viewer", "t2"), "sandbox.proxy", object.union(sandbox("t1"), {"public": true, "port": 8080})))
}

test_public_never_opens_platform_ports if {
	some port in [44772, 18080]
	pub := object.union(sandbox("t1"), {"public": true, "port": port})
	not allowed(req({"kind": "anonymous"}, "sandbox.proxy", pub))
	not allowed(req(key("viewer", "t2"), "sandbox.proxy", pub))
}

test_public_platform_ports_still_open_to_owner if {
	allowed(req(key("member", "t1"), "sandbox.proxy", object.union(sandbox("t1"), {"public": true, "port": 44772})))
}

test_publish_needs_tenant_admin if {
	code(req(key("member", "t1"), "sandbox.publish", sandbox("t1"))) == "POLICY::DENIED"
	code(req(session("member", "t1"), "sandbox.publish", sandbox("t1"))) == "POLICY::DENIED"
	not allowed(req(key("viewer", "t1"), "sandbox.publish", sandbox("t1")))
	allowed(req(key("tenant-admin", "t1"), "sandbox.publish", sandbox("t1")))
	allowed(req(key("admin", "ops"), "sandbox.publish", sandbox("t1")))
	code(req(key("tenant-admin", "t1"), "sandbox.publish", sandbox("t2"))) == "POLICY::NOT_FOUND"
}

test_access_rotate_member_not_viewer if {
	allowed(req(key("member", "t1"), "sandbox.access.rotate", sandbox("t1")))
	allowed(req(session("tenant-admin", "t1"), "sandbox.access.rotate", sandbox("t1")))
	not allowed(req(key("viewer", "t1"), "sandbox.access.rotate", sandbox("t1")))
	code(req(key("member", "t2"), "sandbox.access.rotate", sandbox("t1"))) == "POLICY::NOT_FOUND"
}

test_member_still_creates_private_sandboxes if {
	allowed(req(key("member", "t1"), "sandbox.create", sandbox("t1")))
	allowed(req(key("member", "t1"), "sandbox.update", sandbox("t1")))
}

test_public_only_opens_proxy if {
	not allowed(req({"kind": "anonymous"}, "sandbox.get", object.union(sandbox("t1"), {"public": true})))
	not allowed(req({"kind": "anonymous"}, "sandbox.delete", object.union(sandbox("t1"), {"public": true})))
}

test_anonymous_private_sandbox_not_found if {
	code(req({"kind": "anonymous"}, "sandbox.proxy", sandbox("t1"))) == "POLICY::NOT_FOUND"
}

test_anonymous_without_tenant_denied if {
	d := decide(req({"kind": "anonymous"}, "sandbox.list", {}))
	d.code == "POLICY::DENIED"
	d.message == "an anonymous caller may not perform sandbox.list"
}

test_principal_without_tenant_not_found_for_tenant_resources if {
	code(req({"kind": "api_key", "role": "member"}, "sandbox.get", sandbox("t1"))) == "POLICY::NOT_FOUND"
}

# --- vetoes ---

test_invalid_action_denied if {
	every action in ["sandboxcreate", ".create", "sandbox.", ""] {
		code(req(key("admin", ""), action, {})) == "POLICY::INVALID_ACTION"
	}
}

test_allow_mirrors_decision if {
	access.allow with input as req(key("member", "t1"), "sandbox.create", sandbox("t1"))
	not access.allow with input as req(key("viewer", "t1"), "sandbox.create", sandbox("t1"))
	not access.allow with input as req(key("admin", ""), "x", {})
}

test_tenant_resource_without_principal_tenant_not_found if {
	code(req({"kind": "api_key", "role": "viewer"}, "tenant.get", {"kind": "tenant", "id": "t2"})) == "POLICY::NOT_FOUND"
}

test_missing_action_denied if {
	d := decide({"principal": key("admin", "")})
	d.allow == false
	d.code == "POLICY::INVALID_ACTION"
}

test_suspended_tenant_denied_even_when_permitted if {
	d := decide(req(key("tenant-admin", "t1"), "sandbox.create", sandbox("t1"))) with data.sandgate.platform as {"suspended_tenants": ["t1"]}
	d.allow == false
	d.code == "POLICY::TENANT_SUSPENDED"
	d.message == "tenant t1 is suspended"
	allowed(req(key("tenant-admin", "t2"), "sandbox.create", sandbox("t2"))) with data.sandgate.platform as {"suspended_tenants": ["t1"]}
}

test_tenant_admin_cannot_mint_admin_keys if {
	doc := object.union(req(key("tenant-admin", "t1"), "key.create", {"kind": "key", "tenant": "t1"}), {"request": {"method": "POST", "body": {"role": "admin"}}})
	d := decide(doc)
	d.allow == false
	d.code == "POLICY::ROLE_ESCALATION"
	allowed(object.union(doc, {"request": {"body": {"role": "member"}}}))
	allowed(object.union(doc, {"principal": key("admin", "")}))
	code(object.union(doc, {"action": "key.update"})) == "POLICY::ROLE_ESCALATION"
	code(object.union(doc, {"principal": {"kind": "sandbox_token", "role": "admin", "tenant": "t1"}})) == "POLICY::ROLE_ESCALATION"
}

test_operator_deny_overrides_allow if {
	d := decide(req(key("admin", ""), "policy.write", {})) with access.deny as {{"code": "OPS::FREEZE", "message": "change freeze"}}
	d == {"allow": false, "code": "OPS::FREEZE", "message": "change freeze"}
}

test_first_deny_by_code if {
	vetoes := {{"code": "B::X", "message": "b"}, {"code": "A::X", "message": "a"}}
	decide(req(key("admin", ""), "policy.write", {})).code == "A::X" with access.deny as vetoes
}

test_allowed_decision_shape if {
	decide(req(key("admin", ""), "sandbox.get", {})) == {"allow": true, "code": "OK", "message": "allowed"}
}

test_principal_without_kind_denied if {
	d := decide({"action": "sandbox.get", "resource": {}})
	d.code == "POLICY::DENIED"
	d.message == "this caller may not perform sandbox.get"
}

test_empty_input_denied if {
	d := access.decision with input as {}
	d.allow == false
}
