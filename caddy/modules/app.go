// Package modules holds sandgate's Caddy modules: the `sandgate` app, which owns the
// long-lived parts (store, runtime, the lifecycle service), the `http.handlers.sandgate`
// handler that mounts the gateway API, their Caddyfile syntax and the CLI subcommands.
// It is thin glue: parse config, build the core, hand requests to gateway/api.
package modules

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/runtimes/docker"
	"github.com/sandgate/sandgate/runtimes/kubernetes"
)

func init() {
	caddy.RegisterModule(App{})
}

// App is the `sandgate` Caddy app. Its config says where state lives and which runtime
// runs sandboxes; the core it builds survives config reloads (it is shared through a
// usage pool keyed by that config), so an embedded store keeps its data across reloads.
type App struct {
	// APIKey is the platform admin key. Write a placeholder resolved at provision,
	// {env.SANDGATE_API_KEY} as the default Caddyfile does, rather than the value, so
	// that the config (admin API, autosave, `sandgate adapt`) never holds the key.
	APIKey string `json:"api_key,omitempty"`
	// APIKeyFile is a file holding the platform admin key (read at provision, trailing
	// whitespace dropped); it takes precedence over APIKey.
	APIKeyFile string `json:"api_key_file,omitempty"`
	// RedisURL is a redis:// URL; empty runs the embedded in-process store. It may
	// carry a password, so it is a placeholder too ({env.SANDGATE_REDIS_URL}).
	RedisURL string `json:"redis_url,omitempty"`
	// RedisPrefix namespaces sandgate's keys (default "sg:").
	RedisPrefix string `json:"redis_prefix,omitempty"`
	// Runtime selects the engine: "docker" (default) or "kubernetes".
	Runtime string `json:"runtime,omitempty"`
	// DockerHost overrides DOCKER_HOST.
	DockerHost string `json:"docker_host,omitempty"`
	// DockerNetwork is the bridge network sandboxes join (default "sandgate").
	DockerNetwork string `json:"docker_network,omitempty"`
	// Kubeconfig is the kubeconfig of the Kubernetes runtime; empty uses the in-cluster
	// config.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Namespace holds the Kubernetes runtime's sandbox pods (default "sandgate-sandboxes").
	Namespace string `json:"namespace,omitempty"`
	// K8sAgentImage is the image the Kubernetes runtime copies the agent from (default
	// sandgate/agent:<version>).
	K8sAgentImage string `json:"k8s_agent_image,omitempty"`
	// K8sGVisorRuntimeClass is the RuntimeClass of gVisor sandboxes (default "gvisor").
	K8sGVisorRuntimeClass string `json:"k8s_gvisor_runtime_class,omitempty"`
	// K8sQPS and K8sBurst bound the Kubernetes runtime's API requests (default 50, 100).
	K8sQPS   int `json:"k8s_qps,omitempty"`
	K8sBurst int `json:"k8s_burst,omitempty"`
	// AgentBinary is the static sandbox-agent injected into sandboxes (default: next to
	// the sandgate executable).
	AgentBinary string `json:"agent_binary,omitempty"`
	// MinTimeout and MaxTimeout bound a sandbox's lifetime (defaults 60s and 7 days).
	MinTimeout caddy.Duration `json:"min_timeout,omitempty"`
	MaxTimeout caddy.Duration `json:"max_timeout,omitempty"`
	// DefaultTimeout is the lifetime of a sandbox created with timeout null when its
	// tenant does not allow manual cleanup (default: MaxTimeout).
	DefaultTimeout caddy.Duration `json:"default_timeout,omitempty"`
	// ReadyTimeout bounds the wait for a new sandbox's agent (default 30s).
	ReadyTimeout caddy.Duration `json:"ready_timeout,omitempty"`
	// FailedRetention keeps Failed sandboxes visible this long (default 10m).
	FailedRetention caddy.Duration `json:"failed_retention,omitempty"`
	// SyncInterval is how often records are reconciled with the runtime (default 2s).
	SyncInterval caddy.Duration `json:"sync_interval,omitempty"`
	// PublicAddress is host[:port] clients use to reach the gateway (default: each
	// request's Host).
	PublicAddress string `json:"public_address,omitempty"`
	// PublicURL is scheme://host[:port] under which browsers reach the console when a
	// proxy in front terminates TLS or rewrites Host: https makes every cookie Secure.
	PublicURL string `json:"public_url,omitempty"`
	// PreviewDomain is the domain of host-mode preview URLs, a registrable domain of
	// its own (never the console's site).
	PreviewDomain string `json:"preview_domain,omitempty"`
	// ClusterID names the deployment whose sandboxes this gateway owns (the
	// sandgate.io/cluster label). Empty: an id made once and kept in the store. Set it
	// to recover the sandboxes of a deployment whose store was lost.
	ClusterID string `json:"cluster_id,omitempty"`
	// OCIRuntime is the engine runtime of every sandbox ("runc", "runsc"); empty uses the
	// engine's default. A tenant's quota or a create's extensions.runtime may ask for another.
	OCIRuntime string `json:"oci_runtime,omitempty"`
	// ReadOnlyRootfs "on" mounts images read-only with writable /workspace and /tmp.
	ReadOnlyRootfs string `json:"read_only_rootfs,omitempty"`
	// RenewCooldown is the least time between two renewals-on-access of a sandbox (default 1m).
	RenewCooldown caddy.Duration `json:"renew_cooldown,omitempty"`
	// PolicyDir is the operator's directory of Rego and data, loaded beside the embedded
	// default policy and hot-reloaded.
	PolicyDir string `json:"policy_dir,omitempty"`
	// PoolWait is how long a claim from an empty pool waits for a refill (default 2s).
	PoolWait caddy.Duration `json:"pool_wait,omitempty"`
	// PoolFallback is "cold" (default: create from the pool's template) or "fail".
	PoolFallback string `json:"pool_fallback,omitempty"`
	// PoolConcurrency bounds warm sandboxes starting at once (default 4).
	PoolConcurrency int `json:"pool_concurrency,omitempty"`
	// Egress is "on" (default: every sandbox runs behind an egress enforcer) or "off"
	// (sandboxes reach whatever the host lets them; a networkPolicy is refused).
	Egress string `json:"egress,omitempty"`
	// EgressDefaultAction is the defaultAction of sandboxes created without a
	// networkPolicy: "deny" (default) or "allow".
	EgressDefaultAction string `json:"egress_default_action,omitempty"`
	// EgressAlwaysDeny and EgressAlwaysAllow are egress targets (names, *.wildcards, IPs,
	// CIDRs) every sandbox is denied, or allowed, ahead of its own rules. Denies win.
	EgressAlwaysDeny  []string `json:"egress_always_deny,omitempty"`
	EgressAlwaysAllow []string `json:"egress_always_allow,omitempty"`
	// EgressGatewayAddresses are addresses (IPs, CIDRs) of the gateway that sandboxes must
	// never reach, in addition to those found at start: every address of the host's
	// interfaces and, on Docker, the host's address on every network of the engine.
	EgressGatewayAddresses []string `json:"egress_gateway_addresses,omitempty"`
	// ImagePull says when a create pulls its image from a registry: "missing" (default:
	// only images the engine lacks), "never" or "always" (SANDGATE_PULL). Docker only;
	// Kubernetes nodes pull as the pod's imagePullPolicy says.
	ImagePull string `json:"image_pull,omitempty"`
	// ImageRegistries are the registry hosts images may be pulled from (empty: any),
	// enforced by the Rego admission rule on platform data allowed_registries
	// (SANDGATE_IMAGE_REGISTRIES, comma-separated).
	ImageRegistries []string `json:"image_registries,omitempty"`
	// PluginCacheDir keeps compiled WASM plugins on disk across restarts (default: memory only).
	PluginCacheDir string `json:"plugin_cache_dir,omitempty"`
	// PluginTimeout is the deadline of a plugin hook call that sets none itself (default 100ms).
	PluginTimeout caddy.Duration `json:"plugin_timeout,omitempty"`
	// MetricsConfig says where Prometheus metrics are served (metrics.go).
	MetricsConfig

	core *core
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "sandgate", New: func() caddy.Module { return new(App) }}
}

// core is what outlives a config reload.
type core struct {
	stopPolicy context.CancelFunc
	store      *store.Store
	runtime    runtimes.Runtime
	service    *gateway.Service
	plugins    *plugins.Host
}

// Destruct implements caddy.Destructor: the last config that used the core is gone.
func (c *core) Destruct() error {
	c.service.Stop()
	c.closePlugins()
	c.stopPolicy()
	_ = c.runtime.Close()
	return c.store.Close()
}

var cores = caddy.NewUsagePool()

// Provision implements caddy.Provisioner.
func (a *App) Provision(ctx caddy.Context) error {
	if err := a.resolveSecrets(); err != nil {
		return err
	}
	if a.Runtime == "" {
		a.Runtime = "docker"
	}
	if a.PoolFallback != "" && a.PoolFallback != "cold" && a.PoolFallback != "fail" {
		return fmt.Errorf("pool_fallback %q: want cold or fail", a.PoolFallback)
	}
	if a.Egress == "" {
		a.Egress = "on"
	}
	if a.Egress != "on" && a.Egress != "off" {
		return fmt.Errorf("egress %q: want on or off", a.Egress)
	}
	if a.PublicURL != "" {
		u, err := url.Parse(a.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("public_url %q: want http(s)://host[:port]", a.PublicURL)
		}
	}
	if err := gateway.CheckPreviewDomain(a.PreviewDomain, a.PublicURL, a.PublicAddress); err != nil {
		return err
	}
	if err := gateway.CheckClusterID(a.ClusterID); err != nil {
		return err
	}
	if d := a.EgressDefaultAction; d != "" && d != "allow" && d != "deny" {
		return fmt.Errorf("egress_default_action %q: want allow or deny", d)
	}
	usageInterval, err := a.usageInterval()
	if err != nil {
		return err
	}
	pull, err := docker.ParsePullPolicy(a.ImagePull)
	if err != nil {
		return fmt.Errorf("image_pull: %w", err)
	}
	a.ImagePull = string(pull)
	if a.AgentBinary == "" {
		exe, err := os.Executable()
		if err == nil {
			a.AgentBinary = filepath.Join(filepath.Dir(exe), "sandbox-agent")
		}
	}
	log := ctx.Slogger()
	slogger := ctx.Slogger()
	key := a.coreKey()
	val, _, err := cores.LoadOrNew(key, func() (caddy.Destructor, error) {
		bg := context.Background()
		st, err := store.Open(bg, store.Options{URL: a.RedisURL, Prefix: a.RedisPrefix, Logger: slogger})
		if err != nil {
			return nil, err
		}
		var rt runtimes.Runtime
		var dockerRT *docker.Runtime
		switch a.Runtime {
		case "docker":
			var d *docker.Runtime
			d, err = docker.New(bg, docker.Options{Host: a.DockerHost, Network: a.DockerNetwork, AgentBinary: a.AgentBinary,
				NoEgress: a.Egress == "off", OCIRuntime: a.OCIRuntime, ReadOnlyRootfs: a.ReadOnlyRootfs == "on",
				Pull: docker.PullPolicy(a.ImagePull), Logger: slogger})
			if err == nil {
				rt, dockerRT = d, d
			}
		case "kubernetes":
			agentImage := a.K8sAgentImage
			if agentImage == "" {
				agentImage = "sandgate/agent:" + gateway.Version
			}
			var k *kubernetes.Runtime
			k, err = kubernetes.New(bg, kubernetes.Options{Kubeconfig: a.Kubeconfig, Namespace: a.Namespace, AgentImage: agentImage,
				GVisorRuntimeClass: a.K8sGVisorRuntimeClass, OCIRuntime: a.OCIRuntime, QPS: float32(a.K8sQPS), Burst: a.K8sBurst,
				NoEgress: a.Egress == "off", ReadOnlyRootfs: a.ReadOnlyRootfs == "on", UserAgent: "sandgate/" + gateway.Version, Logger: slogger})
			if err == nil {
				rt = k
			}
		default:
			err = fmt.Errorf("unknown runtime %q (known: docker, kubernetes)", a.Runtime)
		}
		if err != nil {
			st.Close()
			return nil, err
		}
		gatewayAddrs, err := a.gatewayAddresses(bg, dockerRT)
		if err != nil {
			rt.Close()
			st.Close()
			return nil, err
		}
		pol, err := policy.New(bg, policy.Options{Dir: a.PolicyDir, Data: a.platformData(gatewayAddrs), Logger: slogger})
		if err != nil {
			rt.Close()
			st.Close()
			return nil, fmt.Errorf("load policy: %w", err)
		}
		polCtx, stopPolicy := context.WithCancel(bg)
		if a.PolicyDir != "" {
			go pol.Watch(polCtx)
		}
		svc := gateway.New(gateway.Config{
			MinTimeout:      time.Duration(a.MinTimeout),
			MaxTimeout:      time.Duration(a.MaxTimeout),
			DefaultTimeout:  time.Duration(a.DefaultTimeout),
			ReadyTimeout:    time.Duration(a.ReadyTimeout),
			FailedRetention: time.Duration(a.FailedRetention),
			SyncInterval:    time.Duration(a.SyncInterval),
			PublicAddress:   a.PublicAddress,
			PublicURL:       strings.TrimSuffix(a.PublicURL, "/"),
			PreviewDomain:   a.PreviewDomain,
			ClusterID:       a.ClusterID,
			PoolWait:        time.Duration(a.PoolWait),
			RenewCooldown:   time.Duration(a.RenewCooldown),
			PoolFallback:    a.PoolFallback,
			PoolConcurrency: a.PoolConcurrency,
			PullImages:      a.Runtime == "docker" && a.ImagePull != string(docker.PullNever),
			PullAlways:      a.Runtime == "docker" && a.ImagePull == string(docker.PullAlways),
			CheckRegistries: len(a.ImageRegistries) > 0,
			UsageInterval:   usageInterval,
		}, st, rt, pol, slogger)
		host, err := a.startPlugins(bg, svc, slogger)
		if err != nil {
			stopPolicy()
			rt.Close()
			st.Close()
			return nil, err
		}
		svc.Start(bg)
		log.Info("sandgate core started", "runtime", rt.Name(), "embedded_store", st.Embedded())
		return &core{store: st, runtime: rt, service: svc, stopPolicy: stopPolicy, plugins: host}, nil
	})
	if err != nil {
		return err
	}
	a.core = val.(*core)
	if a.ReadOnlyRootfs != "" && a.ReadOnlyRootfs != "on" && a.ReadOnlyRootfs != "off" {
		return fmt.Errorf("read_only_rootfs %q: want on or off", a.ReadOnlyRootfs)
	}
	// The key may change on a reload that keeps the core.
	a.core.service.SetAdminKey(a.APIKey)
	if a.APIKey == "" {
		log.Warn("no API key configured (SANDGATE_API_KEY): every authenticated route answers 401")
	}
	return a.provisionMetrics(ctx)
}

// resolveSecrets replaces the placeholders of the secret settings ({env.*}, {file.*})
// with their values, which thus live only in this process's memory, never in the
// config Caddy keeps, serves and saves.
func (a *App) resolveSecrets() error {
	repl := caddy.NewReplacer()
	a.APIKey = repl.ReplaceKnown(a.APIKey, "")
	a.RedisURL = repl.ReplaceKnown(a.RedisURL, "")
	if a.APIKeyFile = repl.ReplaceKnown(a.APIKeyFile, ""); a.APIKeyFile != "" {
		b, err := os.ReadFile(a.APIKeyFile)
		if err != nil {
			return fmt.Errorf("api_key_file: %w", err)
		}
		if a.APIKey = strings.TrimSpace(string(b)); a.APIKey == "" {
			return fmt.Errorf("api_key_file %s is empty", a.APIKeyFile)
		}
	}
	return nil
}

// coreKey identifies the settings a core is built from; a reload that keeps them keeps the core.
func (a *App) coreKey() string {
	return fmt.Sprintf("%s|%s|%s|%s|%s|%s|%s|%s|%s|%q|%q|%q|%s|%s|%s|%s|%d|%d", a.RedisURL, a.RedisPrefix, a.Runtime, a.DockerHost, a.DockerNetwork, a.AgentBinary, a.PolicyDir,
		a.Egress, a.EgressDefaultAction, a.EgressAlwaysDeny, a.EgressAlwaysAllow, a.EgressGatewayAddresses,
		a.Kubeconfig, a.Namespace, a.K8sAgentImage, a.K8sGVisorRuntimeClass, a.K8sQPS, a.K8sBurst) +
		fmt.Sprintf("|%s|%q|%s", a.ImagePull, a.ImageRegistries, a.ClusterID)
}

// gatewayAddresses lists what the platform denies as the gateway's own: the operator's
// list, every address of the host's interfaces and, on Docker, the host's address on
// every network of the engine.
func (a *App) gatewayAddresses(ctx context.Context, d *docker.Runtime) ([]string, error) {
	host, err := gateway.HostAddresses()
	if err != nil {
		return nil, err
	}
	var bridges []string
	if d != nil {
		if bridges, err = d.GatewayAddresses(ctx); err != nil {
			return nil, err
		}
	}
	return dedupe(slices.Concat(bridges, a.EgressGatewayAddresses, host)), nil
}

// dedupe drops repeated entries, keeping the first of each.
func dedupe(list []string) []string {
	seen := make(map[string]bool, len(list))
	out := list[:0]
	for _, v := range list {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// platformData is what the configuration contributes to data.sandgate.platform; keys
// left unset leave the policy directory's data (or the defaults) in force.
func (a *App) platformData(gatewayAddrs []string) map[string]any {
	data := map[string]any{}
	if len(gatewayAddrs) > 0 {
		data["gateway_addresses"] = gatewayAddrs
	}
	if len(a.EgressAlwaysDeny) > 0 {
		data["always_deny"] = a.EgressAlwaysDeny
	}
	if len(a.EgressAlwaysAllow) > 0 {
		data["always_allow"] = a.EgressAlwaysAllow
	}
	if a.EgressDefaultAction != "" {
		data["default_action"] = a.EgressDefaultAction
	}
	if len(a.ImageRegistries) > 0 {
		data["allowed_registries"] = a.ImageRegistries
	}
	return data
}

// Start implements caddy.App.
func (a *App) Start() error { return a.startMetrics() }

// Stop implements caddy.App.
func (a *App) Stop() error { return a.stopMetrics() }

// Cleanup implements caddy.CleanerUpper: releases this config's hold on the core.
func (a *App) Cleanup() error {
	_, err := cores.Delete(a.coreKey())
	return err
}

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
	_ caddy.Destructor   = (*core)(nil)
)
