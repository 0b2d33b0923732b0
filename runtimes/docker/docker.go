// Package docker runs sandboxes as containers of a local Docker engine. Each sandbox is
// one container on a private bridge network (or in the network namespace of a spare
// holder container on it, prepared before the create: holders.go), with the static
// sandbox-agent mounted read-only from a shared volume (agentvolume.go) and run as PID 1
// in front of the user's entrypoint; no port is published: the gateway reaches the agent
// at the sandbox's address.
package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
)

// Paths inside every sandbox container.
const (
	agentDir = "/.sandgate"
	// agentPath is in the read-only agent volume (agentvolume.go). Sandboxes made
	// before it ran a copy at agentDir + "/sandbox-agent"; their configuration says so.
	agentPath = agentBinDir + "/sandbox-agent"
)

// Environment variables the agent reads; it removes them from every child's environment.
const (
	envAgentToken  = agentproto.EnvAgentToken
	envEgressToken = agentproto.EnvEgressToken
)

// Label holding the sandbox's entrypoint (JSON) so that adoption can rebuild the record.
const labelEntrypoint = "sandgate.io/entrypoint"

// labelImage keeps the image name a sandbox was created with: the engine is handed the
// image's id (see create), so the container's own image field holds the id.
const labelImage = "sandgate.io/image"

// imageOf is the image name of a sandbox's container: its labelImage, else the
// container's image field.
func imageOf(labels map[string]string, engineImage string) string {
	if name := labels[labelImage]; name != "" {
		return name
	}
	return engineImage
}

// Options configure the Docker runtime.
type Options struct {
	// Host is the engine address (DOCKER_HOST form); empty uses the environment or the default socket.
	Host string
	// Network is the bridge network sandboxes join (created when missing).
	Network string
	// AgentBinary is the path of the static sandbox-agent every container runs (from the
	// read-only agent volume filled with it: agentvolume.go).
	AgentBinary string
	// PidsLimit caps processes per sandbox (0: 1024).
	PidsLimit int64
	// DefaultCPUMillis and DefaultMemoryBytes apply when a spec has none (0: 1 CPU, 1 GiB).
	DefaultCPUMillis   int64
	DefaultMemoryBytes int64
	// OCIRuntime selects the engine runtime ("runc", "runsc"); empty uses the engine default.
	// A spec's own Runtime wins over it.
	OCIRuntime string
	// ReadOnlyRootfs mounts every sandbox's image filesystem read-only, so that nothing a
	// workload does survives in the image layers and no binary of the image can be
	// replaced; the workload writes only to tmpfs mounts at WritablePaths.
	ReadOnlyRootfs bool
	// WritablePaths are the tmpfs mounts of a read-only sandbox (nil: /workspace and /tmp).
	WritablePaths []string
	// WritableBytes caps each of those tmpfs mounts (0: 256 MiB). Their pages are also
	// charged to the sandbox's memory limit, which is the real bound.
	WritableBytes int64
	// VaultUpstreamCA is extra PEM roots the credential vault trusts for upstream TLS
	// (besides the image's system roots); SANDGATE_VAULT_UPSTREAM_CA names its file.
	VaultUpstreamCA []byte
	// NoEgress turns egress enforcement off: specs' EgressSpecs are ignored and sandboxes
	// reach whatever the host's network lets them reach. Enforcement is on by default.
	NoEgress bool
	// Spares is how many spare network namespace holders the runtime keeps started for
	// creates with an egress policy (holders.go): 0 means 2, a negative number none.
	Spares int
	// NoAntiSpoof turns off the pinning of each sandbox's bridge port to its own IP and
	// MAC (antispoof.go). It is on by default, and New fails when it cannot be set up.
	NoAntiSpoof bool
	// Pull says when a create pulls its image from a registry (empty: PullMissing).
	Pull PullPolicy
	// ImageRegistries are registries (host[:port]) the operator listed to pull from
	// (SANDGATE_IMAGE_REGISTRIES): only a listed registry may be an address of the
	// platform itself (registries.go).
	ImageRegistries []string
	// SandboxDNS are the DNS servers of every sandbox (SANDGATE_SANDBOX_DNS, checked by
	// ParseSandboxDNS): set as HostConfig.DNS on the container that owns the sandbox's
	// network namespace and handed to its enforcer (dns.go). Empty: the engine's choice.
	SandboxDNS []netip.Addr
	// Enforcer says how a sandbox's egress enforcer runs: EnforcerProcess, a host process
	// in the sandbox's network namespace (enforcerprocess.go); EnforcerContainer, a
	// sidecar container (egress.go); EnforcerAuto or empty, a process where the gateway
	// is root on the engine's host and the host's cgroups are version 1, else a sidecar.
	Enforcer string
	// EnforcerDir holds the enforcer processes' directories (empty: defaultEnforcerDir).
	EnforcerDir string
	// ContainerLogMax bounds the engine's log of every container the runtime makes (the
	// engine's size form, "10m"; two files of it at most) where the engine keeps logs on
	// its own disk; "off" leaves the engine's settings; empty: DefaultContainerLogMax
	// (containerlogs.go).
	ContainerLogMax string
	// Agents calls the sandboxes' agents and enforcers while they start (nil: a client
	// of the runtime's own). The gateway uses the same one (AgentClient).
	Agents *agentclient.Client
	Logger *slog.Logger
}

// Runtime is the Docker implementation of runtimes.Runtime.
type Runtime struct {
	cli    *client.Client
	opts   Options
	log    *slog.Logger
	agents *agentclient.Client

	agentMu  sync.Mutex
	agentVol string // name of the filled agent volume (agentvolume.go)
	agentMod time.Time

	pulls     pulls
	pullCount atomic.Int64

	// Spare network namespace holders (holders.go), made in the background (bg).
	spares      chan holder
	spareMu     sync.Mutex
	spareMaking int
	spareWG     sync.WaitGroup
	bg          context.Context
	cancelBg    context.CancelFunc
	owner       string
	// logConfig is every container's log configuration (containerlogs.go; zero: the
	// engine's own).
	logConfig     container.LogConfig
	helperImageMu sync.Mutex
	helperImageID string // the helpers' image, once checked (helperimage.go)

	// antiSpoof pins sandbox ports on the bridge (antispoof.go); nil with NoAntiSpoof.
	antiSpoof *antiSpoof

	// usage keeps what each sandbox's usage readings need besides its stats (usage.go).
	usage usageCache

	// creating counts the creates in flight: spares are replaced when it drops to zero.
	creating atomic.Int64

	// procs runs enforcers as host processes (enforcerprocess.go); nil: sidecars.
	procs *processEnforcers

	// hostDNS are the servers the engine forwards sandboxes' queries to without
	// SandboxDNS, read from the host's resolver files at start (dns.go).
	hostDNS []netip.Addr
}

// capabilities the sandbox's processes keep: enough for a package manager and a
// uid/gid switch, nothing that touches the kernel, the network stack or the clock.
var keptCapabilities = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "NET_BIND_SERVICE", "SETPCAP", "SYS_CHROOT", "AUDIT_WRITE", "MKNOD", "SETFCAP"}

// New connects to the engine, negotiating the API version down to what it speaks, and
// makes sure the sandbox network exists.
func New(ctx context.Context, opts Options) (*Runtime, error) {
	if opts.Network == "" {
		opts.Network = "sandgate"
	}
	if opts.PidsLimit == 0 {
		opts.PidsLimit = 1024
	}
	if opts.DefaultCPUMillis == 0 {
		opts.DefaultCPUMillis = 1000
	}
	if opts.DefaultMemoryBytes == 0 {
		opts.DefaultMemoryBytes = 1 << 30
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Agents == nil {
		opts.Agents = agentclient.New()
	}
	clientOpts := []client.Opt{client.FromEnv}
	if opts.Host != "" {
		clientOpts = append(clientOpts, client.WithHost(opts.Host))
	}
	cli, err := client.New(clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	host := cli.DaemonHost()
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(pingCtx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker engine at %s does not answer (is dockerd running? `make deps` starts it): %w", host, err)
	}
	r := &Runtime{cli: cli, opts: opts, log: opts.Logger, agents: opts.Agents, owner: spareOwnerID()}
	if len(opts.SandboxDNS) == 0 {
		r.hostDNS = engineForwardsTo(hostResolvConf, resolvedResolvConf)
	}
	if err := r.ensureNetwork(ctx); err != nil {
		cli.Close()
		return nil, err
	}
	if opts.NoAntiSpoof {
		r.log.Warn("anti-spoofing on the sandbox bridge is off (SANDGATE_ANTISPOOF=off): a sandbox with NET_ADMIN in its namespace can take a neighbour's IP and MAC")
	} else if err := r.startAntiSpoof(ctx); err != nil {
		cli.Close()
		return nil, err
	}
	if _, err := os.Stat(opts.AgentBinary); err != nil {
		cli.Close()
		return nil, fmt.Errorf("sandbox-agent binary %q: %w (build it with `make build`)", opts.AgentBinary, err)
	}
	if err := r.chooseEnforcer(host); err != nil {
		cli.Close()
		return nil, err
	}
	if err := r.chooseLogConfig(ctx); err != nil {
		cli.Close()
		return nil, err
	}
	if n := r.spareCount(); n > 0 {
		r.spares = make(chan holder, n)
		r.bg, r.cancelBg = context.WithCancel(context.Background())
		r.spareWG.Add(1)
		go func() {
			defer r.spareWG.Done()
			// Spares left by a gateway process on this host that is gone go first.
			if n := r.removeSpares(r.bg, false); n > 0 {
				r.log.Info("removed spare network namespaces of a gone process", "count", n)
			}
			r.refillSpares()
		}()
	}
	return r, nil
}

// Name implements runtimes.Runtime.
func (r *Runtime) Name() string { return "docker" }

// Client exposes the engine client for benchmarks and tests that need the raw baseline.
func (r *Runtime) Client() *client.Client { return r.cli }

// Close implements runtimes.Runtime. It removes the runtime's spare namespace holders.
func (r *Runtime) Close() error {
	r.closeSpares()
	if r.procs != nil {
		r.procs.close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.closeAntiSpoof(ctx)
	return r.cli.Close()
}

func (r *Runtime) ensureNetwork(ctx context.Context) error {
	if _, err := r.cli.NetworkInspect(ctx, r.opts.Network, client.NetworkInspectOptions{}); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect network %s: %w", r.opts.Network, err)
	}
	_, err := r.cli.NetworkCreate(ctx, r.opts.Network, client.NetworkCreateOptions{
		Driver: "bridge",
		// Sandboxes must not reach each other; the gateway on the host still reaches them.
		Options: map[string]string{"com.docker.network.bridge.enable_icc": "false"},
		Labels:  map[string]string{"sandgate.io/network": "sandboxes"},
	})
	if err != nil && !cerrdefs.IsConflict(err) {
		return fmt.Errorf("create network %s: %w", r.opts.Network, err)
	}
	return nil
}

func containerName(id string) string { return "sandgate-" + id }

// Create implements runtimes.Runtime. A sandbox with an egress policy is made in a
// spare network namespace when one is ready (holders.go); should that fail, it is made
// again without one.
func (r *Runtime) Create(ctx context.Context, spec runtimes.Spec) (runtimes.Instance, error) {
	// Spares are replaced once no create is in flight, not while creates run: making one
	// is a network setup, the very cost a spare takes off a create, and during a burst it
	// would compete with the creates for the engine (which make their own namespaces
	// once the spares are taken), only to add a container to the sandbox that takes it.
	r.creating.Add(1)
	defer func() {
		if r.creating.Add(-1) == 0 {
			r.refillSpares()
		}
	}()
	withEgress := spec.Egress != nil && !r.opts.NoEgress
	if !withEgress || r.spareCount() == 0 {
		return r.create(ctx, spec, false)
	}
	inst, err := r.create(ctx, spec, true)
	var he holderError
	if err != nil && errors.As(err, &he) && ctx.Err() == nil {
		r.log.Warn("create in a spare network namespace failed; creating in a new one", "id", spec.ID, "err", he.err)
		return r.create(ctx, spec, false)
	}
	return inst, err
}

// holderError is a create's failure after it took a spare namespace holder: Create tries
// once more without one.
type holderError struct{ err error }

func (e holderError) Error() string { return e.err.Error() }
func (e holderError) Unwrap() error { return e.err }

func (r *Runtime) create(ctx context.Context, spec runtimes.Spec, spare bool) (runtimes.Instance, error) {
	steps := newCreateSteps()
	imageID, err := r.ensureImage(ctx, spec.Image, spec.Tenant, spec.ImageAuth)
	if err != nil {
		return runtimes.Instance{}, err
	}
	// From here the engine is given the id of the image that was checked, never the
	// name again (which it would resolve anew); the name the caller gave stays in a label.
	imageName := spec.Image
	spec.Image = imageID
	agentVol, err := r.agentVolume(ctx, spec.Image)
	if err != nil {
		return runtimes.Instance{}, err
	}
	steps.done("image and agent volume")
	labels := map[string]string{}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[runtimes.LabelID] = spec.ID
	labels[runtimes.LabelAgentAuth] = "signed"
	labels[runtimes.LabelTenant] = spec.Tenant
	labels[runtimes.LabelCreatedAt] = spec.CreatedAt.UTC().Format(time.RFC3339Nano)
	labels[labelNetwork] = r.opts.Network
	labels[labelImage] = imageName
	if spec.Pool != "" {
		labels[runtimes.LabelPool] = spec.Pool
	}
	if spec.ExpiresAt != nil {
		labels[runtimes.LabelExpiresAt] = spec.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	if ep, err := json.Marshal(spec.Entrypoint); err == nil {
		labels[labelEntrypoint] = string(ep)
	}
	withEgress := spec.Egress != nil && !r.opts.NoEgress
	if withEgress {
		labels[labelEgress] = "enforced"
	}
	var ca *vaultCA
	if withEgress && spec.Egress.CredentialProxy {
		if ca, err = newVaultCA(spec.ID); err != nil {
			return runtimes.Instance{}, err
		}
		labels[labelCredentialProxy] = "enabled"
	}

	env := make([]string, 0, len(spec.Env)+2)
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+spec.Env[k])
	}
	env = append(env, envAgentToken+"="+spec.AgentToken)
	if spec.EgressToken != "" && !withEgress {
		env = append(env, envEgressToken+"="+spec.EgressToken)
	}

	cpu, mem := spec.CPUMillis, spec.MemoryBytes
	if cpu == 0 {
		cpu = r.opts.DefaultCPUMillis
	}
	if mem == 0 {
		mem = r.opts.DefaultMemoryBytes
	}
	pids := r.opts.PidsLimit
	// The per-sandbox runtime (a tenant that requires gVisor) wins over the default.
	ociRuntime := spec.Runtime
	if ociRuntime == "" {
		ociRuntime = r.opts.OCIRuntime
	}
	if withEgress && strings.HasPrefix(ociRuntime, "runsc") {
		// The enforcer sidecar (runc) cannot join a gVisor sandbox's namespaces: gVisor's
		// own network stack owns the interface, and the enforcer never becomes healthy.
		// Refuse at once, naming why, rather than time out or run unenforced.
		return runtimes.Instance{}, fmt.Errorf("egress enforcement is not available under the %s (gVisor) runtime; use runc for sandboxes with an egress policy: %w", ociRuntime, errors.ErrUnsupported)
	}
	hostCfg := &container.HostConfig{
		NetworkMode: container.NetworkMode(r.opts.Network),
		LogConfig:   r.logConfig,
		DNS:         r.sandboxDNS(),
		CapDrop:     []string{"ALL"},
		CapAdd:      keptCapabilities,
		SecurityOpt: []string{"no-new-privileges:true"},
		Runtime:     ociRuntime,
		Resources: container.Resources{
			NanoCPUs:  cpu * 1_000_000,
			Memory:    mem,
			PidsLimit: &pids,
			// MemorySwap equal to Memory: the limit cannot be dodged by swapping.
			MemorySwap: mem,
		},
	}
	hostCfg.Mounts = append(hostCfg.Mounts, r.agentDirMount(spec), r.agentMount(agentVol))
	if r.opts.ReadOnlyRootfs {
		hostCfg.ReadonlyRootfs = true
		hostCfg.Tmpfs = writableScratch(r.opts.WritablePaths, r.opts.WritableBytes)
	}
	cmd := spec.Entrypoint
	if withEgress {
		// The entrypoint starts once the enforcer's rules are in place (startEgress).
		cmd = nil
	}
	mounts, madeVolumes, err := r.mountVolumes(ctx, spec)
	if err != nil {
		return runtimes.Instance{}, err
	}
	hostCfg.Mounts = append(hostCfg.Mounts, mounts...)
	for _, claim := range r.stagedVolumes(spec) {
		labels[labelStagedVolume+claim] = "true"
	}
	cfg := &container.Config{
		Image:      spec.Image,
		Entrypoint: []string{agentPath, "init", "--"},
		Cmd:        cmd,
		Env:        env,
		Labels:     labels,
		Hostname:   "sandbox-" + shortID(spec.ID),
	}
	// In a spare holder's namespace the workload and its enforcer start together; the
	// workload's address is the holder's, and so is its hostname (holders.go).
	var h holder
	if spare && withEgress {
		spare = false
		if h, spare = r.takeSpare(); spare {
			hostCfg.NetworkMode = container.NetworkMode("container:" + h.id)
			hostCfg.DNS = nil // the holder's; the engine refuses it with this mode
			cfg.Hostname = ""
			labels[labelHolder] = holderName(spec.ID)
			labels[labelAddress] = h.addr
			steps.done("spare namespace")
		}
	}
	// fail marks a failure of a create in a holder's namespace for Create's retry.
	fail := func(err error) error {
		if spare {
			return holderError{err}
		}
		return err
	}
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: containerName(spec.ID), Config: cfg, HostConfig: hostCfg,
	})
	if err != nil {
		r.removeVolumes(context.WithoutCancel(ctx), madeVolumes)
		if spare {
			r.removeContainer(h.id)
		}
		return runtimes.Instance{}, fail(fmt.Errorf("create container: %w", err))
	}
	steps.done("create workload")
	cleanup := func() {
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if withEgress {
			r.removeEgress(rmCtx, spec.ID)
		}
		_ = r.removeGone(rmCtx, created.ID, true)
		if spare {
			_ = r.removeGone(rmCtx, h.id, false)
		}
		r.removeVolumes(rmCtx, madeVolumes)
		unstageHostVolumes(spec.ID)
		r.dropGoneAntiSpoofPorts()
	}
	// The enforcer sidecar is created while the workload is prepared and started; in a
	// holder's namespace it is also started and awaited meanwhile.
	type prepared struct {
		id  string
		err error
	}
	sidecar := make(chan prepared, 1)
	if withEgress {
		go func() {
			netns := created.ID
			if spare {
				netns = h.id
			}
			id, err := r.prepareEgress(ctx, spec, netns, agentVol, ca)
			if err == nil && spare {
				err = r.startEnforcer(ctx, spec, ca, id, h)
			}
			sidecar <- prepared{id, err}
		}()
	}
	renamed := make(chan error, 1)
	if spare {
		// After the workload exists: SweepHelpers takes a holder so named whose workload
		// it does not find for an orphan.
		go func() {
			_, err := r.cli.ContainerRename(ctx, h.id, client.ContainerRenameOptions{NewName: holderName(spec.ID)})
			renamed <- err
		}()
	} else {
		renamed <- nil
	}
	if ca != nil {
		if err := r.installVaultTrust(ctx, created.ID, ca); err != nil {
			if withEgress {
				<-sidecar
			}
			<-renamed
			cleanup()
			return runtimes.Instance{}, fail(err)
		}
	}
	if _, err := r.cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		if withEgress {
			<-sidecar
		}
		<-renamed
		cleanup()
		return runtimes.Instance{}, fail(fmt.Errorf("start container: %w", err))
	}
	steps.done("start workload")
	// The workload as inspected once started in its own namespace (nil: not inspected).
	var started *container.InspectResponse
	if !spare {
		// Its own namespace: pinned before its enforcer (NET_ADMIN) starts in it.
		if started, err = r.pinContainer(ctx, created.ID); err != nil {
			if withEgress {
				<-sidecar
			}
			<-renamed
			cleanup()
			return runtimes.Instance{}, fmt.Errorf("pin the sandbox's bridge port: %w", err)
		}
		steps.done("pin bridge port")
	}
	if err := <-renamed; err != nil {
		if withEgress {
			<-sidecar
		}
		cleanup()
		return runtimes.Instance{}, fail(fmt.Errorf("rename namespace holder: %w", err))
	}
	if withEgress {
		p := <-sidecar
		if spare {
			steps.done("enforcer started and healthy")
		} else {
			steps.done("enforcer prepared")
		}
		err := p.err
		var inst runtimes.Instance
		if err == nil {
			if spare {
				inst = r.startedInstance(spec, labels, h.addr)
				err = r.startSandbox(ctx, spec, created.ID, &inst, steps)
			} else {
				inst, err = r.startEgress(ctx, spec, ca, created.ID, p.id, started, steps)
			}
		}
		if err != nil {
			cleanup()
			return runtimes.Instance{}, fail(err)
		}
		steps.log(r.log, spec.ID)
		return inst, nil
	}
	inst, err := r.Inspect(ctx, spec.ID)
	if err != nil {
		cleanup()
		return runtimes.Instance{}, err
	}
	steps.done("inspect")
	steps.log(r.log, spec.ID)
	return inst, nil
}

// startedInstance is the instance of a workload created with labels and started at addr,
// as an Inspect would read it: a create in a holder's namespace needs no inspect.
func (r *Runtime) startedInstance(spec runtimes.Spec, labels map[string]string, addr string) runtimes.Instance {
	inst := runtimes.Instance{Labels: labels, Image: imageOf(labels, spec.Image), AgentToken: spec.AgentToken, State: runtimes.StateRunning, Address: addr}
	fillFromLabels(&inst, labels)
	return inst
}

// createSteps times the steps of one create for the debug log (what each engine call
// costs; see BenchmarkColdCreate).
type createSteps struct {
	last  time.Time
	start time.Time
	b     strings.Builder
}

func newCreateSteps() *createSteps {
	now := time.Now()
	return &createSteps{last: now, start: now}
}

func (s *createSteps) done(step string) {
	now := time.Now()
	if s.b.Len() > 0 {
		s.b.WriteString(", ")
	}
	fmt.Fprintf(&s.b, "%s %.1fms", step, float64(now.Sub(s.last).Microseconds())/1000)
	s.last = now
}

func (s *createSteps) log(log *slog.Logger, id string) {
	log.Debug("sandbox container created", "id", id, "ms", float64(time.Since(s.start).Microseconds())/1000, "steps", s.b.String())
}

// writableScratch returns the tmpfs mounts of a read-only sandbox. They allow exec (a
// workspace holds scripts and virtualenvs) but neither setuid binaries nor devices.
func writableScratch(paths []string, size int64) map[string]string {
	if paths == nil {
		paths = []string{"/workspace", "/tmp"}
	}
	if size <= 0 {
		size = 256 << 20
	}
	out := make(map[string]string, len(paths))
	for _, p := range paths {
		out[p] = fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=1777", size)
	}
	return out
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Inspect implements runtimes.Runtime.
func (r *Runtime) Inspect(ctx context.Context, id string) (runtimes.Instance, error) {
	res, err := r.cli.ContainerInspect(ctx, containerName(id), client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return runtimes.Instance{}, fmt.Errorf("sandbox %s: %w", id, runtimes.ErrNotFound)
		}
		return runtimes.Instance{}, fmt.Errorf("inspect container: %w", err)
	}
	inst := r.instance(res.Container)
	live := inst.State == runtimes.StateRunning || inst.State == runtimes.StatePaused
	if inst.Labels[labelEgress] != "" {
		var complete bool
		complete, inst.EnforcerRunning, inst.EgressToken = r.enforcement(ctx, id)
		inst.Complete = live && complete
	} else {
		// Without an enforcer the entrypoint is the container's command: it runs when
		// the container does.
		inst.Complete = live
	}
	return inst, nil
}

func (r *Runtime) instance(c container.InspectResponse) runtimes.Instance {
	inst := runtimes.Instance{State: runtimes.StateMissing}
	if c.Config != nil {
		inst.Labels = c.Config.Labels
		inst.Image = imageOf(c.Config.Labels, c.Config.Image)
		for _, kv := range c.Config.Env {
			if v, ok := strings.CutPrefix(kv, envAgentToken+"="); ok {
				inst.AgentToken = v
			}
			if v, ok := strings.CutPrefix(kv, envEgressToken+"="); ok {
				inst.EgressToken = v
			}
		}
	}
	fillFromLabels(&inst, inst.Labels)
	if c.State != nil {
		switch {
		case c.State.Paused:
			inst.State = runtimes.StatePaused
		case c.State.Running:
			inst.State = runtimes.StateRunning
		case c.State.Status == "created":
			inst.State = runtimes.StateCreated
		default:
			inst.State = runtimes.StateExited
			inst.ExitCode = c.State.ExitCode
			inst.Message = fmt.Sprintf("main process exited with code %d", c.State.ExitCode)
			if c.State.OOMKilled {
				inst.OOMKilled = true
				inst.Message += " (killed: out of memory)"
			}
			if c.State.Error != "" {
				inst.Message += ": " + c.State.Error
			}
		}
	}
	if c.NetworkSettings != nil {
		if ep, ok := c.NetworkSettings.Networks[r.opts.Network]; ok && ep != nil && ep.IPAddress.IsValid() {
			inst.Address = ep.IPAddress.String()
		}
	}
	holderAddress(&inst)
	return inst
}

// holderAddress gives a live workload in a holder's namespace (holders.go) the address
// it was labelled with: the engine reports none of its own.
func holderAddress(inst *runtimes.Instance) {
	if inst.Address == "" && (inst.State == runtimes.StateRunning || inst.State == runtimes.StatePaused) {
		inst.Address = inst.Labels[labelAddress]
	}
}

func fillFromLabels(inst *runtimes.Instance, labels map[string]string) {
	inst.ID = labels[runtimes.LabelID]
	inst.Tenant = labels[runtimes.LabelTenant]
	inst.Pool = labels[runtimes.LabelPool]
	if t, err := time.Parse(time.RFC3339Nano, labels[runtimes.LabelCreatedAt]); err == nil {
		inst.CreatedAt = t
	}
	if t, err := time.Parse(time.RFC3339Nano, labels[runtimes.LabelExpiresAt]); err == nil {
		inst.ExpiresAt = &t
	}
	if ep := labels[labelEntrypoint]; ep != "" {
		_ = json.Unmarshal([]byte(ep), &inst.Entrypoint)
	}
}

// List implements runtimes.Runtime. It returns the engine's summaries: Instance tokens
// are empty (Inspect one sandbox for them). Enforcer sidecars carry the sandbox id label
// too, so the same listing tells each sandbox's EnforcerRunning (MissingEnforcers).
func (r *Runtime) List(ctx context.Context) ([]runtimes.Instance, error) {
	res, err := r.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", runtimes.LabelID),
	})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	enforcerRunning := make(map[string]bool)
	for _, c := range res.Items {
		if c.Labels[labelRole] == roleEgress && c.State == "running" {
			enforcerRunning[c.Labels[runtimes.LabelID]] = true
		}
	}
	if r.procs != nil {
		for _, c := range res.Items {
			if id := c.Labels[runtimes.LabelID]; c.Labels[labelEgress] != "" && c.Labels[labelRole] == "" && r.procs.runningOrRestarting(id) {
				enforcerRunning[id] = true
			}
		}
	}
	out := make([]runtimes.Instance, 0, len(res.Items))
	for _, c := range res.Items {
		if c.Labels[labelRole] != "" {
			continue // a sandbox's helper (egress enforcer), not a sandbox
		}
		// One runtime owns one network: gateways on other networks (other deployments,
		// test runs) never see, adopt or remove each other's sandboxes. (Not an engine
		// filter: a workload in a holder's namespace is on the network by label only.)
		if !r.onNetwork(c) {
			continue
		}
		// The summary has labels, state and address; tokens and exit codes need Inspect.
		inst := runtimes.Instance{Labels: c.Labels, Image: imageOf(c.Labels, c.Image)}
		fillFromLabels(&inst, c.Labels)
		switch c.State {
		case "running":
			inst.State = runtimes.StateRunning
		case "paused":
			inst.State = runtimes.StatePaused
		case "created":
			inst.State = runtimes.StateCreated
		default:
			inst.State = runtimes.StateExited
			inst.Message = c.Status
		}
		if c.NetworkSettings != nil {
			if ep, ok := c.NetworkSettings.Networks[r.opts.Network]; ok && ep != nil && ep.IPAddress.IsValid() {
				inst.Address = ep.IPAddress.String()
			}
		}
		holderAddress(&inst)
		inst.EnforcerRunning = enforcerRunning[inst.ID]
		out = append(out, inst)
	}
	r.usage.keepOnly(out)
	return out, nil
}

// Delete implements runtimes.Runtime.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	// The enforcer has its own PID namespace and a restart policy: it does not end with
	// the workload, so it is removed explicitly. Both removals run at once (each is a
	// kill plus a filesystem teardown, and a burst of expiries waits for the slower of
	// the two, not their sum); Delete returns only when both are done, so no sidecar
	// outlives a deleted sandbox. Either order is safe: the nftables table belongs to
	// the network namespace, so the workload stays closed while its enforcer goes.
	// A sandbox made in a holder's namespace (holders.go) has its holder removed at the
	// same time; there is none (a not-found answer) otherwise.
	egressRemoved := make(chan struct{})
	go func() {
		defer close(egressRemoved)
		r.removeEgress(ctx, id)
	}()
	holderRemoved := make(chan struct{})
	go func() {
		defer close(holderRemoved)
		_ = r.removeGone(context.WithoutCancel(ctx), holderName(id), false)
	}()
	err := r.removeGone(ctx, containerName(id), true)
	<-egressRemoved
	<-holderRemoved
	r.usage.drop(id)
	if err != nil {
		return fmt.Errorf("remove container: %w", err)
	}
	r.removeVolumesOf(ctx, id)
	unstageHostVolumes(id)
	// Its namespace is gone with its last container: so is its bridge port.
	r.dropGoneAntiSpoofPorts()
	return nil
}

// ReleaseHelpers removes the enforcer sidecar and the namespace holder of a sandbox
// whose workload has stopped: they serve a live workload only. The workload's container
// is kept, with its logs, until Delete.
func (r *Runtime) ReleaseHelpers(ctx context.Context, id string) error {
	var errs []error
	for _, name := range []string{egressContainerName(id), holderName(id)} {
		if err := r.removeGone(ctx, name, false); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", name, err))
		}
	}
	r.dropGoneAntiSpoofPorts()
	return errors.Join(errs...)
}

// Pause implements runtimes.Runtime.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	_, err := r.cli.ContainerPause(ctx, containerName(id), client.ContainerPauseOptions{})
	return mapFreezeErr(id, err)
}

// Resume implements runtimes.Runtime.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	_, err := r.cli.ContainerUnpause(ctx, containerName(id), client.ContainerUnpauseOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		// The engine answers an unpause of a container it has not paused with a plain
		// failure: its state tells that case apart.
		if c, ierr := r.cli.ContainerInspect(ctx, containerName(id), client.ContainerInspectOptions{}); ierr == nil &&
			c.Container.State != nil && !c.Container.State.Paused {
			return fmt.Errorf("sandbox %s: %w: %w", id, runtimes.ErrWrongState, err)
		}
	}
	return mapFreezeErr(id, err)
}

// mapFreezeErr is mapErr for a pause or resume: the engine answers a conflict for a
// container already paused, not paused, or not running.
func mapFreezeErr(id string, err error) error {
	if cerrdefs.IsConflict(err) {
		return fmt.Errorf("sandbox %s: %w: %w", id, runtimes.ErrWrongState, err)
	}
	return mapErr(id, err)
}

func mapErr(id string, err error) error {
	if err == nil {
		return nil
	}
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("sandbox %s: %w", id, runtimes.ErrNotFound)
	}
	return err
}

// Logs implements runtimes.Runtime.
func (r *Runtime) Logs(ctx context.Context, id string, lines int) (string, error) {
	rc, err := r.cli.ContainerLogs(ctx, containerName(id), client.ContainerLogsOptions{
		ShowStdout: true, ShowStderr: true, Tail: strconv.Itoa(lines),
	})
	if err != nil {
		return "", mapErr(id, err)
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, io.LimitReader(rc, 64<<10)); err != nil && !errors.Is(err, io.EOF) {
		return out.String(), nil
	}
	return strings.TrimSpace(out.String()), nil
}

var _ runtimes.Runtime = (*Runtime)(nil)
