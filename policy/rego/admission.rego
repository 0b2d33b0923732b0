# Package sandgate.admission validates requests that create sandboxes (one,
# or a batch of `count`) against the tenant's quotas and the platform's rules.
# The engine evaluates data.sandgate.admission.deny: a set of
# {"code", "message"} objects; an empty set admits the request.
#
# A quota that is absent (or null) is unlimited. Operators add their own
# vetoes in their own files of this package:
#
#	deny contains {"code": "ADMISSION::IMAGE_NOT_ALLOWED", "message": "no latest tags"} if {
#		endswith(input.request.image, ":latest")
#	}
package sandgate.admission

default platform := {}

platform := data.sandgate.platform

tenant_id := object.get(input, ["tenant", "id"], "")

quotas := object.get(input, ["tenant", "quotas"], {})

usage := object.get(input, "usage", {})

req := object.get(input, "request", {})

# limit(name) is the quota named name, defined only when one is set.
limit(name) := n if {
	n := quotas[name]
	is_number(n)
}

# used(name) is the tenant's current consumption (0 when not reported).
used(name) := object.get(usage, name, 0)

# requested(name) is the per-sandbox amount the request asks for.
requested(name) := object.get(req, name, 0)

# How many sandboxes the request creates: 1 unless it is a batch.
instances := object.get(req, "count", 1)

deny contains {"code": "QUOTA::CONCURRENT_SANDBOXES", "message": msg} if {
	max := limit("maxConcurrent")
	current := used("sandboxes")
	current + instances > max
	msg := sprintf("tenant %s may run at most %v sandboxes at once; %v are running and %v more were requested", [tenant_id, max, current, instances])
}

deny contains {"code": "QUOTA::CPU", "message": msg} if {
	max := limit("maxCpuMillis")
	current := used("cpuMillis")
	asked := requested("cpuMillis") * instances
	current + asked > max
	msg := sprintf("tenant %s may use at most %vm CPU in total; %vm are in use and %vm more were requested", [tenant_id, max, current, asked])
}

deny contains {"code": "QUOTA::MEMORY", "message": msg} if {
	max := limit("maxMemoryBytes")
	current := used("memoryBytes")
	asked := requested("memoryBytes") * instances
	current + asked > max
	msg := sprintf("tenant %s may use at most %v bytes of memory in total; %v are in use and %v more were requested", [tenant_id, max, current, asked])
}

# A request without a timeout never expires, which exceeds any maximum.
deny contains {"code": "QUOTA::TIMEOUT", "message": msg} if {
	max := limit("maxTimeoutSeconds")
	not has_timeout
	msg := sprintf("tenant %s must set a timeout of at most %v seconds (sandboxes without expiry are not allowed)", [tenant_id, max])
}

deny contains {"code": "QUOTA::TIMEOUT", "message": msg} if {
	max := limit("maxTimeoutSeconds")
	req.timeoutSeconds > max
	msg := sprintf("tenant %s may set a timeout of at most %v seconds; %v were requested", [tenant_id, max, req.timeoutSeconds])
}

deny contains {"code": "QUOTA::BATCH_SIZE", "message": msg} if {
	max := limit("maxBatchSize")
	instances > max
	msg := sprintf("tenant %s may create at most %v sandboxes in one batch; %v were requested", [tenant_id, max, instances])
}

# allowedImages: glob patterns; "*" stops at "/", "**" crosses it. Absent or
# empty means any image.
deny contains {"code": "ADMISSION::IMAGE_NOT_ALLOWED", "message": msg} if {
	patterns := object.get(quotas, "allowedImages", [])
	is_array(patterns)
	count(patterns) > 0
	not image_matches(patterns)
	msg := sprintf("image %q is not allowed for tenant %s", [object.get(req, "image", ""), tenant_id])
}

# The operator's platform-wide image denylist (data.sandgate.platform.denied_images).
deny contains {"code": "ADMISSION::IMAGE_NOT_ALLOWED", "message": msg} if {
	image_matches(object.get(platform, "denied_images", []))
	msg := sprintf("image %q is not allowed on this platform", [req.image])
}

# The operator's registries allowlist (data.sandgate.platform.allowed_registries, set
# from SANDGATE_IMAGE_REGISTRIES): an image the create would pull must be named under one
# of them. request.imageRegistry is the reference's registry host ("docker.io" for a
# bare name); request.imageLocal is true when nothing will be pulled (the engine holds
# the image, or the gateway never pulls), and such a create is not a pull.
deny contains {"code": "ADMISSION::REGISTRY_NOT_ALLOWED", "message": msg} if {
	allowed := object.get(platform, "allowed_registries", [])
	is_array(allowed)
	count(allowed) > 0
	not object.get(req, "imageLocal", false)
	registry := object.get(req, "imageRegistry", "")
	not registry_allowed(allowed, registry)
	msg := sprintf("image %q would be pulled from registry %q, which this platform does not pull from (allowed: %s)", [object.get(req, "image", ""), registry, concat(", ", allowed)])
}

registry_allowed(allowed, registry) if {
	some r in allowed
	lower(r) == lower(registry)
}

image_matches(patterns) if {
	some pattern in patterns
	glob.match(pattern, ["/"], req.image)
}

# The gateway sets request.runtime to the runtime that will really run the
# sandbox, so a tenant pinned to a runtime (e.g. runsc) gets no other.
deny contains {"code": "ADMISSION::RUNTIME_REQUIRED", "message": msg} if {
	required := quotas.runtime
	is_string(required)
	required != ""
	object.get(req, "runtime", "") != required
	msg := sprintf("tenant %s must use the %s runtime", [tenant_id, required])
}

deny contains {"code": "ADMISSION::INVALID_REQUEST", "message": msg} if {
	not valid_count
	msg := "count must be a whole number of at least 1"
}

deny contains {"code": "ADMISSION::INVALID_REQUEST", "message": msg} if {
	some name in ["cpuMillis", "memoryBytes", "timeoutSeconds"]
	value := req[name]
	value != null
	not non_negative(value)
	msg := sprintf("%s must be a non-negative number", [name])
}

has_timeout if is_number(req.timeoutSeconds)

valid_count if {
	is_number(instances)
	instances >= 1
	instances == floor(instances)
}

non_negative(x) if {
	is_number(x)
	x >= 0
}

# Volumes. request.volumes lists the sandbox's mounts; a host volume's hostPath is
# already resolved by the gateway (symlinks, ..) to where it really leads, so these
# rules judge the real target. Host volumes are allowed only under the operator's
# prefixes (data.sandgate.platform.volume_host_prefixes, set from
# SANDGATE_VOLUME_HOST_PREFIXES; empty = no host volumes), narrowed per tenant by the
# quota hostVolumePrefixes, and refused to a tenant with denyHostVolumes.
volumes := object.get(req, "volumes", [])

host_volumes contains v if {
	some v in volumes
	v.type == "host"
}

host_prefixes := object.get(platform, "volume_host_prefixes", [])

deny contains {"code": "VOLUME::HOST_NOT_ALLOWED", "message": msg} if {
	some v in host_volumes
	count(host_prefixes) == 0
	msg := sprintf("volume %q: host volumes are not enabled on this gateway (the operator sets SANDGATE_VOLUME_HOST_PREFIXES)", [v.name])
}

deny contains {"code": "VOLUME::HOST_NOT_ALLOWED", "message": msg} if {
	some v in host_volumes
	count(host_prefixes) > 0
	not under_any(v.hostPath, host_prefixes)
	# The path is not quoted: it is the resolved one, and would tell where symlinks lead.
	msg := sprintf("volume %q: its host path is outside the allowed prefixes", [v.name])
}

deny contains {"code": "VOLUME::HOST_NOT_ALLOWED", "message": msg} if {
	some v in host_volumes
	tenant_prefixes := object.get(quotas, "hostVolumePrefixes", [])
	count(tenant_prefixes) > 0
	not under_any(v.hostPath, tenant_prefixes)
	msg := sprintf("volume %q: its host path is outside the prefixes tenant %s may mount", [v.name, tenant_id])
}

deny contains {"code": "VOLUME::HOST_NOT_ALLOWED", "message": msg} if {
	some v in host_volumes
	object.get(quotas, "denyHostVolumes", false)
	msg := sprintf("volume %q: tenant %s may not mount host paths", [v.name, tenant_id])
}

deny contains {"code": "QUOTA::VOLUMES", "message": msg} if {
	max := limit("maxVolumes")
	count(volumes) > max
	msg := sprintf("tenant %s may mount at most %v volumes in a sandbox; %v were requested", [tenant_id, max, count(volumes)])
}

deny contains {"code": "QUOTA::VOLUME_SIZE", "message": msg} if {
	max := limit("maxVolumeBytes")
	asked := sum([object.get(v, "storageBytes", 0) | some v in volumes])
	asked > max
	msg := sprintf("tenant %s may ask for at most %v bytes of volume storage in a sandbox; %v were requested", [tenant_id, max, asked])
}

# under_any(p, prefixes): p is one of the prefixes or lies below one (a prefix
# "/data" covers "/data/x", never "/database").
under_any(p, prefixes) if {
	some prefix in prefixes
	trimmed := trim_right(prefix, "/")
	under(p, trimmed)
}

under(p, prefix) if p == prefix

# The prefix "/" is trimmed to "" and so covers every absolute path.
under(p, prefix) if startswith(p, concat("", [prefix, "/"]))
