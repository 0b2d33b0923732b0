package docker

// Egress enforcement on Docker.
//
// A sandbox's enforcer is a host process in its network namespace where the runtime can
// run one (enforcerprocess.go), else the sidecar container this file describes; either
// way the workload starts with only the agent, the entrypoint once the enforcer has
// answered (signed) with its rules in place, and the enforcer owes nothing to the
// workload's image.
//
// With a sidecar, a sandbox with an EgressSpec is two containers. The workload container owns the
// network namespace (it is the one on the sandbox network, so its address, listing and
// cleanup work exactly as without enforcement), or, when the create found a spare ready,
// a third container does: a namespace holder that both join (holders.go), so that
// neither waits for the other's start. The workload starts with only the agent running,
// not the user's entrypoint. The enforcer sidecar joins the same network namespace, and
// only that one, with NET_ADMIN (the workload has neither NET_ADMIN nor NET_RAW),
// installs the nftables table and serves the DNS proxy and the /policy API on 18080.
// Only once it answers (signed) does the runtime start the entrypoint through the
// agent, so no user process ever runs before the rules are in place.
//
// Why the sidecar has its own PID namespace (and mount namespace, as any container):
// root in the workload must not see, signal or ptrace the enforcer, nor read its token
// from /proc/<pid>/environ or its saved policy through /proc/<pid>/root. The price is
// that removing the workload no longer ends the enforcer (with a shared PID namespace
// the kernel killed it when the workload's init exited), so the sidecar is removed
// explicitly: by Delete (first, so the deletion is complete when it returns), by a
// failed create's cleanup, and by SweepHelpers for one whose workload went away by
// other means (an operator's `docker rm -f`). The e2e harness removes sidecars by label.
//
// The sidecar can die or be restarted without taking the network away: the namespace
// and the nftables table belong to the workload, and the table stays in force (fail
// closed) until a new enforcer replaces it in one transaction. The enforcer keeps the
// policy in force in a state file on the sidecar's own filesystem (egressStateFile),
// so a restarted enforcer installs the policy last set through the API, not the one it
// was created with. It runs under the agent's restart loop (`sandbox-agent supervise`),
// and the container has the unless-stopped restart policy for the rest.
//
// Nothing of the workload's image reaches the sidecar: it runs from the helpers' image
// (helperimage.go), the agent binary from its read-only volume, with an environment the
// runtime writes whole. And the runtime believes only what the enforcer signs about the
// policy it enforces: that must be the policy it was given (policyInForceMatches), or
// the create fails.
//
// The workload shares the sidecar's network namespace, so while the enforcer restarts
// it could bind port 18080 itself. The gateway never sends the enforcer's token there:
// it signs each request and checks the signed answer (package egressauth), so a
// workload posing as its enforcer learns nothing usable and is not believed.

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
	"github.com/sandgate/sandgate/sandbox-agent/egress"
)

// Labels of the enforcer sidecar and of a workload that has one.
const (
	// labelRole marks sandgate's helper containers; "egress" is the enforcer sidecar.
	labelRole  = "sandgate.io/role"
	roleEgress = "egress"
	// labelEgress on a workload says its entrypoint runs behind an enforcer.
	labelEgress = "sandgate.io/egress"
)

// Environment of the enforcer (read by `sandbox-agent egress`).
const envEgressPolicy = agentproto.EnvEgressPolicy

// egressStateFile is where the enforcer keeps the policy in force, in the sidecar's own
// writable layer over the helpers' empty image: it starts empty with every sidecar,
// survives the enforcer's restarts and the container's, and the workload (another mount
// namespace, another PID namespace) cannot read or change it.
const egressStateFile = "/var/lib/sandgate-egress/policy.json"

// egressTimeout bounds the wait for the enforcer's /healthz and the agent's first answer.
const egressTimeout = 30 * time.Second

// egressCallTimeout bounds one call to the enforcer or the agent while a sandbox starts.
const egressCallTimeout = 5 * time.Second

func egressContainerName(id string) string { return containerName(id) + "-egress" }

// EnforcesEgress reports whether sandboxes created with an EgressSpec get an enforcer.
// The gateway asks before it promises a networkPolicy it could not keep.
func (r *Runtime) EnforcesEgress() bool { return !r.opts.NoEgress }

// prepareEgress creates the enforcer sidecar of a created (not yet started) workload
// container, with the agent volume mounted, so that this work overlaps the workload's
// own start. It joins the network namespace of container netns: the workload's own, or
// the holder's the workload is in (holders.go). It runs from the helpers' image
// (helperimage.go), never from the workload's, with an environment written here whole.
// It returns the sidecar's container id.
func (r *Runtime) prepareEgress(ctx context.Context, spec runtimes.Spec, netns, agentVol string, ca *vaultCA) (string, error) {
	if r.procs != nil {
		return "", nil // a process, started once the namespace runs (startEnforcerProcess)
	}
	image, err := r.helperImage(ctx)
	if err != nil {
		return "", err
	}
	args, env := r.enforcerArgsEnv(spec, ca, egressStateFile)
	args = append([]string{"egress"}, args...)
	env = append([]string{"PATH=" + agentBinDir}, env...)
	pids := int64(64)
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: egressContainerName(spec.ID),
		Config: &container.Config{
			Image: image,
			// The agent's restart loop keeps the policy API and the DNS proxy up if the
			// enforcer dies (the image has no shell to run one).
			Entrypoint: append([]string{agentPath, "supervise", "--", agentPath}, args...),
			User:       "0:0",
			WorkingDir: "/",
			Env:        env,
			Labels: map[string]string{
				runtimes.LabelID: spec.ID, runtimes.LabelTenant: spec.Tenant, labelRole: roleEgress,
			},
		},
		HostConfig: &container.HostConfig{
			LogConfig: r.logConfig,
			// The network namespace only: no PidMode (see the file comment).
			NetworkMode: container.NetworkMode("container:" + netns),
			CapDrop:     []string{"ALL"},
			// NET_ADMIN for nftables and SO_MARK, NET_BIND_SERVICE for port 53.
			CapAdd:      []string{"NET_ADMIN", "NET_BIND_SERVICE"},
			SecurityOpt: []string{"no-new-privileges:true"},
			// A restart keeps the container's writable layer, where the state file is.
			RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyUnlessStopped},
			Runtime:       r.opts.OCIRuntime,
			Resources:     container.Resources{Memory: 128 << 20, PidsLimit: &pids},
			Mounts:        []mount.Mount{r.agentMount(agentVol)},
		},
	})
	if err != nil {
		return "", fmt.Errorf("create egress enforcer: %w", err)
	}
	return created.ID, nil
}

// enforcerArgsEnv are the enforcer's arguments (after "egress") and its whole
// environment, the same for a sidecar and a process: its token, the sandbox's DNS
// servers, the vault's CA, the platform's denials and the initial policy. stateFile is
// where it keeps the policy in force, seen from its own filesystem.
func (r *Runtime) enforcerArgsEnv(spec runtimes.Spec, ca *vaultCA, stateFile string) (args, env []string) {
	args = []string{"--log-level", "info", "--state-file", stateFile}
	env = []string{envEgressToken + "=" + spec.EgressToken}
	env = append(env, r.enforcerDNSEnv()...)
	if ca != nil {
		args = append(args, "--credential-proxy")
		env = append(env, ca.enforcerEnv(r.opts.VaultUpstreamCA)...)
	}
	if len(spec.Egress.PlatformDeny) > 0 {
		args = append(args, "--platform-deny", strings.Join(spec.Egress.PlatformDeny, ","))
	}
	policy := spec.Egress.Policy
	if len(policy) == 0 {
		policy = []byte(`{"defaultAction":"deny"}`)
	}
	env = append(env, envEgressPolicy+"="+string(policy))
	return args, env
}

// startEnforcerProcess starts sandbox spec's enforcer as a host process in the network
// namespace of container owner (the workload, or its holder), whose main process is
// pid and whose resolv.conf (on the host) names the upstream resolver.
func (r *Runtime) startEnforcerProcess(spec runtimes.Spec, ca *vaultCA, owner string, pid int, resolvConf string) error {
	args, env := r.enforcerArgsEnv(spec, ca, enforcerStateDir+"/policy.json")
	upstream, err := nameservers(resolvConf)
	if err != nil || len(upstream) == 0 {
		return fmt.Errorf("the sandbox's resolver: %s names no IPv4 nameserver", resolvConf)
	}
	args = append(args, "--upstream", netip.AddrPortFrom(upstream[0], 53).String())
	return r.procs.start(spec.ID, pid, owner, spec.EgressToken, args, env)
}

// startEgress starts the prepared enforcer sidecar of a started workload container,
// waits until its rules are installed and then starts the sandbox's entrypoint through
// the agent. started is the workload as inspected after its start (by the pinning of
// its bridge port), or nil: then it is inspected here. It returns the workload as it was
// once started, complete: Create needs no Inspect after it.
func (r *Runtime) startEgress(ctx context.Context, spec runtimes.Spec, ca *vaultCA, workloadID, sidecarID string, started *container.InspectResponse, steps *createSteps) (runtimes.Instance, error) {
	// The sidecar joins the namespace of the running workload by its id: it can start
	// while the workload's address is read. A process needs the workload's pid first.
	inspected := make(chan error, 1)
	var workload container.InspectResponse
	if started != nil {
		workload = *started
		inspected <- nil
	} else {
		go func() {
			res, err := r.cli.ContainerInspect(ctx, workloadID, client.ContainerInspectOptions{})
			workload = res.Container
			inspected <- err
		}()
	}
	var startErr error
	if r.procs == nil {
		_, startErr = r.cli.ContainerStart(ctx, sidecarID, client.ContainerStartOptions{})
	}
	inspectErr := <-inspected
	if r.procs != nil && inspectErr == nil {
		pid := 0
		if workload.State != nil {
			pid = workload.State.Pid
		}
		startErr = r.startEnforcerProcess(spec, ca, workloadID, pid, workload.ResolvConfPath)
	}
	steps.done("inspect workload + start enforcer")
	if startErr != nil {
		r.removeEgress(ctx, spec.ID)
		return runtimes.Instance{}, fmt.Errorf("start egress enforcer: %w", startErr)
	}
	if inspectErr != nil {
		r.removeEgress(ctx, spec.ID)
		return runtimes.Instance{}, fmt.Errorf("inspect workload: %w", inspectErr)
	}
	inst := r.instance(workload)
	if inst.Address == "" {
		r.removeEgress(ctx, spec.ID)
		return runtimes.Instance{}, fmt.Errorf("workload container has no address on network %s", r.opts.Network)
	}
	if err := r.waitEgressHealthy(ctx, spec, inst.Address); err != nil {
		r.removeEgress(ctx, spec.ID)
		return runtimes.Instance{}, err
	}
	steps.done("enforcer healthy")
	if err := r.startSandbox(ctx, spec, workloadID, &inst, steps); err != nil {
		return runtimes.Instance{}, err
	}
	return inst, nil
}

// startEnforcer starts the enforcer (the prepared sidecar, or a process) in holder h's
// namespace (holders.go) and waits until its rules are installed; the workload may be
// starting meanwhile, its entrypoint not (startSandbox runs after this).
func (r *Runtime) startEnforcer(ctx context.Context, spec runtimes.Spec, ca *vaultCA, sidecarID string, h holder) error {
	if r.procs != nil {
		if err := r.startEnforcerProcess(spec, ca, h.id, h.pid, h.resolvConf); err != nil {
			return fmt.Errorf("start egress enforcer: %w", err)
		}
	} else if _, err := r.cli.ContainerStart(ctx, sidecarID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start egress enforcer: %w", err)
	}
	return r.waitEgressHealthy(ctx, spec, h.addr)
}

// startSandbox starts the entrypoint of a started workload whose enforcer is healthy
// (or writes the start marker when there is none) and completes inst accordingly.
func (r *Runtime) startSandbox(ctx context.Context, spec runtimes.Spec, workloadID string, inst *runtimes.Instance, steps *createSteps) error {
	marked, settled, err := r.startEntrypoint(ctx, inst.Address, spec.AgentToken, spec.Entrypoint)
	if err != nil {
		return err
	}
	inst.Settled = settled
	steps.done("entrypoint and start marker")
	if len(spec.Entrypoint) == 0 {
		if err := r.markStarted(ctx, workloadID); err != nil {
			return err
		}
		marked = true
		steps.done("start marker")
	}
	inst.EgressToken = spec.EgressToken
	// Not marked: the entrypoint exited while the agent watched it, and the workload
	// ends with it; the caller's wait for the sandbox reports why.
	inst.Complete = marked
	return nil
}

// startedMarker is written into the workload once its entrypoint runs behind a healthy
// enforcer: by the agent as it starts the entrypoint (startEntrypoint), by an engine
// copy when there is none (markStarted). Labels cannot change after a container is made, so this file is how the
// runtime tells, after a gateway died mid-create, a finished sandbox from a half-made
// one. The workload can write there too, but only once its entrypoint runs, and a
// sandbox is complete only with its enforcer running besides (Inspect checks both).
const startedMarker = agentDir + "/started"

func (r *Runtime) markStarted(ctx context.Context, workloadID string) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "started", Typeflag: tar.TypeReg, Mode: 0o444, Size: 0})
	if err := tw.Close(); err != nil {
		return fmt.Errorf("pack start marker: %w", err)
	}
	if _, err := r.cli.CopyToContainer(ctx, workloadID, client.CopyToContainerOptions{
		DestinationPath: agentDir, Content: &buf,
	}); err != nil {
		return fmt.Errorf("mark the sandbox started: %w", err)
	}
	return nil
}

// enforcement reports whether a workload with an enforcer is complete: its enforcer
// sidecar runs and its entrypoint was started; it also returns whether the sidecar runs
// and the enforcer's token.
func (r *Runtime) enforcement(ctx context.Context, id string) (complete, running bool, token string) {
	if r.procs != nil {
		if token = r.procs.token(id); token != "" {
			if running = r.procs.runningOrRestarting(id); !running {
				return false, false, token
			}
			_, err := r.cli.ContainerStatPath(ctx, containerName(id), client.ContainerStatPathOptions{Path: startedMarker})
			return err == nil, true, token
		}
		// No process record: a sandbox made with a sidecar (the mode changed since).
	}
	res, err := r.cli.ContainerInspect(ctx, egressContainerName(id), client.ContainerInspectOptions{})
	if err != nil || res.Container.Config == nil {
		return false, false, ""
	}
	for _, kv := range res.Container.Config.Env {
		if v, ok := strings.CutPrefix(kv, envEgressToken+"="); ok {
			token = v
		}
	}
	running = res.Container.State != nil && res.Container.State.Running
	if !running {
		return false, false, token
	}
	_, err = r.cli.ContainerStatPath(ctx, containerName(id), client.ContainerStatPathOptions{Path: startedMarker})
	return err == nil, true, token
}

// RestoreEgress gives a running workload a new enforcer sidecar (removing the old one,
// if any) with spec's egress policy (the sandbox's current policy, not its create-time
// one) and token, and waits until its rules are installed. The workload's entrypoint is
// not touched. spec needs ID, Tenant, EgressToken and Egress. For the
// reconciler, when a sandbox's sidecar is gone. It succeeds only on a signed answer of
// the new enforcer (a workload holding port 18080 cannot pass for it); on a timeout the
// new sidecar stays, its rules installed and its restart loop trying again.
func (r *Runtime) RestoreEgress(ctx context.Context, spec runtimes.Spec) error {
	if spec.Egress == nil || r.opts.NoEgress {
		return errors.New("restore egress: the sandbox has no egress enforcement")
	}
	res, err := r.cli.ContainerInspect(ctx, containerName(spec.ID), client.ContainerInspectOptions{})
	if err != nil {
		return mapErr(spec.ID, err)
	}
	// The agent volume's filler is made from the image the workload runs (its id), not
	// from the name, which the engine would resolve anew.
	spec.Image = res.Container.Image
	agentVol, err := r.agentVolume(ctx, spec.Image)
	if err != nil {
		return err
	}
	addr := r.instance(res.Container).Address
	if addr == "" {
		return fmt.Errorf("workload container has no address on network %s", r.opts.Network)
	}
	var ca *vaultCA
	if res.Container.Config != nil && res.Container.Config.Labels[labelCredentialProxy] != "" {
		// The vault lived in the old sidecar; the new one starts empty, with a new CA.
		if ca, err = newVaultCA(spec.ID); err != nil {
			return err
		}
		if err := r.installVaultTrust(ctx, res.Container.ID, ca); err != nil {
			return err
		}
	}
	r.removeEgress(ctx, spec.ID)
	if r.procs != nil {
		// The workload's process is in the namespace, its own or its holder's.
		pid := 0
		if res.Container.State != nil {
			pid = res.Container.State.Pid
		}
		resolvConf := res.Container.ResolvConfPath
		if holderID := res.Container.Config.Labels[labelHolder]; holderID != "" {
			if hres, err := r.cli.ContainerInspect(ctx, holderID, client.ContainerInspectOptions{}); err == nil {
				resolvConf = hres.Container.ResolvConfPath
			}
		}
		if err := r.startEnforcerProcess(spec, ca, res.Container.ID, pid, resolvConf); err != nil {
			r.removeEgress(ctx, spec.ID)
			return fmt.Errorf("start egress enforcer: %w", err)
		}
		return r.waitEgressHealthy(ctx, spec, addr)
	}
	// Joining the workload's namespace by the workload's id works in a holder's namespace
	// too: the engine resolves it to the namespace the workload is in.
	sidecarID, err := r.prepareEgress(ctx, spec, res.Container.ID, agentVol, ca)
	if err != nil {
		return err
	}
	if _, err := r.cli.ContainerStart(ctx, sidecarID, client.ContainerStartOptions{}); err != nil {
		r.removeEgress(ctx, spec.ID)
		return fmt.Errorf("start egress enforcer: %w", err)
	}
	return r.waitEgressHealthy(ctx, spec, addr)
}

// waitEgressHealthy waits until the enforcer of spec answers (it shares the workload's
// address): with a token, a signed GET /policy whose answer is signed too, so that a
// workload holding port 18080 (RestoreEgress runs while user code does) cannot pass for
// it, and whose policy in force must be spec's (egress.CheckPolicyInForce: a mismatch
// is ErrEnforcementMismatch at once, not a retry); without one, /healthz.
func (r *Runtime) waitEgressHealthy(ctx context.Context, spec runtimes.Spec, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, egressTimeout)
	defer cancel()
	// The enforcer is usually up within tens of milliseconds; a poll is one request on a
	// kept-alive connection (or a refused dial), so polling often costs little.
	delay := 2 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if spec.EgressToken != "" {
			status, body, err := r.agents.Policy(ctx, addr, spec.EgressToken, http.MethodGet, nil, egressCallTimeout)
			if err == nil && status == http.StatusOK {
				if err := egress.CheckPolicyInForce(body, spec.Egress.Policy, spec.Egress.PlatformDeny); err != nil {
					return fmt.Errorf("%w: %w", runtimes.ErrEnforcementMismatch, err)
				}
				return nil
			}
		} else if r.agents.EnforcerHealthy(ctx, addr, egressCallTimeout) == nil {
			return nil
		}
		if attempt%50 == 49 && r.procs != nil {
			if r.procs.exitedNow(spec.ID) {
				return errors.New("the egress enforcer exited before its rules were installed")
			}
		} else if attempt%50 == 49 {
			if _, err := r.cli.ContainerInspect(ctx, egressContainerName(spec.ID), client.ContainerInspectOptions{}); cerrdefs.IsNotFound(err) {
				return errors.New("the egress enforcer exited before its rules were installed")
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the egress enforcer did not become healthy within %s", egressTimeout)
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Millisecond)
	}
}

// entrypointSettle is how long the agent may watch a started entrypoint before it
// answers, for one that computes without ever waiting; one that waits (a server, `tail
// -f`) is answered for within milliseconds, one that exits at once with its exit.
const entrypointSettle = 100 * time.Millisecond

// startEntrypoint hands the sandbox's entrypoint to the agent (PID 1 of the workload),
// which starts and supervises it exactly as if it had been given at container start,
// and writes the start marker once it has. It reports whether the marker was written
// (not when there is no entrypoint: the agent alone is the main process) and whether
// the agent saw the entrypoint settle (past its start: see initproc.Supervisor.Settle).
// An entrypoint that exited while the agent watched is neither: the agent ends with it,
// and the caller's wait for the sandbox reports the exit.
func (r *Runtime) startEntrypoint(ctx context.Context, addr, token string, entrypoint []string) (marked, settled bool, err error) {
	if len(entrypoint) == 0 {
		return false, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, egressTimeout)
	defer cancel()
	for r.agents.Ping(ctx, addr, token, egressCallTimeout) != nil {
		select {
		case <-ctx.Done():
			return false, false, errors.New("the agent did not answer before the entrypoint could start")
		case <-time.After(10 * time.Millisecond):
		}
	}
	settle := int(entrypointSettle.Milliseconds())
	body, err := r.agents.Agent(ctx, addr, token, http.MethodPost, agentproto.PathEntrypoint,
		map[string]any{"entrypoint": entrypoint, "startedMarker": startedMarker, "settleMillis": settle}, egressCallTimeout)
	if se := (*agentclient.StatusError)(nil); errors.As(err, &se) && se.Status == http.StatusBadRequest {
		// The agent could not start it (no such file, not executable). Let a second agent
		// try, so that the failure ends the sandbox the way a bad entrypoint given at
		// container start does: its reason in the logs and exit code 127 or 126.
		body, err = r.agents.Agent(ctx, addr, token, http.MethodPost, agentproto.PathEntrypoint,
			map[string]any{"entrypoint": append([]string{agentPath, "init", "--"}, entrypoint...), "startedMarker": startedMarker, "settleMillis": settle}, egressCallTimeout)
	}
	if err != nil {
		return false, false, fmt.Errorf("start entrypoint: %w", err)
	}
	var answer struct {
		Settled bool `json:"settled"`
		Exited  bool `json:"exited"`
	}
	_ = json.Unmarshal(body, &answer)
	if answer.Exited {
		return false, false, nil
	}
	return true, answer.Settled, nil
}

// SweepHelpers removes enforcer sidecars whose sandbox container no longer exists: the
// sidecar has its own PID namespace and a restart policy, so it outlives a workload
// removed by anything but Delete (an operator's `docker rm -f`), and a create that fails
// half-way while the engine is timing out can leave one behind in state Created.
// Sidecars are listed before workloads and a sidecar is made after its workload, so a
// create in flight is never taken for an orphan. It removes likewise the agent
// directory volume such a removal leaves, and agent binary volumes of other builds that
// nothing mounts (sweepAgentVolumes).
func (r *Runtime) SweepHelpers(ctx context.Context) (int, error) {
	r.repairAntiSpoof(ctx)
	sidecars, err := r.cli.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", labelRole+"="+roleEgress),
	})
	if err != nil {
		return 0, err
	}
	// Enforcer processes' directories likewise (enforcerprocess.go).
	var procCandidates []enforcerCandidate
	if r.procs != nil {
		procCandidates = r.procs.sweepCandidates()
	}
	// Namespace holders likewise (holders.go): renamed for a sandbox after its workload
	// is made, so listed before the workloads too.
	holders, err := r.cli.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", labelRole+"="+roleNetns).Add("network", r.opts.Network),
	})
	if err != nil {
		return 0, err
	}
	r.sweepHostStaging(ctx)
	r.sweepVolumeRoots(ctx)
	// The sandbox ids that have a workload, listed once, when first needed.
	var live map[string]bool
	liveIDs := func() (map[string]bool, error) {
		if live != nil {
			return live, nil
		}
		workloads, err := r.cli.ContainerList(ctx, client.ContainerListOptions{
			All: true, Filters: make(client.Filters).Add("label", runtimes.LabelID),
		})
		if err != nil {
			return nil, err
		}
		live = make(map[string]bool, len(workloads.Items))
		for _, c := range workloads.Items {
			if c.Labels[labelRole] == "" {
				live[c.Labels[runtimes.LabelID]] = true
			}
		}
		return live, nil
	}
	removed := 0
	if len(procCandidates) > 0 {
		alive, err := liveIDs()
		if err != nil {
			return 0, err
		}
		removed += r.procs.sweep(procCandidates, alive)
	}
	if len(sidecars.Items) > 0 || len(holders.Items) > 0 {
		alive, err := liveIDs()
		if err != nil {
			return 0, err
		}
		removed += r.sweepHolders(ctx, holders.Items, alive)
		for _, c := range sidecars.Items {
			if id := c.Labels[runtimes.LabelID]; id == "" || alive[id] {
				continue
			}
			if err := r.removeGone(ctx, c.ID, false); err == nil {
				removed++
			}
		}
	}
	// Volumes last: a helper removed above may have been the last mount of an agent
	// binary volume.
	removed += r.sweepAgentVolumes(ctx, liveIDs)
	return removed, nil
}

// removeEgress removes a sandbox's enforcer sidecar, if any.
func (r *Runtime) removeEgress(ctx context.Context, id string) {
	if r.procs != nil && r.procs.remove(id) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = r.removeGone(ctx, egressContainerName(id), false)
}

// GatewayAddresses returns the host's addresses on every Docker network of the engine
// (each network's gateway: the sandbox network's first, then docker0 and the other
// bridges): the host answers on all of them, so sandboxes must never reach any as egress.
func (r *Runtime) GatewayAddresses(ctx context.Context) ([]string, error) {
	res, err := r.cli.NetworkInspect(ctx, r.opts.Network, client.NetworkInspectOptions{})
	if err != nil {
		return nil, fmt.Errorf("inspect network %s: %w", r.opts.Network, err)
	}
	all, err := r.cli.NetworkList(ctx, client.NetworkListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list networks: %w", err)
	}
	cfgs := res.Network.IPAM.Config
	for _, n := range all.Items {
		cfgs = append(cfgs, n.IPAM.Config...)
	}
	var out []string
	seen := map[string]bool{}
	for _, c := range cfgs {
		if ip := c.Gateway.Unmap().String(); c.Gateway.IsValid() && !seen[ip] {
			seen[ip] = true
			out = append(out, ip)
		}
	}
	return out, nil
}

// MissingEnforcers returns the sandboxes among instances (as List returned them) whose
// workload runs behind an enforcer that is not running: killed, crashed without its
// restart loop, or removed. It makes no engine call: List read each sandbox's enforcer
// from the same listing as its workload (Instance.EnforcerRunning).
func (r *Runtime) MissingEnforcers(_ context.Context, instances []runtimes.Instance) ([]string, error) {
	var missing []string
	for _, inst := range instances {
		if inst.State == runtimes.StateRunning && inst.Labels[labelEgress] != "" && inst.ID != "" && !inst.EnforcerRunning {
			missing = append(missing, inst.ID)
		}
	}
	return missing, nil
}

// RestoreEnforcer replaces the enforcer sidecar of a running workload whose enforcer is
// gone, with the given policy (the one the gateway last installed) and token, through
// RestoreEgress: the workload's processes keep running, and its drop rules, which belong
// to its network namespace, stay in force until the new enforcer has installed its
// table.
func (r *Runtime) RestoreEnforcer(ctx context.Context, id, egressToken string, egress runtimes.EgressSpec) error {
	if r.opts.NoEgress {
		return errors.New("egress enforcement is turned off on this runtime")
	}
	res, err := r.cli.ContainerInspect(ctx, containerName(id), client.ContainerInspectOptions{})
	if err != nil {
		return mapErr(id, err)
	}
	inst := r.instance(res.Container)
	if inst.State != runtimes.StateRunning || inst.Labels[labelEgress] == "" {
		return fmt.Errorf("sandbox %s is %s (enforced: %t): no enforcer to restore", id, inst.State, inst.Labels[labelEgress] != "")
	}
	return r.RestoreEgress(ctx, runtimes.Spec{ID: id, Tenant: inst.Tenant, Image: inst.Image, EgressToken: egressToken, Egress: &egress})
}

// AgentClient returns the client the runtime calls agents and enforcers with, for the
// gateway to share (one set of keep-alive connections per sandbox).
func (r *Runtime) AgentClient() *agentclient.Client { return r.agents }
