package modules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// kind says how a setting's Caddyfile value is read and what Validate demands of it.
type kind int

const (
	// kindString is one word, taken as it is.
	kindString kind = iota
	// kindSecret is one word that should be a placeholder ({env.VAR}): Provision
	// resolves it, so that the config Caddy keeps holds only the placeholder.
	kindSecret
	// kindList is comma-separated, so that one environment variable holds the whole list.
	kindList
	// kindDuration is a Caddy duration ("90s", "2h", "7d"), never negative.
	kindDuration
	// kindInt is a positive integer.
	kindInt
)

// setting is one option of the `sandgate` app. The table below is the one list of them:
// the Caddyfile parser reads it, the default Caddyfile's `sandgate` block is checked
// against it (env, default), docs/configuration.md's tables are checked against it, and
// coreKey is built from it, so a setting added here is parsed, documented and rebuilds
// the core on reload without anything else to remember.
type setting struct {
	// name is the Caddyfile subdirective and the JSON key.
	name string
	// env is the environment variable the default Caddyfile reads it from.
	env string
	// def is the default the default Caddyfile writes ({$ENV:def}); empty: none there.
	def  string
	kind kind
	// values, when set, are the only values accepted (besides empty).
	values []string
	// live marks a setting a reload applies to the running core without rebuilding it.
	live bool
	// spaces marks a value that may hold spaces (commands): the default Caddyfile
	// quotes it, so that it stays one argument.
	spaces bool
	// doc is the one-line comment of the Caddyfile syntax.
	doc string
	// field points at the setting's field in an App.
	field func(*App) any
}

// settings lists every option of the `sandgate` app, in the default Caddyfile's order.
var settings = []setting{
	{name: "api_key", env: "SANDGATE_API_KEY", kind: kindSecret, live: true, doc: "better {env.VAR}: resolved at provision, never in the config", field: func(a *App) any { return &a.APIKey }},
	{name: "api_key_file", env: "SANDGATE_API_KEY_FILE", live: true, doc: "a file holding the key", field: func(a *App) any { return &a.APIKeyFile }},
	{name: "redis_url", env: "SANDGATE_REDIS_URL", kind: kindSecret, doc: "empty: embedded store; {env.VAR} keeps a password out of the config", field: func(a *App) any { return &a.RedisURL }},
	{name: "redis_prefix", env: "SANDGATE_REDIS_PREFIX", doc: "key namespace", field: func(a *App) any { return &a.RedisPrefix }},
	{name: "redis_cluster", env: "SANDGATE_REDIS_CLUSTER", def: "off", values: []string{"on", "off"}, doc: "on: redis_url seeds a Redis Cluster (more seeds as ?addr=host:port)", field: func(a *App) any { return &a.RedisCluster }},
	{name: "store_dir", env: "SANDGATE_STORE_DIR", doc: "the embedded store's directory, held by one gateway at a time (default: a free slot under the user's configuration directory)", field: func(a *App) any { return &a.StoreDir }},
	{name: "runtime", env: "SANDGATE_RUNTIME", def: "docker", doc: "docker|kubernetes", field: func(a *App) any { return &a.Runtime }},
	{name: "docker_host", env: "SANDGATE_DOCKER_HOST", doc: "unix:///…", field: func(a *App) any { return &a.DockerHost }},
	{name: "docker_network", env: "SANDGATE_DOCKER_NETWORK", def: "sandgate", doc: "the sandboxes' bridge network", field: func(a *App) any { return &a.DockerNetwork }},
	{name: "antispoof", env: "SANDGATE_ANTISPOOF", def: "on", values: []string{"on", "off"}, doc: "on|off: docker: pin each sandbox's bridge port to its own IP and MAC (needs root on the engine's host)", field: func(a *App) any { return &a.AntiSpoof }},
	{name: "container_log_max", env: "SANDGATE_CONTAINER_LOG_MAX", def: "10m", doc: "size|off: docker: each container's output log kept as two files of this size at most where the engine's log driver is json-file or local; off: the engine's own settings", field: func(a *App) any { return &a.ContainerLogMax }},
	{name: "enforcer", env: "SANDGATE_ENFORCER", def: "auto", values: []string{"auto", "process", "container"}, doc: "auto|process|container: docker: each sandbox's egress enforcer as a host process in its network namespace, or as a sidecar container; auto: a process where the gateway is root on the engine's host with version 1 cgroups", field: func(a *App) any { return &a.Enforcer }},
	{name: "kubeconfig", env: "SANDGATE_KUBECONFIG", doc: "empty: in-cluster config", field: func(a *App) any { return &a.Kubeconfig }},
	{name: "namespace", env: "SANDGATE_NAMESPACE", def: "sandgate-sandboxes", doc: "the Kubernetes runtime's sandbox namespace", field: func(a *App) any { return &a.Namespace }},
	{name: "k8s_agent_image", env: "SANDGATE_K8S_AGENT_IMAGE", doc: "image the agent is copied from", field: func(a *App) any { return &a.K8sAgentImage }},
	{name: "k8s_gvisor_runtime_class", env: "SANDGATE_K8S_GVISOR_RUNTIME_CLASS", def: "gvisor", doc: "RuntimeClass of gVisor sandboxes", field: func(a *App) any { return &a.K8sGVisorRuntimeClass }},
	{name: "k8s_ephemeral_storage", env: "SANDGATE_K8S_EPHEMERAL_STORAGE", def: "10Gi", doc: "each sandbox's bound on its writable layer and logs (a Kubernetes quantity; 0: none): the kubelet evicts a pod past it", field: func(a *App) any { return &a.K8sEphemeralStorage }},
	{name: "k8s_qps", env: "SANDGATE_K8S_QPS", def: "50", kind: kindInt, doc: "bound on the runtime's API requests", field: func(a *App) any { return &a.K8sQPS }},
	{name: "k8s_burst", env: "SANDGATE_K8S_BURST", def: "100", kind: kindInt, doc: "burst of the runtime's API requests", field: func(a *App) any { return &a.K8sBurst }},
	{name: "agent_binary", env: "SANDGATE_AGENT_BINARY", doc: "default: sandbox-agent beside sandgate", field: func(a *App) any { return &a.AgentBinary }},
	{name: "min_timeout", env: "SANDGATE_MIN_TIMEOUT", def: "60s", kind: kindDuration, doc: "shortest sandbox timeout", field: func(a *App) any { return &a.MinTimeout }},
	{name: "max_timeout", env: "SANDGATE_MAX_TIMEOUT", def: "168h", kind: kindDuration, doc: "longest sandbox timeout", field: func(a *App) any { return &a.MaxTimeout }},
	{name: "require_timeout", env: "SANDGATE_REQUIRE_TIMEOUT", def: "off", values: []string{"on", "off"}, doc: "on|off: on refuses a create without timeout (no expiry) with 400, unless its tenant allows manual cleanup", field: func(a *App) any { return &a.RequireTimeout }},
	{name: "default_timeout", env: "SANDGATE_DEFAULT_TIMEOUT", kind: kindDuration, doc: "refused when set: a create without timeout never expires (see require_timeout)", field: func(a *App) any { return &a.DefaultTimeout }},
	{name: "ready_timeout", env: "SANDGATE_READY_TIMEOUT", def: "30s", kind: kindDuration, doc: "wait for a new sandbox's agent", field: func(a *App) any { return &a.ReadyTimeout }},
	{name: "failed_retention", env: "SANDGATE_FAILED_RETENTION", def: "10m", kind: kindDuration, doc: "how long Failed sandboxes stay listed", field: func(a *App) any { return &a.FailedRetention }},
	{name: "sync_interval", env: "SANDGATE_SYNC_INTERVAL", def: "2s", kind: kindDuration, doc: "reconciliation with the runtime", field: func(a *App) any { return &a.SyncInterval }},
	{name: "public_address", env: "SANDGATE_PUBLIC_ADDRESS", doc: "host[:port] put into endpoints", field: func(a *App) any { return &a.PublicAddress }},
	{name: "public_url", env: "SANDGATE_PUBLIC_URL", doc: "http(s)://host[:port]; https: cookies are Secure behind a TLS proxy", field: func(a *App) any { return &a.PublicURL }},
	{name: "preview_domain", env: "SANDGATE_PREVIEW_DOMAIN", doc: "domain of host-mode preview URLs", field: func(a *App) any { return &a.PreviewDomain }},
	{name: "cluster_id", env: "SANDGATE_CLUSTER_ID", doc: "whose sandboxes this gateway owns (default: kept in the store)", field: func(a *App) any { return &a.ClusterID }},
	{name: "policy_dir", env: "SANDGATE_POLICY_DIR", doc: "operator's Rego and data, hot-reloaded", field: func(a *App) any { return &a.PolicyDir }},
	{name: "oci_runtime", env: "SANDGATE_OCI_RUNTIME", doc: "runc|runsc", field: func(a *App) any { return &a.OCIRuntime }},
	{name: "read_only_rootfs", env: "SANDGATE_READ_ONLY_ROOTFS", def: "off", values: []string{"on", "off"}, doc: "on|off", field: func(a *App) any { return &a.ReadOnlyRootfs }},
	{name: "renew_cooldown", env: "SANDGATE_RENEW_COOLDOWN", def: "1m", kind: kindDuration, doc: "least time between two renewals-on-access", field: func(a *App) any { return &a.RenewCooldown }},
	{name: "pool_wait", env: "SANDGATE_POOL_WAIT", def: "2s", kind: kindDuration, doc: "wait of a claim from an empty pool", field: func(a *App) any { return &a.PoolWait }},
	{name: "pool_fallback", env: "SANDGATE_POOL_FALLBACK", def: "cold", values: []string{"cold", "fail"}, doc: "cold|fail", field: func(a *App) any { return &a.PoolFallback }},
	{name: "pool_concurrency", env: "SANDGATE_POOL_CONCURRENCY", def: "4", kind: kindInt, doc: "warm sandboxes starting at once", field: func(a *App) any { return &a.PoolConcurrency }},
	{name: "agent_idle_timeout", env: "SANDGATE_AGENT_IDLE_TIMEOUT", def: "2m", kind: kindDuration, doc: "idle keep-alive connections to agents close after this (warm members' are kept open)", field: func(a *App) any { return &a.AgentIdleTimeout }},
	{name: "egress", env: "SANDGATE_EGRESS", def: "on", values: []string{"on", "off"}, doc: "on|off", field: func(a *App) any { return &a.Egress }},
	{name: "egress_default_action", env: "SANDGATE_EGRESS_DEFAULT_ACTION", values: []string{"allow", "deny"}, doc: "allow|deny", field: func(a *App) any { return &a.EgressDefaultAction }},
	{name: "egress_always_deny", env: "SANDGATE_EGRESS_ALWAYS_DENY", kind: kindList, doc: "target,target,…", field: func(a *App) any { return &a.EgressAlwaysDeny }},
	{name: "egress_always_allow", env: "SANDGATE_EGRESS_ALWAYS_ALLOW", kind: kindList, doc: "target,target,…", field: func(a *App) any { return &a.EgressAlwaysAllow }},
	{name: "egress_gateway_addresses", env: "SANDGATE_EGRESS_GATEWAY_ADDRESSES", kind: kindList, doc: "ip-or-cidr,…, beside the host's own addresses and its Docker bridges'", field: func(a *App) any { return &a.EgressGatewayAddresses }},
	{name: "sandbox_dns", env: "SANDGATE_SANDBOX_DNS", kind: kindList, doc: "ipv4,…: the sandboxes' DNS servers (default: docker: the engine's, from the host's resolv.conf; kubernetes: the cluster's)", field: func(a *App) any { return &a.SandboxDNS }},
	{name: "vault_schemes", env: "SANDGATE_VAULT_SCHEMES", kind: kindList, values: []string{"https", "http"}, doc: "https[,http]: schemes credential-vault bindings may name (default: https)", field: func(a *App) any { return &a.VaultSchemes }},
	{name: "vault_upstream_ca", env: "SANDGATE_VAULT_UPSTREAM_CA", doc: "PEM roots the credential vault trusts upstream, besides the system's", field: func(a *App) any { return &a.VaultUpstreamCA }},
	{name: "image_pull", env: "SANDGATE_PULL", def: "missing", values: []string{"never", "missing", "always"}, doc: "docker: when a create pulls its image", field: func(a *App) any { return &a.ImagePull }},
	{name: "image_registries", env: "SANDGATE_IMAGE_REGISTRIES", kind: kindList, doc: "registries images may be pulled from (empty: any but those on addresses of the platform itself)", field: func(a *App) any { return &a.ImageRegistries }},
	{name: "volume_host_prefixes", env: "SANDGATE_VOLUME_HOST_PREFIXES", kind: kindList, doc: "host directories sandboxes may bind-mount (empty: none)", field: func(a *App) any { return &a.VolumeHostPrefixes }},
	{name: "e2b_prefix", env: "SANDGATE_E2B_PREFIX", def: "/e2b", live: true, doc: "path of the E2B door's control API (E2B_API_URL=http://<gateway>/e2b); off: no E2B door", field: func(a *App) any { return &a.E2BPrefix }},
	{name: "image_builds", env: "SANDGATE_IMAGE_BUILDS", kind: kindList, spaces: true, doc: "image[+image…]=command,…: images built in the background once the gateway serves, one at a time (Docker; make run's large images); a create naming one before it is built gets SANDBOX::IMAGE_BUILDING", field: func(a *App) any { return &a.ImageBuilds }},
	{name: "e2b_templates", env: "SANDGATE_E2B_TEMPLATES", kind: kindList, live: true, doc: "alias=image or alias=pool:<name>,…: the E2B door's templates (base: sandgate/e2b-base)", field: func(a *App) any { return &a.E2BTemplates }},
	{name: "plugin_cache_dir", env: "SANDGATE_PLUGIN_CACHE_DIR", doc: "compiled WASM plugins survive restarts", field: func(a *App) any { return &a.PluginCacheDir }},
	{name: "plugin_timeout", env: "SANDGATE_PLUGIN_TIMEOUT", def: "100ms", kind: kindDuration, doc: "default deadline of a plugin hook call", field: func(a *App) any { return &a.PluginTimeout }},
	{name: "metrics_listen", env: "SANDGATE_METRICS_LISTEN", doc: "host:port serving /metrics without credentials", field: func(a *App) any { return &a.MetricsListen }},
	{name: "metrics_tenant_label", env: "SANDGATE_METRICS_TENANT_LABEL", def: "on", values: []string{"on", "off"}, doc: "on|off: the tenant label of sandgate_sandboxes", field: func(a *App) any { return &a.MetricsTenantLabel }},
	{name: "sandbox_metrics_interval", env: "SANDGATE_SANDBOX_METRICS_INTERVAL", def: "5s", doc: "how often each sandbox's resource use is read (a duration, or off)", field: func(a *App) any { return &a.SandboxMetricsInterval }},
	{name: "test_clock", env: "SANDGATE_TEST_CLOCK", def: "off", values: []string{"on", "off"}, doc: "on|off: tests only; the admin may move the gateway's clock", field: func(a *App) any { return &a.TestClock }},
}

// settingNamed returns the setting called name.
func settingNamed(name string) (setting, bool) {
	i := slices.IndexFunc(settings, func(s setting) bool { return s.name == name })
	if i < 0 {
		return setting{}, false
	}
	return settings[i], true
}

// parse sets the setting in a from its Caddyfile value; an empty value (an unset
// environment variable) keeps the default.
func (s setting) parse(a *App, val string) error {
	switch p := s.field(a).(type) {
	case *string:
		*p = val
	case *[]string:
		for _, item := range strings.Split(val, ",") {
			if item = strings.TrimSpace(item); item != "" {
				*p = append(*p, item)
			}
		}
	case *caddy.Duration:
		if val == "" {
			return nil
		}
		d, err := caddy.ParseDuration(val)
		if err != nil {
			return err
		}
		if d < 0 {
			return fmt.Errorf("must not be negative")
		}
		*p = caddy.Duration(d)
	case *int:
		if val == "" {
			return nil
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 {
			return fmt.Errorf("want a positive integer, got %q", val)
		}
		*p = n
	default:
		panic(fmt.Sprintf("setting %s: field of type %T", s.name, p))
	}
	return nil
}

// check rejects a value of the setting in a that no Caddyfile would have produced (the
// JSON config is not parsed by parse).
func (s setting) check(a *App) error {
	switch p := s.field(a).(type) {
	case *string:
		if len(s.values) > 0 && *p != "" && !slices.Contains(s.values, *p) {
			return fmt.Errorf("%s %q: want %s", s.name, *p, strings.Join(s.values, " or "))
		}
	case *[]string:
		for _, v := range *p {
			if len(s.values) > 0 && !slices.Contains(s.values, v) {
				return fmt.Errorf("%s %q: each value is %s", s.name, v, strings.Join(s.values, " or "))
			}
		}
	case *caddy.Duration:
		if *p < 0 {
			return fmt.Errorf("%s: must not be negative", s.name)
		}
	case *int:
		if *p < 0 {
			return fmt.Errorf("%s: want a positive integer, got %d", s.name, *p)
		}
	}
	return nil
}

// value renders the setting's value in a for coreKey.
func (s setting) value(a *App) string {
	switch p := s.field(a).(type) {
	case *string:
		return strconv.Quote(*p)
	case *[]string:
		return fmt.Sprintf("%q", *p)
	case *caddy.Duration:
		return strconv.FormatInt(int64(*p), 10)
	case *int:
		return strconv.Itoa(*p)
	}
	panic("unreachable")
}

// coreKey identifies the settings a core is built from: every setting but the live
// ones, so that a reload changing any of them builds a new core (the store, shared
// through its own pool, survives that). It is a digest because the settings hold
// secrets (redis_url) and the key is kept for the core's whole life.
func (a *App) coreKey() string {
	h := sha256.New()
	for _, s := range settings {
		if !s.live {
			fmt.Fprintf(h, "%s=%s\n", s.name, s.value(a))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// caddyfileValue is how the default Caddyfile reads the setting from its variable.
func (s setting) caddyfileValue() string {
	switch {
	case s.kind == kindSecret:
		return "{env." + s.env + "}"
	case s.def != "":
		return "{$" + s.env + ":" + s.def + "}"
	}
	if s.spaces {
		return `"{$` + s.env + `}"`
	}
	return "{$" + s.env + "}"
}
