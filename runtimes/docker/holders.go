package docker

// Spare network namespaces.
//
// Starting a container on the sandbox network is most of a cold create: the engine
// makes a network namespace, a veth pair, the bridge port and its iptables rules before
// the container's process runs (350-1900 ms on the loaded 2-core test machine, against
// 200-500 ms for a container that joins a running one's namespace). And an enforced
// sandbox is two containers, the enforcer being able to start only once the namespace
// exists. So the runtime keeps a few spare namespace holders: tiny containers on the
// sandbox network whose only process is `sandbox-agent pause` (the helpers' empty image, helperimage.go, the
// agent volume mounted read-only, no capabilities). A create with an egress policy
// takes one, and its workload and its enforcer both join the holder's namespace
// (NetworkMode container:<holder>) and start at the same time; the entrypoint still
// starts only once the enforcer has answered with its rules in place, exactly as
// without a holder. The spare is replaced in the background once no create is in flight (Create).
//
// Why a third container rather than letting the enforcer own the namespace: the
// namespace must outlive its enforcer. A killed or removed enforcer is replaced by the
// reconciler (RestoreEgress) while the workload runs, and a restarted container gets a
// new namespace. The holder has no restart policy and nothing to crash: if it is
// killed anyway, the namespace's interface goes with it and the sandbox is closed, not
// opened.
//
// What a workload in a holder's namespace differs in (docs/security.md, "Egress"):
//   - its hostname is the holder's, "sandbox" (Docker refuses a hostname with the
//     container: network mode; the workload's UTS name comes from the holder), and so
//     are /etc/hosts and /etc/resolv.conf;
//   - its address is the holder's: the create knows it (the spare was inspected when it
//     was made) and labels the workload with it (labelAddress), since the engine reports
//     no network settings for a container that joins another's namespace;
//   - it is not "on" the sandbox network for the engine's filters: every workload is
//     labelled with its network (labelNetwork), and List selects by that label too.
//
// Names and labels. A spare is named sandgate-spare-<random> and labelled
// sandgate.io/role=netns plus its owner (the gateway process that made it: host, pid and
// start time). A create renames the spare it takes to sandgate-<id>-net (labels cannot
// change), after its workload exists, so that Delete removes it by name and the sweep,
// which lists holders before workloads, never takes a holder of a create in flight for
// an orphan. Spares are removed by Close, by the next runtime on the same host once
// their owner process is gone, and by SweepHelpers likewise; a holder in use whose
// workload is gone is removed by SweepHelpers.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
)

// Labels of namespace holders and of the workloads that join one.
const (
	roleNetns = "netns"
	// labelSpareOwner names the process that made a spare or an agent volume's filler
	// (spareOwnerID), so that what a killed process left is known for its own.
	labelSpareOwner = "sandgate.io/spare-owner"
	// labelNetwork on every workload names the sandbox network its namespace is on
	// (List's filter: a workload in a holder's namespace is not on it for the engine).
	labelNetwork = "sandgate.io/network"
	// labelAddress on a workload in a holder's namespace is its address there.
	labelAddress = "sandgate.io/address"
	// labelHolder on a workload names its holder container.
	labelHolder = "sandgate.io/netns-holder"
)

// holderHostname is the hostname of every sandbox made in a holder's namespace.
const holderHostname = "sandbox"

// defaultSpares is how many spares a runtime keeps when Options.Spares is 0.
const defaultSpares = 2

func holderName(id string) string { return containerName(id) + "-net" }

const sparePrefix = "sandgate-spare-"

// holder is a started namespace holder: its container id, address, main process (an
// enforcer process enters its namespace through it) and resolv.conf on the host.
type holder struct {
	id, addr   string
	pid        int
	resolvConf string
}

// spareOwnerID identifies this process among those on this host: host name, pid and
// the process's start time (so that a reused pid is not taken for it).
// A random part tells apart the runtimes of one process (a config reload builds a new
// one before the old one's Close).
func spareOwnerID() string {
	host, _ := os.Hostname()
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	return host + "/" + strconv.Itoa(os.Getpid()) + "/" + processStart(os.Getpid()) + "/" + hex.EncodeToString(nonce[:])
}

// processStart returns the start time of process pid (field 22 of /proc/pid/stat), or
// "" when it does not exist.
func processStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command (field 2) is in parentheses and may hold spaces: count after it.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// ownerGone reports whether the process a spare's owner label names is known to be gone:
// only owners on this host can be checked; others are left to their own Close.
func ownerGone(owner string) bool {
	host, _ := os.Hostname()
	parts := strings.Split(owner, "/")
	if len(parts) != 4 || parts[0] != host {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		return false
	}
	return processStart(pid) != parts[2]
}

// spareCount is how many spares the runtime keeps (0: none).
func (r *Runtime) spareCount() int {
	if r.opts.NoEgress || strings.HasPrefix(r.opts.OCIRuntime, "runsc") || r.opts.Spares < 0 {
		return 0
	}
	if r.opts.Spares == 0 {
		return defaultSpares
	}
	return r.opts.Spares
}

// takeSpare returns a started spare holder, if one is ready; the caller refills.
func (r *Runtime) takeSpare() (holder, bool) {
	select {
	case h := <-r.spares:
		return h, true
	default:
		return holder{}, false
	}
}

// refillSpares makes spares until the runtime has spareCount of them (ready or being
// made), in the background; a failure is logged and retried at the next refill.
func (r *Runtime) refillSpares() {
	want := r.spareCount()
	r.spareMu.Lock()
	missing := want - len(r.spares) - r.spareMaking
	if missing <= 0 || r.bg.Err() != nil {
		r.spareMu.Unlock()
		return
	}
	r.spareMaking += missing
	r.spareWG.Add(missing)
	r.spareMu.Unlock()
	for range missing {
		go func() {
			defer r.spareWG.Done()
			h, err := r.makeSpare(r.bg)
			r.spareMu.Lock()
			defer r.spareMu.Unlock()
			r.spareMaking--
			if err != nil {
				if r.bg.Err() == nil {
					r.log.Warn("spare network namespace not made", "err", err)
				}
				return
			}
			if r.bg.Err() != nil {
				r.removeContainer(h.id)
				return
			}
			select {
			case r.spares <- h:
			default:
				r.removeContainer(h.id)
			}
		}()
	}
}

// makeSpare creates and starts one spare holder and reads its address.
func (r *Runtime) makeSpare(ctx context.Context) (holder, error) {
	image, err := r.helperImage(ctx)
	if err != nil {
		return holder{}, err
	}
	agentVol, err := r.agentVolume(ctx, image)
	if err != nil {
		return holder{}, err
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	pids := int64(32) // the Go runtime's threads count
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: sparePrefix + hex.EncodeToString(suffix[:]),
		Config: &container.Config{
			Image:      image,
			Entrypoint: []string{agentPath, "pause"},
			Hostname:   holderHostname,
			User:       "65534:65534",
			Labels:     map[string]string{labelRole: roleNetns, labelSpareOwner: r.owner},
		},
		HostConfig: &container.HostConfig{
			LogConfig:      r.logConfig,
			NetworkMode:    container.NetworkMode(r.opts.Network),
			DNS:            r.sandboxDNS(),
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges:true"},
			ReadonlyRootfs: true,
			Resources:      container.Resources{Memory: 32 << 20, PidsLimit: &pids},
			Mounts:         []mount.Mount{r.agentMount(agentVol)},
		},
	})
	if err != nil {
		return holder{}, fmt.Errorf("create namespace holder: %w", err)
	}
	if _, err := r.cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		r.removeContainer(created.ID)
		return holder{}, fmt.Errorf("start namespace holder: %w", err)
	}
	res, err := r.cli.ContainerInspect(ctx, created.ID, client.ContainerInspectOptions{})
	if err != nil {
		r.removeContainer(created.ID)
		return holder{}, fmt.Errorf("inspect namespace holder: %w", err)
	}
	addr := ""
	if ns := res.Container.NetworkSettings; ns != nil {
		if ep, ok := ns.Networks[r.opts.Network]; ok && ep != nil && ep.IPAddress.IsValid() {
			addr = ep.IPAddress.String()
		}
	}
	if addr == "" || res.Container.State == nil || !res.Container.State.Running {
		r.removeContainer(created.ID)
		return holder{}, fmt.Errorf("namespace holder has no address on network %s", r.opts.Network)
	}
	if err := r.pin(res.Container); err != nil {
		r.removeContainer(created.ID)
		return holder{}, fmt.Errorf("pin namespace holder's bridge port: %w", err)
	}
	return holder{id: created.ID, addr: addr, pid: res.Container.State.Pid, resolvConf: res.Container.ResolvConfPath}, nil
}

// removeContainer force-removes a container, ignoring errors (a best-effort cleanup).
func (r *Runtime) removeContainer(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = r.removeGone(ctx, id, false)
}

// removeGone force-removes a container (ref: its id or name) and returns once it is
// gone. A removal the engine already has in progress (another path's: a sweep, a
// death's release, a delete) is waited for, so that when removeGone returns the name is
// free and what the container held is released. A container that does not exist is
// gone.
func (r *Runtime) removeGone(ctx context.Context, ref string, volumes bool) error {
	_, err := r.cli.ContainerRemove(ctx, ref, client.ContainerRemoveOptions{Force: true, RemoveVolumes: volumes})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	if !strings.Contains(err.Error(), "already in progress") {
		return err
	}
	for {
		if _, ierr := r.cli.ContainerInspect(ctx, ref, client.ContainerInspectOptions{}); cerrdefs.IsNotFound(ierr) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove %s: still being removed: %w", ref, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// closeSpares stops making spares and removes this runtime's (Close).
func (r *Runtime) closeSpares() {
	if r.cancelBg == nil {
		return
	}
	// Under spareMu: a refill either has added to spareWG already or sees bg cancelled.
	r.spareMu.Lock()
	r.cancelBg()
	r.spareMu.Unlock()
	r.spareWG.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.removeSpares(ctx, true)
}

// removeSpares removes this network's spares whose owner is gone, and with mine also
// this process's own (Close).
func (r *Runtime) removeSpares(ctx context.Context, mine bool) int {
	res, err := r.cli.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", labelRole+"="+roleNetns).Add("network", r.opts.Network),
	})
	if err != nil {
		return 0
	}
	removed := 0
	for _, c := range res.Items {
		if !isSpare(c) {
			continue
		}
		owner := c.Labels[labelSpareOwner]
		if (mine && owner == r.owner) || (owner != r.owner && ownerGone(owner)) {
			if _, err := r.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err == nil {
				removed++
			}
		}
	}
	return removed
}

// isSpare reports whether a listed holder is still a spare (not renamed by a create).
func isSpare(c container.Summary) bool {
	for _, n := range c.Names {
		if strings.HasPrefix(strings.TrimPrefix(n, "/"), sparePrefix) {
			return true
		}
	}
	return false
}

// sweepHolders removes holders in use whose workload is gone (live: the sandbox ids that
// have a workload, listed after the holders) and spares of owners that are gone.
func (r *Runtime) sweepHolders(ctx context.Context, holders []container.Summary, live map[string]bool) int {
	removed := 0
	for _, c := range holders {
		gone := false
		if isSpare(c) {
			owner := c.Labels[labelSpareOwner]
			gone = owner != r.owner && ownerGone(owner)
		} else {
			for _, n := range c.Names {
				n = strings.TrimPrefix(n, "/")
				if id, ok := strings.CutSuffix(strings.TrimPrefix(n, "sandgate-"), "-net"); ok && strings.HasPrefix(n, "sandgate-") && !live[id] {
					gone = true
				}
			}
		}
		if gone {
			if err := r.removeGone(ctx, c.ID, false); err == nil {
				r.log.Info("removed a network namespace holder whose sandbox or gateway is gone", "names", c.Names)
				removed++
			}
		}
	}
	return removed
}

// onNetwork reports whether a listed workload belongs to this runtime's network: on it
// (its own namespace) or labelled with it (a holder's namespace).
func (r *Runtime) onNetwork(c container.Summary) bool {
	if c.Labels[labelNetwork] == r.opts.Network {
		return true
	}
	if c.NetworkSettings != nil {
		if _, ok := c.NetworkSettings.Networks[r.opts.Network]; ok {
			return true
		}
	}
	return false
}
