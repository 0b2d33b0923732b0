# Package sandgate.access decides every API action: who may do what to which
# resource. The engine evaluates data.sandgate.access.decision and reads
# {allow, code, message} from it.
#
# Extending it: operators add rules to this package in their own files.
#   - `permitted if { ... }` grants more (it is OR-ed with the rules below);
#   - `deny contains {"code": "...", "message": "..."} if { ... }` vetoes,
#     whatever granted the request. Its code and message reach the caller.
package sandgate.access

# An access decision sits on every request's path, so the rules below are
# written flat: they test input.principal.* and input.action directly (OPA's
# rule index then skips the rules that cannot match) and use few helper
# documents.

# An action is "<area>.<verb>", e.g. "sandbox.create" or "audit.read".
action_parts := split(input.action, ".")

area := action_parts[0]

verb := concat(".", array.slice(action_parts, 1, count(action_parts)))

# Actions that change the platform rather than a tenant: admin only.
platform_only if {
	area == "tenant"
	verb != "get"
}

# The policy itself (policy.read, policy.write): the Rego in force names every
# tenant's rules and the platform's data, so only a platform admin reads it.
platform_only if area == "policy"

# What a viewer (and so every tenant role) may do: read, except credentials
# (the key area) and platform-wide actions.
viewer_may if {
	verb in {"get", "list", "read"}
	area != "key"
	not platform_only
}

# own_tenant holds when the principal belongs to a tenant and the request
# names no other: not as the acting tenant, not as the resource's owner, not
# as the resource itself when it is a tenant.
own_tenant if {
	t := input.principal.tenant
	is_string(t)
	t != ""
	object.get(input, "tenant", "") in {t, ""}
	object.get(input, ["resource", "tenant"], "") in {t, ""}
	not other_tenant_resource
}

other_tenant_resource if {
	input.resource.kind == "tenant"
	input.resource.id != ""
	input.resource.id != input.principal.tenant
}

# tenant_mismatch holds when the principal has a tenant and the request
# names another one.
tenant_mismatch if {
	has_tenant
	not own_tenant
	names_any_tenant
}

has_tenant if {
	is_string(input.principal.tenant)
	input.principal.tenant != ""
}

# The request names a tenant as the acting tenant, the resource's owner, or
# the resource itself.
names_any_tenant if input.tenant != ""

names_any_tenant if input.resource.tenant != ""

names_any_tenant if {
	input.resource.kind == "tenant"
	input.resource.id != ""
}

# foreign holds when the request names a tenant that is not the principal's
# (or the principal has none and is no admin): such a resource must look
# absent (404), not forbidden (403), so that ids do not leak across tenants.
foreign if tenant_mismatch

foreign if {
	not has_tenant
	not input.principal.role == "admin"
	names_any_tenant
}

# Principals that carry a role are API keys and console sessions; a role on
# any other kind of credential means nothing.

# admin: everything, in every tenant.
permitted if {
	input.principal.role == "admin"
	input.principal.kind in {"api_key", "session"}
}

# tenant-admin: everything inside its own tenant (keys, plugins, pools
# included) except platform-wide actions.
permitted if {
	input.principal.role == "tenant-admin"
	input.principal.kind in {"api_key", "session"}
	own_tenant
	not platform_only
}

# member: sandboxes, pools, batches, snapshots and named volumes, fully, in its own tenant,
# except the actions kept for tenant-admins. "Fully" includes
# sandbox.access.rotate (POST /v1/sandboxes/{id}/access/rotate), which
# invalidates every access header of the sandbox; a viewer may not.
permitted if {
	input.principal.role == "member"
	input.principal.kind in {"api_key", "session"}
	area in {"sandbox", "pool", "batch", "snapshot", "volume"}
	not tenant_admin_action
	own_tenant
}

# sandbox.publish is the create of a sandbox with extensions["access.public"]
# = "true", whose workload ports then answer anyone on the internet: a
# tenant-admin's (or an admin's) decision. An operator who wants members to
# publish adds `permitted if { input.action == "sandbox.publish"; ... }`.
tenant_admin_action if input.action == "sandbox.publish"

# member and viewer: read-only actions in their own tenant.
permitted if {
	input.principal.role == "member"
	input.principal.kind in {"api_key", "session"}
	viewer_may
	own_tenant
}

permitted if {
	input.principal.role == "viewer"
	input.principal.kind in {"api_key", "session"}
	viewer_may
	own_tenant
}

# A sandbox-bound credential (sandbox token, signed link, preview cookie)
# proxies to its own sandbox only, and to its own port when it is bound to
# one (a signed link always is).
permitted if {
	input.action == "sandbox.proxy"
	input.principal.kind in {"sandbox_token", "signed_link", "cookie"}
	input.principal.sandbox == input.resource.id
	input.principal.sandbox != ""
	port_matches
	not tenant_mismatch
}

port_matches if {
	not input.principal.port
	input.principal.kind != "signed_link"
}

port_matches if input.principal.port == input.resource.port

# A public sandbox's workload ports are open to anyone, anonymous callers
# included. Never its platform ports: the agent (44772) runs commands as root
# and the enforcer (18080) sets the egress policy. (The gateway also never
# reports those ports as public, whatever this policy says.)
permitted if {
	input.action == "sandbox.proxy"
	input.resource.public == true
	not input.resource.port in platform_ports
}

platform_ports := {44772, 18080}

# deny vetoes whatever permitted the request.
deny contains {"code": "POLICY::INVALID_ACTION", "message": "the action is not of the form area.verb"} if {
	not valid_action
}

# Only an admin may hand out the admin role: a tenant-admin creating keys
# must not mint a platform key. The gateway passes the key's role in
# request.body.role.
deny contains {"code": "POLICY::ROLE_ESCALATION", "message": "only an admin may grant the admin role"} if {
	input.action in {"key.create", "key.update"}
	input.request.body.role == "admin"
	not is_admin
}

is_admin if {
	input.principal.role == "admin"
	input.principal.kind in {"api_key", "session"}
}

# data.sandgate.platform.suspended_tenants: tenants the operator froze.
deny contains {"code": "POLICY::TENANT_SUSPENDED", "message": msg} if {
	input.principal.tenant in data.sandgate.platform.suspended_tenants
	msg := sprintf("tenant %s is suspended", [input.principal.tenant])
}

# area.verb with both parts non-empty. (A regex would say more, at a cost
# paid on every request.)
valid_action if {
	indexof(input.action, ".") > 0
	not endswith(input.action, ".")
}

default allow := false

allow if {
	permitted
	count(deny) == 0
}

decision := {"allow": true, "code": "OK", "message": "allowed"} if {
	permitted
	count(deny) == 0
} else := object.union(sort(deny)[0], {"allow": false}) if {
	count(deny) > 0
} else := {"allow": false, "code": "POLICY::NOT_FOUND", "message": "resource not found"} if {
	foreign
} else := {"allow": false, "code": "POLICY::DENIED", "message": denied_message}

# Only reached with a valid action: an invalid one is vetoed above.
denied_message := sprintf("%s may not perform %s", [who, input.action])

who := "an anonymous caller" if {
	input.principal.kind == "anonymous"
} else := sprintf("role %s", [input.principal.role]) if {
	input.principal.kind in {"api_key", "session"}
	is_string(input.principal.role)
} else := sprintf("a %s credential", [input.principal.kind]) if {
	is_string(input.principal.kind)
} else := "this caller"
