package modules

import (
	_ "embed"
	"strconv"
	strs "strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// DefaultCaddyfile is what `sandgate run` uses when no config is given. Every setting
// comes from a SANDGATE_* environment variable.
//
//go:embed Caddyfile
var DefaultCaddyfile []byte

func init() {
	httpcaddyfile.RegisterGlobalOption("sandgate", parseGlobalOption)
	httpcaddyfile.RegisterHandlerDirective("sandgate", parseHandlerDirective)
	httpcaddyfile.RegisterDirectiveOrder("sandgate", httpcaddyfile.Before, "file_server")
}

// parseGlobalOption sets up the sandgate app:
//
//	sandgate {
//		api_key          <key>            # better {env.VAR}: resolved at provision, never in the config
//		api_key_file     <path>           # a file holding the key
//		redis_url        <redis://…>      # empty: embedded store; {env.VAR} keeps a password out of the config
//		redis_prefix     <prefix>
//		runtime          docker|kubernetes
//		docker_host      <unix:///…>
//		docker_network   <name>
//		kubeconfig       <path>           # empty: in-cluster config
//		namespace        <name>           # the Kubernetes runtime's sandbox namespace
//		k8s_agent_image  <image>
//		k8s_gvisor_runtime_class <name>
//		k8s_qps          <n>
//		k8s_burst        <n>
//		agent_binary     <path>
//		min_timeout      <duration>
//		max_timeout      <duration>
//		ready_timeout    <duration>
//		failed_retention <duration>
//		sync_interval    <duration>
//		public_address   <host[:port]>
//		public_url       <http(s)://host[:port]>   # https: cookies are Secure behind a TLS proxy
//		cluster_id       <label value>    # whose sandboxes this gateway owns (default: kept in the store)
//		preview_domain   <domain>
//		policy_dir       <dir>
//		oci_runtime      runc|runsc
//		read_only_rootfs on|off
//		renew_cooldown   <duration>
//		pool_wait        <duration>
//		pool_fallback    cold|fail
//		pool_concurrency <n>
//		egress           on|off
//		egress_default_action    allow|deny
//		egress_always_deny       <target,target,…>
//		egress_always_allow      <target,target,…>
//		egress_gateway_addresses <ip-or-cidr,…>   # beside the host's own addresses and its Docker bridges'
//		image_pull       never|missing|always   # docker: when a create pulls its image
//		image_registries <host,host,…>    # registries images may be pulled from (empty: any)
//		plugin_cache_dir <dir>            # compiled WASM plugins survive restarts
//		plugin_timeout   <duration>       # default deadline of a plugin hook call
//	}
//
// A setting whose value is an empty environment variable keeps its default.
func parseGlobalOption(d *caddyfile.Dispenser, _ any) (any, error) {
	app := new(App)
	d.Next() // option name
	for d.NextBlock(0) {
		name := d.Val()
		var val string
		if d.NextArg() {
			val = d.Val()
		}
		if d.NextArg() {
			return nil, d.ArgErr()
		}
		strings := map[string]*string{
			"api_key": &app.APIKey, "api_key_file": &app.APIKeyFile, "redis_url": &app.RedisURL, "redis_prefix": &app.RedisPrefix,
			"runtime": &app.Runtime, "docker_host": &app.DockerHost, "docker_network": &app.DockerNetwork,
			"agent_binary": &app.AgentBinary, "public_address": &app.PublicAddress, "public_url": &app.PublicURL, "preview_domain": &app.PreviewDomain, "cluster_id": &app.ClusterID,
			"pool_fallback": &app.PoolFallback, "policy_dir": &app.PolicyDir,
			"oci_runtime": &app.OCIRuntime, "read_only_rootfs": &app.ReadOnlyRootfs,
			"egress": &app.Egress, "egress_default_action": &app.EgressDefaultAction,
			"plugin_cache_dir": &app.PluginCacheDir,
			"kubeconfig":       &app.Kubeconfig, "namespace": &app.Namespace, "k8s_agent_image": &app.K8sAgentImage,
			"k8s_gvisor_runtime_class": &app.K8sGVisorRuntimeClass,
			"image_pull":               &app.ImagePull,
			"metrics_listen":           &app.MetricsListen, "metrics_tenant_label": &app.MetricsTenantLabel, "sandbox_metrics_interval": &app.SandboxMetricsInterval,
		}
		lists := map[string]*[]string{
			"egress_always_deny": &app.EgressAlwaysDeny, "egress_always_allow": &app.EgressAlwaysAllow,
			"egress_gateway_addresses": &app.EgressGatewayAddresses,
			"image_registries":         &app.ImageRegistries,
		}
		if p, ok := lists[name]; ok {
			// Comma-separated, so that one environment variable holds the whole list.
			for _, item := range strs.Split(val, ",") {
				if item = strs.TrimSpace(item); item != "" {
					*p = append(*p, item)
				}
			}
			continue
		}
		durations := map[string]*caddy.Duration{
			"min_timeout": &app.MinTimeout, "max_timeout": &app.MaxTimeout, "default_timeout": &app.DefaultTimeout, "ready_timeout": &app.ReadyTimeout,
			"failed_retention": &app.FailedRetention, "sync_interval": &app.SyncInterval, "pool_wait": &app.PoolWait,
			"renew_cooldown": &app.RenewCooldown, "plugin_timeout": &app.PluginTimeout,
		}
		ints := map[string]*int{"pool_concurrency": &app.PoolConcurrency, "k8s_qps": &app.K8sQPS, "k8s_burst": &app.K8sBurst}
		if p, ok := ints[name]; ok {
			if val == "" {
				continue
			}
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 {
				return nil, d.Errf("%s: want a positive integer, got %q", name, val)
			}
			*p = n
			continue
		}
		if p, ok := strings[name]; ok {
			*p = val
			continue
		}
		if p, ok := durations[name]; ok {
			if val == "" {
				continue
			}
			dur, err := caddy.ParseDuration(val)
			if err != nil {
				return nil, d.Errf("%s: %v", name, err)
			}
			if dur < 0 {
				return nil, d.Errf("%s: must not be negative", name)
			}
			*p = caddy.Duration(dur)
			continue
		}
		return nil, d.Errf("unknown sandgate setting %q", name)
	}
	return httpcaddyfile.App{Name: "sandgate", Value: caddyconfig.JSON(app, nil)}, nil
}

// parseHandlerDirective: `sandgate` in a site block mounts the gateway API.
func parseHandlerDirective(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	h.Next()
	if h.NextArg() {
		return nil, h.ArgErr()
	}
	return new(Handler), nil
}
