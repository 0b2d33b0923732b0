# Package sandgate.access decides every API action: who may do what to which
# resource. The engine evaluates data.sandgate.access.decision and reads
# {allow, code, message} from it.
#
# Extending it: operators add rules to this package in their own files.
#   - `permitted if { ... }` grants more (it is OR-ed with the rules below);
#   - `deny contains {"code": "...", "message": "..."} if { ... }` vetoes,
#     whatever granted the request. Its code and message reach the caller.
package sandgate.access

# The platform's data (gateway options and data files under sandgate/platform).
default platform := {}

platform := data.sandgate.platform

principal := object.get(input, "principal", {})

# An action is "<area>.<verb>", e.g. "sandbox.create" or "audit.read".
action_parts := split(input.action, ".")

area := action_parts[0]

verb := concat(".", array.slice(action_parts, 1, count(action_parts)))

# Verbs that only read; the viewer role may use them.
read_verbs := {"get", "list", "read"}

# Areas that hold credentials: never readable below tenant-admin.
private_areas := {"key"}

# Areas a member may use fully in its own tenant.
member_areas := {"sandbox", "pool", "batch", "snapshot"}

# Principals that carry a role: API keys, and console sessions.
role_kinds := {"api_key", "session"}

# Principals bound to one sandbox (and maybe one port): they may only proxy.
bound_kinds := {"sandbox_token", "signed_link", "cookie"}

# Actions that change the platform rather than a tenant: admin only.
platform_only if {
	area == "tenant"
	verb != "get"
}

platform_only if input.action == "policy.write"

# Every tenant the request names: the acting tenant, the resource's owner,
# and the tenant itself when the resource is a tenant.
named_tenants contains t if {
	t := input.tenant
	is_string(t)
	t != ""
}

named_tenants contains t if {
	t := input.resource.tenant
	is_string(t)
	t != ""
}

named_tenants contains t if {
	input.resource.kind == "tenant"
	t := input.resource.id
	is_string(t)
	t != ""
}

# has_tenant holds when the principal belongs to a tenant.
has_tenant if {
	is_string(principal.tenant)
	principal.tenant != ""
}

# own_tenant holds when the principal has a tenant and the request names no
# other one.
own_tenant if {
	has_tenant
	every t in named_tenants {
		t == principal.tenant
	}
}

# tenant_mismatch holds when the principal's tenant differs from a tenant
# the request names.
tenant_mismatch if {
	has_tenant
	some t in named_tenants
	t != principal.tenant
}

# foreign holds when the request names a tenant that is not the principal's
# (or the principal has none and is no admin): such a resource must look
# absent (404), not forbidden (403), so that ids do not leak across tenants.
foreign if tenant_mismatch

foreign if {
	not has_tenant
	not has_role("admin")
	count(named_tenants) > 0
}

# What a viewer (and so every tenant role) may do: read, except credentials
# and platform-wide actions.
viewer_may if {
	verb in read_verbs
	not area in private_areas
	not platform_only
}

has_role(role) if {
	principal.kind in role_kinds
	principal.role == role
}

# admin: everything, in every tenant.
permitted if has_role("admin")

# tenant-admin: everything inside its own tenant (keys, plugins, pools
# included) except platform-wide actions.
permitted if {
	has_role("tenant-admin")
	own_tenant
	not platform_only
}

# member: sandboxes, pools, batches and snapshots, fully, in its own tenant.
permitted if {
	has_role("member")
	own_tenant
	area in member_areas
}

# member and viewer: read-only actions in their own tenant.
permitted if {
	some role in {"member", "viewer"}
	has_role(role)
	own_tenant
	viewer_may
}

# A sandbox-bound credential proxies to its own sandbox only, and to its own
# port when it is bound to one (a signed link always is).
permitted if {
	principal.kind in bound_kinds
	input.action == "sandbox.proxy"
	is_string(principal.sandbox)
	principal.sandbox != ""
	principal.sandbox == input.resource.id
	port_matches
	not tenant_mismatch
}

port_bound if principal.port != null

port_matches if {
	principal.kind != "signed_link"
	not port_bound
}

port_matches if {
	port_bound
	principal.port == input.resource.port
}

# A public sandbox's ports are open to anyone, anonymous callers included.
permitted if {
	input.action == "sandbox.proxy"
	input.resource.public == true
}

# deny vetoes whatever permitted the request.
deny contains {"code": "POLICY::INVALID_ACTION", "message": msg} if {
	not valid_action
	msg := "the action is not of the form area.verb"
}

deny contains {"code": "POLICY::TENANT_SUSPENDED", "message": msg} if {
	some t in object.get(platform, "suspended_tenants", [])
	t == principal.tenant
	msg := sprintf("tenant %s is suspended", [t])
}

valid_action if regex.match(`^[a-z][a-z0-9_-]*\.[a-z*][a-z0-9_.*-]*$`, input.action)

default allow := false

allow if {
	permitted
	count(deny) == 0
}

decision := {"allow": true, "code": "OK", "message": "allowed"} if {
	allow
} else := object.union(sort(deny)[0], {"allow": false}) if {
	count(deny) > 0
} else := {"allow": false, "code": "POLICY::NOT_FOUND", "message": "resource not found"} if {
	foreign
} else := {"allow": false, "code": "POLICY::DENIED", "message": denied_message}

# Only reached with a valid action: an invalid one is vetoed above.
denied_message := sprintf("%s may not perform %s", [who, input.action])

who := "an anonymous caller" if {
	principal.kind == "anonymous"
} else := sprintf("role %s", [principal.role]) if {
	principal.kind in role_kinds
	is_string(principal.role)
} else := sprintf("a %s credential", [principal.kind]) if {
	is_string(principal.kind)
} else := "this caller"
