// Package modules holds sandgate's Caddy modules: the `sandgate` app, which owns the
// long-lived parts (store, runtime, the lifecycle service), the `http.handlers.sandgate`
// handler that mounts the gateway API, their Caddyfile syntax and the CLI subcommands.
// It is thin glue: parse config, build the core, hand requests to gateway/api.
package modules

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/sandgate/sandgate/gateway/imagebuild"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/egress"
	"github.com/sandgate/sandgate/gateway/state"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/runtimes/docker"
)

func init() {
	caddy.RegisterModule(App{})
}

// App is the `sandgate` Caddy app. Its config says where state lives and which runtime
// runs sandboxes; the core it builds survives config reloads (it is shared through a
// usage pool keyed by that config), so an embedded store keeps its data across reloads.
type App struct {
	// MetricsListen, when set (host:port), serves /metrics without credentials on a
	// listener of its own, for a scraper on a network the API's clients cannot reach
	// (SANDGATE_METRICS_LISTEN). /metrics on the API address always asks for the
	// platform admin key.
	MetricsListen string `json:"metrics_listen,omitempty"`
	// MetricsTenantLabel "off" drops the tenant label from sandgate_sandboxes, for
	// deployments with many tenants (SANDGATE_METRICS_TENANT_LABEL, default "on").
	MetricsTenantLabel string `json:"metrics_tenant_label,omitempty"`
	// SandboxMetricsInterval is how often each sandbox's resource use is read for
	// GET /sandboxes/{id}/metrics (a duration, default 5s; "off" reads none).
	SandboxMetricsInterval string `json:"sandbox_metrics_interval,omitempty"`
	// TestClock "on" lets the platform admin move the gateway's clock forward (POST
	// /admin/test-clock), for end-to-end tests only; default "off": no such route.
	TestClock string `json:"test_clock,omitempty"`
	// metricsServing is the running state of the metrics listener (metrics.go).
	metricsServing
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
	// RedisCluster "on" takes RedisURL as a seed of a Redis Cluster.
	RedisCluster string `json:"redis_cluster,omitempty"`
	// StoreDir is the embedded store's directory, where it keeps its cluster id: one
	// running gateway holds it at a time, and one restarted on it adopts its sandboxes
	// again. Empty takes the first free slot under the user's configuration directory.
	// Unused with Redis.
	StoreDir string `json:"store_dir,omitempty"`
	// Runtime selects the engine: "docker" (default) or "kubernetes".
	Runtime string `json:"runtime,omitempty"`
	// DockerHost overrides DOCKER_HOST.
	DockerHost string `json:"docker_host,omitempty"`
	// DockerNetwork is the bridge network sandboxes join (default "sandgate").
	DockerNetwork string `json:"docker_network,omitempty"`
	// AntiSpoof "on" (default) pins each sandbox's port on the Docker bridge to the IP
	// and MAC the engine gave it, so that no sandbox sends frames with a neighbour's
	// addresses; the gateway refuses to start when it cannot. "off" runs without.
	AntiSpoof string `json:"antispoof,omitempty"`
	// Enforcer says how the Docker runtime runs each sandbox's egress enforcer:
	// "process" (a host process in the sandbox's network namespace), "container" (a
	// sidecar) or "auto" (default: a process where the host allows it).
	Enforcer string `json:"enforcer,omitempty"`
	// ContainerLogMax bounds the engine's log of every container of a Docker runtime
	// (docker.Options.ContainerLogMax): a size ("10m") or "off".
	ContainerLogMax string `json:"container_log_max,omitempty"`
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
	// K8sEphemeralStorage bounds each sandbox pod's writable layer and logs (default
	// 10Gi; "0": no bound).
	K8sEphemeralStorage string `json:"k8s_ephemeral_storage,omitempty"`
	// K8sQPS and K8sBurst bound the Kubernetes runtime's API requests (default 50, 100).
	K8sQPS   int `json:"k8s_qps,omitempty"`
	K8sBurst int `json:"k8s_burst,omitempty"`
	// AgentBinary is the static sandbox-agent injected into sandboxes (default: next to
	// the sandgate executable).
	AgentBinary string `json:"agent_binary,omitempty"`
	// MinTimeout and MaxTimeout bound a sandbox's lifetime (defaults 60s and 7 days).
	MinTimeout caddy.Duration `json:"min_timeout,omitempty"`
	MaxTimeout caddy.Duration `json:"max_timeout,omitempty"`
	// RequireTimeout "on" refuses a create without timeout (which never expires) with a
	// 400, unless its tenant's quota allows manual cleanup.
	RequireTimeout string `json:"require_timeout,omitempty"`
	// DefaultTimeout is refused when set (Validate): giving a create without timeout a
	// lifetime it did not ask for would contradict OpenSandbox's "no expiry", so an
	// operator who set one learns at start to bound such creates with RequireTimeout or
	// a tenant's maxTimeoutSeconds instead.
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
	// AgentIdleTimeout is how long the proxy keeps an idle keep-alive connection to an
	// agent (default 2m); the pool manager keeps warm members' connections from reaching
	// it, so that a claim after a long wait does not connect.
	AgentIdleTimeout caddy.Duration `json:"agent_idle_timeout,omitempty"`
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
	// SandboxDNS are the DNS servers of every sandbox (IPv4 addresses,
	// SANDGATE_SANDBOX_DNS, comma-separated). On Docker the engine's embedded resolver
	// forwards the names it does not own to them, and each sandbox's egress enforcer
	// filters those forwards (empty: the servers the engine takes from its host's
	// resolv.conf). On Kubernetes they are each pod's only nameservers (dnsPolicy None,
	// at most 3), asked through its enforcer (empty: the cluster's DNS, ClusterFirst).
	SandboxDNS []string `json:"sandbox_dns,omitempty"`
	// ImagePull says when a create pulls its image from a registry: "missing" (default:
	// only images the engine lacks), "never" or "always" (SANDGATE_PULL). Docker only;
	// Kubernetes nodes pull as the pod's imagePullPolicy says.
	ImagePull string `json:"image_pull,omitempty"`
	// ImageRegistries are the registry hosts images may be pulled from (empty: any),
	// enforced by the Rego admission rule on platform data allowed_registries
	// (SANDGATE_IMAGE_REGISTRIES, comma-separated). They are also the only registries on
	// an address of the platform itself (loopback, private, link-local, the host's own)
	// the Docker runtime pulls from.
	ImageRegistries []string `json:"image_registries,omitempty"`
	// VaultSchemes are the schemes a credential-vault binding may name ("https",
	// "http"; empty: https only), enforced by the Rego vault rule on platform data
	// vault_schemes (SANDGATE_VAULT_SCHEMES, comma-separated). With "http" the vault
	// injects into plain HTTP, which anyone on the path between the sandbox and the
	// upstream can read.
	VaultSchemes []string `json:"vault_schemes,omitempty"`
	// VaultUpstreamCA is a PEM file of extra roots the credential vault verifies
	// upstream TLS against, besides the sandbox image's system roots
	// (SANDGATE_VAULT_UPSTREAM_CA).
	VaultUpstreamCA string `json:"vault_upstream_ca,omitempty"`
	// VolumeHostPrefixes are the host directories under which sandboxes may bind-mount
	// host volumes (empty: none), enforced by the Rego admission rule on platform data
	// volume_host_prefixes (SANDGATE_VOLUME_HOST_PREFIXES, comma-separated).
	VolumeHostPrefixes []string `json:"volume_host_prefixes,omitempty"`
	// E2BPrefix is the path under which the E2B door serves E2B's control API
	// (SANDGATE_E2B_PREFIX, default "/e2b"); "off" serves no E2B door, neither that API
	// nor the routing of calls by the E2b-Sandbox-Id header.
	E2BPrefix string `json:"e2b_prefix,omitempty"`
	// E2BTemplates maps E2B template aliases to what a create through the door starts:
	// alias=image, or alias=pool:<name> for a claim from that warm pool
	// (SANDGATE_E2B_TEMPLATES, comma-separated). "base" and "code-interpreter-v1" are
	// sandgate/e2b-base and sandgate/e2b-code-interpreter of this version unless
	// mapped here.
	E2BTemplates []string `json:"e2b_templates,omitempty"`
	// ImageBuilds are images the gateway builds in the background once it serves, one
	// build at a time: image[+image…]=command (SANDGATE_IMAGE_BUILDS, comma-separated;
	// Docker only). A create naming one before its build is done gets
	// SANDBOX::IMAGE_BUILDING; GET /v1/images shows the builds.
	ImageBuilds []string `json:"image_builds,omitempty"`
	// PluginCacheDir keeps compiled WASM plugins on disk across restarts (default: memory only).
	PluginCacheDir string `json:"plugin_cache_dir,omitempty"`
	// PluginTimeout is the deadline of a plugin hook call that sets none itself (default 100ms).
	PluginTimeout caddy.Duration `json:"plugin_timeout,omitempty"`

	core *core
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "sandgate", New: func() caddy.Module { return new(App) }}
}

// core is what outlives a config reload.
type core struct {
	stopPolicy func()
	store      *store.Store
	storeKey   string
	runtime    runtimes.Runtime
	service    *gateway.Service
	plugins    *plugins.Host
	// builds runs the image_builds (nil without any).
	builds *imagebuild.Manager
}

// Destruct implements caddy.Destructor: the last config that used the core is gone.
func (c *core) Destruct() error {
	if c.builds != nil {
		c.builds.Stop()
	}
	c.service.Stop()
	c.closePlugins()
	c.stopPolicy()
	_ = c.runtime.Close() // the core is going away; nothing is left to act on the error
	_, err := stores.Delete(c.storeKey)
	return err
}

// cores holds the running cores by coreKey; stores holds their stores by storeKey, so
// that a reload which rebuilds the core (any setting changed) keeps the store, and the
// embedded store keeps its data.
var (
	cores  = caddy.NewUsagePool()
	stores = caddy.NewUsagePool()
)

// sharedStore is a store in the stores pool.
type sharedStore struct{ *store.Store }

// Destruct implements caddy.Destructor: the last core that used the store is gone.
func (s sharedStore) Destruct() error { return s.Close() }

// storeKey identifies the settings the store is built from (a digest: redis_url may
// hold a password).
func (a *App) storeKey() string {
	sum := sha256.Sum256([]byte(a.RedisURL + "\x00" + a.RedisPrefix + "\x00" + a.RedisCluster + "\x00" + a.StoreDir))
	return hex.EncodeToString(sum[:])
}

// runtimeBuilders build the runtime a config names, by its runtime setting. The
// Kubernetes runtime registers itself (runtime_kubernetes.go) unless the build leaves it
// out with the tag withoutKubernetesTag; a test registers more (an in-process runtime)
// in its own file.
// withoutKubernetesTag is the build tag that leaves the Kubernetes runtime out.
const withoutKubernetesTag = "sandgate_nokubernetes"

var runtimeBuilders = map[string]func(ctx context.Context, a *App, log *slog.Logger) (runtimes.Runtime, error){
	"docker": func(ctx context.Context, a *App, log *slog.Logger) (runtimes.Runtime, error) {
		upstreamCA, err := a.vaultUpstreamCA()
		if err != nil {
			return nil, err
		}
		sandboxDNS, err := docker.ParseSandboxDNS(a.SandboxDNS)
		if err != nil {
			return nil, fmt.Errorf("sandbox_dns: %w", err)
		}
		return docker.New(ctx, docker.Options{Host: a.DockerHost, Network: a.DockerNetwork, AgentBinary: a.AgentBinary,
			NoEgress: a.Egress == "off", OCIRuntime: a.OCIRuntime, ReadOnlyRootfs: a.ReadOnlyRootfs == "on",
			NoAntiSpoof: a.AntiSpoof == "off", Enforcer: a.Enforcer, ContainerLogMax: a.ContainerLogMax, Pull: docker.PullPolicy(a.ImagePull), ImageRegistries: a.ImageRegistries, VaultUpstreamCA: upstreamCA,
			SandboxDNS: sandboxDNS, Logger: log})
	},
}

// vaultUpstreamCA reads the operator's extra upstream roots of the credential vault.
func (a *App) vaultUpstreamCA() ([]byte, error) {
	if a.VaultUpstreamCA == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(a.VaultUpstreamCA)
	if err != nil {
		return nil, fmt.Errorf("vault_upstream_ca: %w", err)
	}
	return pem, nil
}

// Provision implements caddy.Provisioner: it resolves the secrets, fills the defaults
// and builds the core (or joins the one an equal config built). The handlers need the
// core when they are provisioned, before Caddy calls Validate, so Provision runs
// Validate itself first: an invalid config never starts a core.
func (a *App) Provision(ctx caddy.Context) error {
	if err := a.resolveSecrets(); err != nil {
		return err
	}
	if a.Runtime == "" {
		a.Runtime = "docker"
	}
	if a.Egress == "" {
		a.Egress = "on"
	}
	if err := a.Validate(); err != nil {
		return err
	}
	pull, _ := docker.ParsePullPolicy(a.ImagePull) // Validate checked it
	a.ImagePull = string(pull)
	if a.AgentBinary == "" {
		exe, err := os.Executable()
		if err == nil {
			a.AgentBinary = filepath.Join(filepath.Dir(exe), "sandbox-agent")
		}
	}
	log := ctx.Slogger()
	val, _, err := cores.LoadOrNew(a.coreKey(), func() (caddy.Destructor, error) { return a.newCore(log) })
	if err != nil {
		return err
	}
	a.core = val.(*core)
	// The key may change on a reload that keeps the core.
	a.core.service.SetAdminKey(a.APIKey)
	if a.APIKey == "" {
		log.Warn("no API key configured (SANDGATE_API_KEY): every authenticated route answers 401")
	}
	return a.provisionMetrics(ctx)
}

// Validate implements caddy.Validator: it rejects every setting no Caddyfile would
// have produced and every value the core cannot run with.
func (a *App) Validate() error {
	for _, s := range settings {
		if err := s.check(a); err != nil {
			return err
		}
	}
	if a.DefaultTimeout != 0 {
		return fmt.Errorf("default_timeout %s: a sandbox created without timeout never expires, as OpenSandbox specifies; remove default_timeout (SANDGATE_DEFAULT_TIMEOUT) and bound such creates with require_timeout on (SANDGATE_REQUIRE_TIMEOUT, answered 400) or a tenant's maxTimeoutSeconds", time.Duration(a.DefaultTimeout))
	}
	if _, ok := runtimeBuilders[a.Runtime]; !ok && a.Runtime != "" {
		if a.Runtime == "kubernetes" {
			return fmt.Errorf("runtime kubernetes: this sandgate was built without it (tag %s, as `make run` builds for local Docker); `make build` builds it in", withoutKubernetesTag)
		}
		return fmt.Errorf("unknown runtime %q (known: %s)", a.Runtime, strings.Join(slices.Sorted(maps.Keys(runtimeBuilders)), ", "))
	}
	if _, err := state.ResolveHostPrefixes(a.VolumeHostPrefixes); err != nil {
		return fmt.Errorf("volume_host_prefixes: %w", err)
	}
	if a.E2BPrefix != "" && a.E2BPrefix != "off" && (!strings.HasPrefix(a.E2BPrefix, "/") || strings.TrimRight(a.E2BPrefix, "/") == "" || strings.ContainsAny(a.E2BPrefix, "{} ")) {
		return fmt.Errorf("e2b_prefix %q: want a path such as /e2b, or off", a.E2BPrefix)
	}
	if _, err := api.E2BTemplates(a.E2BTemplates); err != nil {
		return fmt.Errorf("e2b_templates: %w", err)
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
	if _, err := docker.ParsePullPolicy(a.ImagePull); err != nil {
		return fmt.Errorf("image_pull: %w", err)
	}
	if err := docker.CheckContainerLogMax(a.ContainerLogMax); err != nil {
		return fmt.Errorf("container_log_max: %w", err)
	}
	if _, err := docker.ParseSandboxDNS(a.SandboxDNS); err != nil {
		return fmt.Errorf("sandbox_dns: %w", err)
	}
	if _, err := a.usageInterval(); err != nil {
		return err
	}
	if _, err := imagebuild.ParseBuilds(a.ImageBuilds); err != nil {
		return fmt.Errorf("image_builds: %w", err)
	}
	if len(a.ImageBuilds) > 0 && a.Runtime != "docker" {
		return fmt.Errorf("image_builds: images are built on the Docker engine the gateway uses; runtime %q pulls them from a registry", a.Runtime)
	}
	return nil
}

// newCore builds what outlives a reload that keeps every setting: store (shared),
// runtime, policy, service and plugin host.
func (a *App) newCore(log *slog.Logger) (caddy.Destructor, error) {
	bg := context.Background()
	storeKey := a.storeKey()
	sv, _, err := stores.LoadOrNew(storeKey, func() (caddy.Destructor, error) {
		st, err := store.Open(bg, store.Options{URL: a.RedisURL, Prefix: a.RedisPrefix, Cluster: a.RedisCluster == "on", Dir: a.StoreDir, Logger: log})
		return sharedStore{st}, err
	})
	if err != nil {
		return nil, err
	}
	st := sv.(sharedStore).Store
	releaseStore := func() { _, _ = stores.Delete(storeKey) } // on a failed build; the failure is what the caller reports
	rt, err := runtimeBuilders[a.Runtime](bg, a, log)
	if err != nil {
		releaseStore()
		return nil, err
	}
	gatewayAddrs, err := a.gatewayAddresses(bg, rt)
	if err != nil {
		rt.Close()
		releaseStore()
		return nil, err
	}
	pol, err := policy.New(bg, policy.Options{Dir: a.PolicyDir, Data: a.platformData(gatewayAddrs), Logger: log})
	if err != nil {
		rt.Close()
		releaseStore()
		return nil, fmt.Errorf("load policy: %w", err)
	}
	// The watcher is stopped and waited for with the core (stopPolicy returns once it has ended).
	polCtx, cancelPolicy := context.WithCancel(bg)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		pol.Watch(polCtx) // without a policy directory it only waits for polCtx
	}()
	stopPolicy := func() {
		cancelPolicy()
		<-watching
	}
	usageInterval, _ := a.usageInterval() // Validate checked it
	cfg := a.gatewayConfig(usageInterval)
	builds := a.imageBuilds(rt, log)
	if builds != nil {
		cfg.ImageBuilds = builds
	}
	svc := gateway.New(cfg, st, rt, pol, log)
	host, err := a.startPlugins(bg, svc, log)
	if err != nil {
		stopPolicy()
		rt.Close()
		releaseStore()
		return nil, err
	}
	svc.Start(bg)
	if builds != nil {
		builds.Start()
	}
	log.Info("sandgate core started", "runtime", rt.Name(), "embedded_store", st.Embedded())
	return &core{store: st, storeKey: storeKey, runtime: rt, service: svc, stopPolicy: stopPolicy, plugins: host, builds: builds}, nil
}

// imageBuilds is the manager of the image_builds (nil without any): it asks the engine
// whether an image exists as the platform, with no tenant.
func (a *App) imageBuilds(rt runtimes.Runtime, log *slog.Logger) *imagebuild.Manager {
	builds, _ := imagebuild.ParseBuilds(a.ImageBuilds) // Validate checked them
	ic, ok := rt.(runtimes.ImageChecker)
	if len(builds) == 0 || !ok {
		return nil
	}
	return imagebuild.New(builds, func(ctx context.Context, image string) (bool, error) {
		return ic.HasImage(ctx, image, "")
	}, log)
}

// gatewayConfig is the core's configuration from the app's settings (Config.Defaults
// fills what is zero; TestSettingDefaultsAreTheCore's keeps the two sets of defaults
// one).
func (a *App) gatewayConfig(usageInterval time.Duration) gateway.Config {
	return gateway.Config{
		MinTimeout:       time.Duration(a.MinTimeout),
		MaxTimeout:       time.Duration(a.MaxTimeout),
		RequireTimeout:   a.RequireTimeout == "on",
		ReadyTimeout:     time.Duration(a.ReadyTimeout),
		FailedRetention:  time.Duration(a.FailedRetention),
		SyncInterval:     time.Duration(a.SyncInterval),
		PublicAddress:    a.PublicAddress,
		PublicURL:        strings.TrimSuffix(a.PublicURL, "/"),
		PreviewDomain:    a.PreviewDomain,
		ClusterID:        a.ClusterID,
		PoolWait:         time.Duration(a.PoolWait),
		RenewCooldown:    time.Duration(a.RenewCooldown),
		PoolFallback:     a.PoolFallback,
		PoolConcurrency:  a.PoolConcurrency,
		AgentIdleTimeout: time.Duration(a.AgentIdleTimeout),
		PullImages:       a.Runtime == "docker" && a.ImagePull != string(docker.PullNever),
		PullAlways:       a.Runtime == "docker" && a.ImagePull == string(docker.PullAlways),
		CheckRegistries:  len(a.ImageRegistries) > 0,
		UsageInterval:    usageInterval,
		TestClock:        a.TestClock == "on",
	}
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

// gatewayAddresses lists what the platform denies as the gateway's own: the operator's
// list, every address of the host's interfaces and, on Docker, the host's address on
// every network of the engine.
func (a *App) gatewayAddresses(ctx context.Context, rt runtimes.Runtime) ([]string, error) {
	host, err := egress.HostAddresses()
	if err != nil {
		return nil, err
	}
	var bridges []string
	if ga, ok := rt.(runtimes.GatewayAddresser); ok {
		if bridges, err = ga.GatewayAddresses(ctx); err != nil {
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
	if len(a.VaultSchemes) > 0 {
		data["vault_schemes"] = a.VaultSchemes
	}
	if len(a.ImageRegistries) > 0 {
		data["allowed_registries"] = a.ImageRegistries
	}
	if len(a.VolumeHostPrefixes) > 0 {
		// Resolved like the paths of requests, so that both name real directories.
		if prefixes, err := state.ResolveHostPrefixes(a.VolumeHostPrefixes); err == nil {
			data["volume_host_prefixes"] = prefixes
		}
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
	_ caddy.Validator    = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
	_ caddy.Destructor   = (*core)(nil)
	_ caddy.Destructor   = sharedStore{}
)

// e2bOptions are the E2B door's options of the API handler: its prefix ("/e2b" when
// unset, none when "off") and templates (Validate has checked them).
func (a *App) e2bOptions() api.E2BOptions {
	prefix := a.E2BPrefix
	switch prefix {
	case "":
		prefix = defaultE2BPrefix
	case "off":
		prefix = ""
	}
	templates, _ := api.E2BTemplates(a.E2BTemplates)
	return api.E2BOptions{Prefix: prefix, Templates: templates, DefaultTemplates: api.E2BDefaultTemplates(gateway.Version)}
}

// defaultE2BPrefix is where the E2B door's control API is served by default.
const defaultE2BPrefix = "/e2b"

// imageBuildList is what GET /v1/images lists: the core's builds, or nil.
func (c *core) imageBuildList() interface{ List() []imagebuild.Status } {
	if c.builds == nil {
		return nil
	}
	return c.builds
}
