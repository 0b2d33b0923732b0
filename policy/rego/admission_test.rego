package sandgate.admission_test

import data.sandgate.admission

base := {
	"tenant": {"id": "t1", "quotas": {}},
	"usage": {"sandboxes": 0, "cpuMillis": 0, "memoryBytes": 0},
	"request": {"image": "python:3.12", "cpuMillis": 500, "memoryBytes": 536870912, "timeoutSeconds": 600},
}

with_quotas(q) := object.union(base, {"tenant": {"id": "t1", "quotas": q}})

with_usage(doc, u) := object.union(doc, {"usage": u})

with_request(doc, r) := object.union(doc, {"request": object.union(base.request, r)})

denials(doc) := d if {
	d := admission.deny with input as doc
}

codes(doc) := {v.code | some v in denials(doc)}

messages(doc) := {v.message | some v in denials(doc)}

test_no_quotas_admits_anything if {
	count(denials(with_request(base, {"cpuMillis": 64000, "memoryBytes": 1e12, "count": 500}))) == 0
}

test_absent_sections_admit if {
	count(denials({"request": {"image": "x"}})) == 0
}

# --- concurrent sandboxes ---

test_concurrent_under_limit if {
	count(denials(with_usage(with_quotas({"maxConcurrent": 5}), {"sandboxes": 4}))) == 0
}

test_concurrent_at_limit if {
	doc := with_usage(with_quotas({"maxConcurrent": 5}), {"sandboxes": 5})
	codes(doc) == {"QUOTA::CONCURRENT_SANDBOXES"}
	messages(doc) == {"tenant t1 may run at most 5 sandboxes at once; 5 are running and 1 more were requested"}
}

test_concurrent_batch_counts_every_sandbox if {
	doc := with_request(with_usage(with_quotas({"maxConcurrent": 10}), {"sandboxes": 4}), {"count": 7})
	codes(doc) == {"QUOTA::CONCURRENT_SANDBOXES"}
}

test_null_quota_is_unlimited if {
	count(denials(with_usage(with_quotas({"maxConcurrent": null}), {"sandboxes": 1000}))) == 0
}

# --- CPU and memory ---

test_cpu_over_limit if {
	doc := with_usage(with_quotas({"maxCpuMillis": 2000}), {"cpuMillis": 1600})
	codes(doc) == {"QUOTA::CPU"}
	messages(doc) == {"tenant t1 may use at most 2000m CPU in total; 1600m are in use and 500m more were requested"}
}

test_cpu_exactly_at_limit if {
	count(denials(with_usage(with_quotas({"maxCpuMillis": 2000}), {"cpuMillis": 1500}))) == 0
}

test_cpu_batch_multiplies if {
	codes(with_request(with_quotas({"maxCpuMillis": 2000}), {"count": 5})) == {"QUOTA::CPU"}
}

test_memory_over_limit if {
	doc := with_usage(with_quotas({"maxMemoryBytes": 1073741824}), {"memoryBytes": 1073741824})
	codes(doc) == {"QUOTA::MEMORY"}
	some m in messages(doc)
	contains(m, "at most 1073741824 bytes")
}

test_memory_under_limit if {
	count(denials(with_quotas({"maxMemoryBytes": 1073741824}))) == 0
}

# --- timeout ---

test_timeout_over_limit if {
	doc := with_request(with_quotas({"maxTimeoutSeconds": 300}), {"timeoutSeconds": 301})
	codes(doc) == {"QUOTA::TIMEOUT"}
	messages(doc) == {"tenant t1 may set a timeout of at most 300 seconds; 301 were requested"}
}

test_timeout_at_limit if {
	count(denials(with_request(with_quotas({"maxTimeoutSeconds": 300}), {"timeoutSeconds": 300}))) == 0
}

test_no_timeout_with_limit_denied if {
	doc := {"tenant": {"id": "t1", "quotas": {"maxTimeoutSeconds": 300}}, "request": {"image": "python:3.12"}}
	messages(doc) == {"tenant t1 must set a timeout of at most 300 seconds (sandboxes without expiry are not allowed)"}
}

test_null_timeout_with_limit_denied if {
	doc := {"tenant": {"id": "t1", "quotas": {"maxTimeoutSeconds": 300}}, "request": {"image": "python:3.12", "timeoutSeconds": null}}
	codes(doc) == {"QUOTA::TIMEOUT"}
}

test_no_timeout_without_limit_admitted if {
	count(denials({"tenant": {"id": "t1", "quotas": {}}, "request": {"image": "python:3.12"}})) == 0
}

# --- batch size ---

test_batch_over_limit if {
	doc := with_request(with_quotas({"maxBatchSize": 10}), {"count": 11})
	codes(doc) == {"QUOTA::BATCH_SIZE"}
	messages(doc) == {"tenant t1 may create at most 10 sandboxes in one batch; 11 were requested"}
}

test_batch_at_limit if {
	count(denials(with_request(with_quotas({"maxBatchSize": 10}), {"count": 10}))) == 0
}

# --- images ---

test_image_allowed_by_glob if {
	count(denials(with_quotas({"allowedImages": ["node:*", "python:*"]}))) == 0
}

test_image_not_allowed if {
	doc := with_request(with_quotas({"allowedImages": ["python:*"]}), {"image": "evil/miner:1"})
	codes(doc) == {"ADMISSION::IMAGE_NOT_ALLOWED"}
	messages(doc) == {`image "evil/miner:1" is not allowed for tenant t1`}
}

test_image_glob_star_stays_in_one_path_segment if {
	q := with_quotas({"allowedImages": ["registry.local/team/*"]})
	count(denials(with_request(q, {"image": "registry.local/team/app:1"}))) == 0
	codes(with_request(q, {"image": "registry.local/team/sub/app:1"})) == {"ADMISSION::IMAGE_NOT_ALLOWED"}
	count(denials(with_request(with_quotas({"allowedImages": ["registry.local/**"]}), {"image": "registry.local/team/sub/app:1"}))) == 0
}

test_empty_allowed_images_means_any if {
	count(denials(with_quotas({"allowedImages": []}))) == 0
}

test_platform_denied_images if {
	doc := with_request(base, {"image": "docker.io/evil/miner:1"})
	ds := denials(doc) with data.sandgate.platform as {"denied_images": ["docker.io/evil/*"]}
	ds == {{"code": "ADMISSION::IMAGE_NOT_ALLOWED", "message": `image "docker.io/evil/miner:1" is not allowed on this platform`}}
	count(denials(base)) == 0 with data.sandgate.platform as {"denied_images": ["docker.io/evil/*"]}
}

# --- runtime ---

test_runtime_required if {
	doc := with_request(with_quotas({"runtime": "runsc"}), {"runtime": "runc"})
	codes(doc) == {"ADMISSION::RUNTIME_REQUIRED"}
	messages(doc) == {"tenant t1 must use the runsc runtime"}
}

test_runtime_required_missing_runtime if {
	codes(with_quotas({"runtime": "runsc"})) == {"ADMISSION::RUNTIME_REQUIRED"}
}

test_runtime_matches if {
	count(denials(with_request(with_quotas({"runtime": "runsc"}), {"runtime": "runsc"}))) == 0
}

# --- invalid requests ---

test_count_must_be_positive_whole if {
	codes(with_request(base, {"count": 0})) == {"ADMISSION::INVALID_REQUEST"}
	codes(with_request(base, {"count": 1.5})) == {"ADMISSION::INVALID_REQUEST"}
	codes(with_request(base, {"count": "3"})) == {"ADMISSION::INVALID_REQUEST"}
}

test_negative_resources_invalid if {
	doc := with_request(base, {"cpuMillis": -1})
	codes(doc) == {"ADMISSION::INVALID_REQUEST"}
	messages(doc) == {"cpuMillis must be a non-negative number"}
}

# --- several violations at once ---

test_every_violation_reported if {
	doc := with_request(
		with_usage(with_quotas({"maxConcurrent": 1, "maxCpuMillis": 100, "maxMemoryBytes": 1, "maxTimeoutSeconds": 60, "maxBatchSize": 1, "allowedImages": ["node:*"], "runtime": "runsc"}), {"sandboxes": 1}),
		{"count": 2},
	)
	codes(doc) == {
		"QUOTA::CONCURRENT_SANDBOXES", "QUOTA::CPU", "QUOTA::MEMORY", "QUOTA::TIMEOUT",
		"QUOTA::BATCH_SIZE", "ADMISSION::IMAGE_NOT_ALLOWED", "ADMISSION::RUNTIME_REQUIRED",
	}
}

test_operator_rule_adds_denial if {
	extra := {{"code": "OPS::NO_LATEST", "message": "no latest tags"}}
	ds := denials(base) with admission.deny as extra
	ds == extra
}

# --- registries ---

registries := {"allowed_registries": ["127.0.0.1:5000", "GHCR.io"]}

test_registry_allowed if {
	doc := with_request(base, {"image": "127.0.0.1:5000/sandgate/base:test", "imageRegistry": "127.0.0.1:5000"})
	ds := denials(doc) with data.sandgate.platform as registries
	count(ds) == 0
	doc2 := with_request(base, {"image": "ghcr.io/x/y:1", "imageRegistry": "ghcr.io"})
	ds2 := denials(doc2) with data.sandgate.platform as registries
	count(ds2) == 0
}

test_registry_not_allowed if {
	doc := with_request(base, {"image": "python:3.12", "imageRegistry": "docker.io"})
	ds := denials(doc) with data.sandgate.platform as registries
	ds == {{"code": "ADMISSION::REGISTRY_NOT_ALLOWED", "message": `image "python:3.12" would be pulled from registry "docker.io", which this platform does not pull from (allowed: 127.0.0.1:5000, GHCR.io)`}}
}

test_registry_rule_skips_images_that_are_not_pulled if {
	doc := with_request(base, {"image": "sandgate/base:1", "imageRegistry": "docker.io", "imageLocal": true})
	ds := denials(doc) with data.sandgate.platform as registries
	count(ds) == 0
}

test_no_registries_means_any if {
	doc := with_request(base, {"image": "python:3.12", "imageRegistry": "docker.io"})
	count(denials(doc)) == 0
	ds := denials(doc) with data.sandgate.platform as {"allowed_registries": []}
	count(ds) == 0
}

# --- volumes ---

host_vol(p) := {"name": "data", "type": "host", "mountPath": "/data", "hostPath": p}

with_volumes(doc, vols) := with_request(doc, {"volumes": vols})

test_host_volume_refused_without_prefixes if {
	codes(with_volumes(base, [host_vol("/srv/data")])) == {"VOLUME::HOST_NOT_ALLOWED"}
}

test_host_volume_under_prefix_admitted if {
	d := admission.deny with input as with_volumes(base, [host_vol("/srv/data/x")])
		with data.sandgate.platform.volume_host_prefixes as ["/srv/data/"]
	count(d) == 0
}

test_host_volume_prefix_is_a_directory_boundary if {
	d := admission.deny with input as with_volumes(base, [host_vol("/srv/database")])
		with data.sandgate.platform.volume_host_prefixes as ["/srv/data"]
	{v.code | some v in d} == {"VOLUME::HOST_NOT_ALLOWED"}
}

test_host_volume_tenant_prefixes_narrow if {
	doc := with_volumes(with_quotas({"hostVolumePrefixes": ["/srv/data/t1"]}), [host_vol("/srv/data/t2")])
	d := admission.deny with input as doc with data.sandgate.platform.volume_host_prefixes as ["/srv/data"]
	{v.code | some v in d} == {"VOLUME::HOST_NOT_ALLOWED"}
}

test_host_volume_tenant_denied if {
	doc := with_volumes(with_quotas({"denyHostVolumes": true}), [host_vol("/srv/data/x")])
	d := admission.deny with input as doc with data.sandgate.platform.volume_host_prefixes as ["/srv/data"]
	{v.code | some v in d} == {"VOLUME::HOST_NOT_ALLOWED"}
}

test_pvc_volume_needs_no_prefix if {
	count(denials(with_volumes(base, [{"name": "v", "type": "pvc", "mountPath": "/v", "claimName": "c"}]))) == 0
}

test_volume_count_quota if {
	vols := [{"name": "a", "type": "pvc", "mountPath": "/a", "claimName": "a"}, {"name": "b", "type": "pvc", "mountPath": "/b", "claimName": "b"}]
	codes(with_volumes(with_quotas({"maxVolumes": 1}), vols)) == {"QUOTA::VOLUMES"}
}

test_volume_size_quota if {
	vols := [{"name": "a", "type": "pvc", "mountPath": "/a", "claimName": "a", "storageBytes": 2048}]
	codes(with_volumes(with_quotas({"maxVolumeBytes": 1024}), vols)) == {"QUOTA::VOLUME_SIZE"}
}

test_host_volume_at_the_prefix_itself_admitted if {
	d := admission.deny with input as with_volumes(base, [host_vol("/srv/data")])
		with data.sandgate.platform.volume_host_prefixes as ["/srv/data"]
	count(d) == 0
}

test_host_volume_root_prefix_covers_all if {
	d := admission.deny with input as with_volumes(base, [host_vol("/anything")])
		with data.sandgate.platform.volume_host_prefixes as ["/"]
	count(d) == 0
}
