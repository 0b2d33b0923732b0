package docker

// Enforcers as host processes.
//
// A sandbox's enforcer is, by default on an engine on the gateway's host, a process the
// runtime starts on the host inside the sandbox's network namespace rather than a
// sidecar container: the second container of every sandbox was most of the CPU a create
// costs beyond a plain `docker run` (the engine, containerd, the shim and runc start it
// as they do the workload). The process is isolated as the sidecar was, by other means:
//
//   - the sandbox's network namespace only: a thread of the gateway enters it (setns)
//     and starts the process from there; the namespace is found from the workload's (or
//     its holder's) pid, checked to be that container's before and after it is opened;
//   - a PID, mount, IPC and UTS namespace of its own (the workload cannot see, signal or
//     ptrace it, nor it any other process), and a chroot into a directory that holds only
//     the agent binary (read-only, root's) and its own state directory: it sees nothing
//     of the host's or the sandbox's files;
//   - a uid of its own (enforcerUID), not root, with only NET_ADMIN (nftables, SO_MARK)
//     and NET_BIND_SERVICE (port 53) as ambient capabilities, and no_new_privs;
//   - a cgroup of its own with a memory and a pids limit (enforcercgroup.go), and a
//     bound on the size of any file it writes (its log and its state);
//   - an environment written here whole; nothing of the workload's image reaches it.
//
// The policy in force is kept, as in the sidecar, in a state file only the enforcer can
// write (<dir>/<id>/root/state), so an enforcer that dies is restarted by the runtime
// that started it, a second later, with the policy last set through the API, and by
// every other gateway of the network on the host, which adopts it at its start or at
// its next helper sweep (whichever gateway takes the directory's lock first starts it;
// the others watch the new process). A gateway that restarts finds its enforcers still
// running (the record, <dir>/<id>/enforcer.json: pid and start time, the token, the
// network); one that died while no gateway watched
// is restored by the reconciler (MissingEnforcers, RestoreEnforcer) with the policy its
// record keeps. Delete, a failed create and SweepHelpers (an enforcer whose workload is
// gone) kill it and remove its directory and cgroup.
//
// The sidecar container stays for engines it cannot work with (Options.Enforcer
// "container", or "auto" where the gateway is not root on the engine's host or the
// host's cgroups are not version 1): egress.go.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
)

// Enforcer modes (Options.Enforcer, SANDGATE_ENFORCER).
const (
	EnforcerAuto      = "auto"
	EnforcerProcess   = "process"
	EnforcerContainer = "container"
)

// defaultEnforcerDir holds the enforcer processes' directories (Options.EnforcerDir).
const defaultEnforcerDir = "/var/lib/sandgate/enforcers"

// enforcerRecordFile is the record of an enforcer process in its directory.
const enforcerRecordFile = "enforcer.json"

// enforcerStateDir is the enforcer's own writable directory, seen from its chroot.
const enforcerStateDir = "/state"

// enforcerBinary is the agent binary, seen from the enforcer's chroot.
const enforcerBinary = "/sandbox-agent"

// enforcerLogBytes bounds every file an enforcer process writes (its RLIMIT_FSIZE, set by
// itself at its start: --max-file-bytes): its log, which the gateway opens for it, and
// its state file.
const enforcerLogBytes = 16 << 20

// enforcerRestartDelay is how long after an enforcer's exit it is started again; it
// doubles, up to enforcerRestartDelayMax, while each run lasts less than
// enforcerSteadyRun (an enforcer that cannot start, such as one whose port the workload
// holds, is not started every second for ever).
const (
	enforcerRestartDelay    = time.Second
	enforcerRestartDelayMax = 30 * time.Second
	enforcerSteadyRun       = 10 * time.Second
)

// enforcerRecord is what <dir>/<id>/enforcer.json keeps of a running enforcer process.
type enforcerRecord = EnforcerRecord

// EnforcerRecord is what the runtime keeps of a sandbox's enforcer process: the process,
// and what starting it again takes (any runtime on the host may, when it exits).
type EnforcerRecord struct {
	PID     int    `json:"pid"`
	Start   string `json:"start"` // the process's start time (processStart)
	Token   string `json:"token"`
	Network string `json:"network"`
	// Owner is the container whose main process's network namespace the enforcer is
	// in: the workload, or its namespace holder.
	Owner string   `json:"owner"`
	Args  []string `json:"args"`
	Env   []string `json:"env"`
}

// processEnforcers starts and tracks the enforcer processes of one runtime.
type processEnforcers struct {
	dir     string // root of the per-sandbox directories
	network string
	agent   string // the agent binary's copy under dir, linked into every chroot
	// agentBytes is the agent binary, for writing its copy again.
	agentBytes []byte
	cgroups    enforcerCgroups
	// ownNetns is the gateway's network namespace (stat of its nsfs file), which no
	// enforcer is ever started in.
	ownNetns unix.Stat_t
	// ownerPID is the main process of a running container (for a restart's namespace).
	ownerPID func(containerID string) (int, error)
	log      *slog.Logger
	// restarts counts the enforcers this runtime started again after they exited.
	restarts atomic.Uint64

	mu      sync.Mutex
	started map[string]*enforcerProcess // the ones this runtime watches and restarts
	closed  bool
}

// enforcerProcess is an enforcer this runtime watches: one it started, or one another
// runtime on the host started (adopt).
type enforcerProcess struct {
	id    string
	dir   string
	netns *os.File // the sandbox's network namespace, held for restarts (nil: not yet opened)
	owner string
	args  []string
	env   []string
	token string
	uid   int

	stop    chan struct{} // closed when removed: no restart
	stopped sync.Once
	exited  chan struct{} // closed when the current process has exited
	mu      sync.Mutex
	pid     int
}

// newProcessEnforcers prepares dir (root's, 0700) and the agent binary's copy in it.
func newProcessEnforcers(dir, network, agentBinary string, cgroups enforcerCgroups, log *slog.Logger) (*processEnforcers, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("enforcer directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("enforcer directory: %w", err)
	}
	bin, err := os.ReadFile(agentBinary)
	if err != nil {
		return nil, fmt.Errorf("sandbox-agent binary %q: %w", agentBinary, err)
	}
	sum := sha256.Sum256(bin)
	e := &processEnforcers{dir: dir, network: network, cgroups: cgroups, log: log, started: map[string]*enforcerProcess{},
		agent: filepath.Join(dir, agentCopyPrefix+hex.EncodeToString(sum[:8]))}
	e.agentBytes = bin
	if err := e.copyAgent(); err != nil {
		return nil, err
	}
	e.removeOldAgentCopies()
	if err := unix.Stat("/proc/thread-self/ns/net", &e.ownNetns); err != nil {
		return nil, fmt.Errorf("the gateway's network namespace: %w", err)
	}
	return e, nil
}

// agentCopyPrefix begins the name of each agent build's copy in the enforcers' directory.
const agentCopyPrefix = ".sandbox-agent-"

// copyAgent writes the agent binary's copy (root's, 0555) unless it is there.
func (e *processEnforcers) copyAgent() error {
	if _, err := os.Stat(e.agent); err == nil {
		return nil
	}
	tmp := e.agent + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, e.agentBytes, 0o555); err != nil {
		return fmt.Errorf("copy sandbox-agent for enforcers: %w", err)
	}
	if err := os.Chmod(tmp, 0o555); err != nil {
		return fmt.Errorf("copy sandbox-agent for enforcers: %w", err)
	}
	if err := os.Rename(tmp, e.agent); err != nil {
		return fmt.Errorf("copy sandbox-agent for enforcers: %w", err)
	}
	return nil
}

// removeOldAgentCopies removes the copies of other builds that no enforcer's root links
// (a link count of one) and that are more than an hour old: a gateway of that build that
// starts an enforcer after all writes its copy again (prepareDir).
func (e *processEnforcers) removeOldAgentCopies() {
	entries, err := os.ReadDir(e.dir)
	if err != nil {
		return
	}
	for _, ent := range entries {
		path := filepath.Join(e.dir, ent.Name())
		if !strings.HasPrefix(ent.Name(), agentCopyPrefix) || path == e.agent {
			continue
		}
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil && st.Nlink == 1 && time.Since(time.Unix(st.Mtim.Unix())) > time.Hour {
			_ = os.Remove(path)
		}
	}
}

// enforcerUID is the uid (and gid) of a sandbox's enforcer process: one of a hundred
// million above two billion, from the sandbox id, so that no two sandboxes' enforcers
// share it but by chance, and none shares a host user's.
func enforcerUID(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return 2_000_000_000 + int(h.Sum32()%100_000_000)
}

func (e *processEnforcers) sandboxDir(id string) string { return filepath.Join(e.dir, id) }

// start starts the enforcer of sandbox id in the network namespace of process pid,
// which must be a process of container containerID. args are those after "egress".
func (e *processEnforcers) start(id string, pid int, containerID, token string, args, env []string) error {
	if strings.ContainsAny(id, "/.") || id == "" {
		return fmt.Errorf("sandbox id %q cannot name an enforcer directory", id)
	}
	netns, err := openContainerNetns(pid, containerID, e.ownNetns)
	if err != nil {
		return err
	}
	p := &enforcerProcess{
		id: id, dir: e.sandboxDir(id), netns: netns, owner: containerID, args: args, env: env, token: token,
		uid: enforcerUID(id), stop: make(chan struct{}),
	}
	if err := e.prepareDir(p); err != nil {
		netns.Close()
		return err
	}
	if err := e.cgroups.make(id); err != nil {
		netns.Close()
		_ = os.RemoveAll(p.dir)
		return err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		netns.Close()
		return errors.New("the runtime is closed")
	}
	if old := e.started[id]; old != nil {
		old.halt()
	}
	e.started[id] = p
	e.mu.Unlock()
	err = withDirLock(p.dir, func() error { return e.launch(p) })
	if err != nil {
		e.remove(id)
		return err
	}
	go e.watch(p)
	return nil
}

// withDirLock runs f holding the lock of an enforcer's directory, which starts, restarts
// and removals of its process take, whichever runtime of the host does them.
func withDirLock(dir string, f func() error) error {
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("enforcer lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("enforcer lock: %w", err)
	}
	return f()
}

// adopt watches sandbox id's enforcer process, started by another runtime (a gateway
// before a restart, or another gateway on the host), so that this one starts it again
// when it exits; one already watched here is left as it is.
func (e *processEnforcers) adopt(id string, rec EnforcerRecord) {
	p := &enforcerProcess{
		id: id, dir: e.sandboxDir(id), owner: rec.Owner, args: rec.Args, env: rec.Env, token: rec.Token,
		uid: enforcerUID(id), stop: make(chan struct{}), pid: rec.PID, exited: watchExit(rec.PID, rec.Start),
	}
	e.mu.Lock()
	if e.closed || e.started[id] != nil {
		e.mu.Unlock()
		return
	}
	e.started[id] = p
	e.mu.Unlock()
	go e.watch(p)
}

// adoptAll adopts every enforcer process of this runtime's network (New).
func (e *processEnforcers) adoptAll() {
	for _, c := range e.sweepCandidates() {
		if c.rec != nil {
			e.adopt(c.id, *c.rec)
		}
	}
}

// watchExit returns a channel closed once process pid (started at start) has exited:
// at once when it is gone already. It waits on a pidfd through the runtime's poller, so
// that a hundred enforcers hold no thread of the gateway's.
func watchExit(pid int, start string) chan struct{} {
	exited := make(chan struct{})
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil || processStart(pid) != start {
		if err == nil {
			unix.Close(fd)
		}
		close(exited)
		return exited
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	conn, err := f.SyscallConn()
	if err != nil {
		f.Close()
		close(exited)
		return exited
	}
	go func() {
		defer close(exited)
		defer f.Close()
		// A pidfd is readable once its process has exited.
		_ = conn.Read(func(uintptr) bool {
			n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			return n > 0
		})
	}()
	return exited
}

// prepareDir makes <dir>/<id>: the chroot (root's, with the agent linked in and the
// enforcer's own state directory) and the log.
func (e *processEnforcers) prepareDir(p *enforcerProcess) error {
	root := filepath.Join(p.dir, "root")
	state := filepath.Join(root, strings.TrimPrefix(enforcerStateDir, "/"))
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return fmt.Errorf("enforcer directory: %w", err)
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return fmt.Errorf("enforcer directory: %w", err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return fmt.Errorf("enforcer directory: %w", err)
	}
	if err := os.Chown(state, p.uid, p.uid); err != nil {
		return fmt.Errorf("enforcer state directory: %w", err)
	}
	bin := filepath.Join(root, strings.TrimPrefix(enforcerBinary, "/"))
	if _, err := os.Lstat(bin); errors.Is(err, os.ErrNotExist) {
		err := os.Link(e.agent, bin)
		if errors.Is(err, os.ErrNotExist) {
			if err = e.copyAgent(); err == nil {
				err = os.Link(e.agent, bin)
			}
		}
		if err != nil {
			return fmt.Errorf("link sandbox-agent into the enforcer's root: %w", err)
		}
	}
	return nil
}

// launch starts p's process and records it.
func (e *processEnforcers) launch(p *enforcerProcess) error {
	if p.netns == nil {
		pid, err := e.ownerPID(p.owner)
		if err != nil {
			return err
		}
		if p.netns, err = openContainerNetns(pid, p.owner, e.ownNetns); err != nil {
			return err
		}
	}
	logFile, err := os.OpenFile(filepath.Join(p.dir, enforcerLogFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("enforcer log: %w", err)
	}
	defer logFile.Close()
	cmd := &exec.Cmd{
		Path:   enforcerBinary,
		Args:   append([]string{"sandbox-agent", "egress", "--max-file-bytes", strconv.Itoa(enforcerLogBytes)}, p.args...),
		Env:    p.env,
		Dir:    "/",
		Stdout: logFile,
		Stderr: logFile,
		SysProcAttr: &syscall.SysProcAttr{
			Chroot:      filepath.Join(p.dir, "root"),
			Credential:  &syscall.Credential{Uid: uint32(p.uid), Gid: uint32(p.uid), Groups: []uint32{}},
			AmbientCaps: []uintptr{unix.CAP_NET_ADMIN, unix.CAP_NET_BIND_SERVICE},
			Setsid:      true,
			Cloneflags:  syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		},
	}
	started := make(chan error, 1)
	go func() {
		// The thread enters the sandbox's namespace to start the process from there, then
		// goes back to its own; a thread that could not go back stays locked, and so ends
		// with this goroutine instead of serving others.
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			started <- fmt.Errorf("the gateway's network namespace: %w", err)
			return
		}
		defer own.Close()
		if err := unix.Setns(int(p.netns.Fd()), unix.CLONE_NEWNET); err != nil {
			started <- fmt.Errorf("enter the sandbox's network namespace: %w", err)
			runtime.UnlockOSThread()
			return
		}
		started <- cmd.Start()
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start the enforcer process: %w", err)
	}
	pid := cmd.Process.Pid
	fail := func(err error) error {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	if err := e.cgroups.add(p.id, pid); err != nil {
		return fail(err)
	}
	rec := enforcerRecord{PID: pid, Start: processStart(pid), Token: p.token, Network: e.network, Owner: p.owner, Args: p.args, Env: p.env}
	if err := writeEnforcerRecord(p.dir, rec); err != nil {
		return fail(err)
	}
	exited := watchExit(pid, rec.Start)
	p.mu.Lock()
	p.pid = pid
	p.exited = exited
	p.mu.Unlock()
	go func() {
		// Reaped once it has exited, without a thread blocked in the wait meanwhile.
		<-exited
		_ = cmd.Wait()
	}()
	return nil
}

// watch starts p again after each exit, until it is removed. Under the directory's lock
// the record says what to do: gone, the enforcer was removed; naming another live
// process, another runtime started it again (or restored it), and that one is watched.
func (e *processEnforcers) watch(p *enforcerProcess) {
	var delay time.Duration
	for {
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		ran := time.Now()
		select {
		case <-p.stop:
			return
		case <-exited:
		}
		if delay == 0 || time.Since(ran) >= enforcerSteadyRun {
			delay = enforcerRestartDelay
		} else {
			delay = min(2*delay, enforcerRestartDelayMax)
		}
		select {
		case <-p.stop:
			return
		case <-time.After(delay):
		}
		again := false
		err := withDirLock(p.dir, func() error {
			rec, err := readEnforcerRecord(p.dir)
			if err != nil {
				return err
			}
			p.mu.Lock()
			pid := p.pid
			p.mu.Unlock()
			if rec.PID != pid {
				if exited := watchExit(rec.PID, rec.Start); !isClosed(exited) {
					p.mu.Lock()
					p.pid, p.exited = rec.PID, exited
					p.mu.Unlock()
					return nil
				}
			}
			p.args, p.env, p.token, p.owner = rec.Args, rec.Env, rec.Token, rec.Owner
			again = true
			return e.launch(p)
		})
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				e.log.Error("egress enforcer process not started again", "id", p.id, "err", err)
			}
			e.forget(p)
			return
		}
		if again {
			e.restarts.Add(1)
			e.log.Warn("egress enforcer process exited; started it again", "id", p.id)
		}
	}
}

// forget stops watching p.
func (e *processEnforcers) forget(p *enforcerProcess) {
	p.halt()
	e.mu.Lock()
	if e.started[p.id] == p {
		delete(e.started, p.id)
	}
	e.mu.Unlock()
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// halt ends p's restarts and releases its namespace (the process, if any, is left).
func (p *enforcerProcess) halt() {
	p.stopped.Do(func() {
		close(p.stop)
		if p.netns != nil {
			p.netns.Close()
		}
	})
}

// exitedNow reports whether the process this runtime started for id has exited and is
// not being started again (waitEgressHealthy's early failure).
func (e *processEnforcers) exitedNow(id string) bool {
	e.mu.Lock()
	p := e.started[id]
	e.mu.Unlock()
	if p == nil {
		return !e.running(id)
	}
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	select {
	case <-exited:
		return true
	default:
		return false
	}
}

// running reports whether sandbox id's enforcer process runs (its record names a live
// process with the recorded start time).
func (e *processEnforcers) running(id string) bool {
	rec, err := readEnforcerRecord(e.sandboxDir(id))
	return err == nil && rec.PID > 0 && processStart(rec.PID) == rec.Start && !processZombie(rec.PID)
}

// runningOrRestarting reports whether sandbox id's enforcer process runs or this runtime
// is about to start it again from its record (the reconciler leaves it alone then).
func (e *processEnforcers) runningOrRestarting(id string) bool {
	rec, err := readEnforcerRecord(e.sandboxDir(id))
	if err != nil {
		return false
	}
	if rec.PID > 0 && processStart(rec.PID) == rec.Start && !processZombie(rec.PID) {
		return true
	}
	e.mu.Lock()
	p := e.started[id]
	e.mu.Unlock()
	return p != nil && !isClosed(p.stop)
}

// token returns the token sandbox id's enforcer was started with ("" without a record).
func (e *processEnforcers) token(id string) string {
	rec, err := readEnforcerRecord(e.sandboxDir(id))
	if err != nil {
		return ""
	}
	return rec.Token
}

// remove kills sandbox id's enforcer process, whichever runtime started it, waits until
// it is gone and removes its directory and cgroup. It reports whether there was one.
func (e *processEnforcers) remove(id string) bool {
	if strings.ContainsAny(id, "/.") || id == "" {
		return false
	}
	e.mu.Lock()
	p := e.started[id]
	delete(e.started, id)
	e.mu.Unlock()
	if p != nil {
		p.halt()
	}
	dir := e.sandboxDir(id)
	if _, err := os.Stat(dir); err != nil && p == nil {
		return false
	}
	var rec enforcerRecord
	// The record goes first: no runtime that watches the process starts it again.
	err := withDirLock(dir, func() error {
		var err error
		rec, err = readEnforcerRecord(dir)
		_ = os.Remove(filepath.Join(dir, enforcerRecordFile))
		return err
	})
	if err == nil {
		killProcess(rec.PID, rec.Start)
	}
	if p != nil {
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		if exited != nil {
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
			}
		}
	}
	e.cgroups.remove(id)
	_ = os.RemoveAll(dir)
	return true
}

// sweepCandidates lists the sandboxes whose enforcer directory is on this runtime's
// network: read before the workloads are listed (SweepHelpers), since a directory is made
// after its workload, so that a create in flight is never taken for an orphan. A
// directory without a record is a start in flight or a removal half done, left to them
// unless it is older than a minute.
func (e *processEnforcers) sweepCandidates() []enforcerCandidate {
	entries, err := os.ReadDir(e.dir)
	if err != nil {
		return nil
	}
	var candidates []enforcerCandidate
	for _, ent := range entries {
		id := ent.Name()
		if !ent.IsDir() || strings.HasPrefix(id, ".") {
			continue
		}
		rec, err := readEnforcerRecord(e.sandboxDir(id))
		if err != nil {
			if info, serr := ent.Info(); serr != nil || time.Since(info.ModTime()) < time.Minute {
				continue
			}
			candidates = append(candidates, enforcerCandidate{id: id})
			continue
		}
		if rec.Network != e.network {
			continue
		}
		candidates = append(candidates, enforcerCandidate{id: id, rec: &rec})
	}
	return candidates
}

// enforcerCandidate is a directory sweepCandidates listed, with its record as read then
// (nil: none, the directory older than a minute).
type enforcerCandidate struct {
	id  string
	rec *enforcerRecord
}

// sweep removes the enforcers of candidates (sweepCandidates) whose sandbox has no
// workload (live: the ids that have one, listed after the candidates were read), and
// adopts those of live sandboxes that no runtime here watches yet: started by another
// gateway of the network after this one started, they are started again by this one
// too, with their state, should that gateway be gone when they exit. It rotates the
// live ones' logs (enforcerlog.go).
func (e *processEnforcers) sweep(candidates []enforcerCandidate, live map[string]bool) int {
	removed := 0
	for _, c := range candidates {
		id := c.id
		if live[id] {
			dir := e.sandboxDir(id)
			if c.rec != nil {
				e.adopt(id, *c.rec)
			}
			if err := withDirLock(dir, func() error {
				_, err := rotateEnforcerLog(dir, enforcerLogRotateBytes)
				return err
			}); err != nil && !errors.Is(err, os.ErrNotExist) {
				e.log.Warn("rotate an enforcer process's log", "id", id, "err", err)
			}
			continue
		}
		e.log.Info("removed an egress enforcer process whose sandbox is gone", "id", id)
		e.remove(id)
		removed++
	}
	return removed
}

// close stops restarting this runtime's enforcers; the processes keep running (the
// next runtime finds them by their records).
func (e *processEnforcers) close() {
	e.mu.Lock()
	e.closed = true
	started := e.started
	e.started = map[string]*enforcerProcess{}
	e.mu.Unlock()
	for _, p := range started {
		p.halt()
	}
}

func writeEnforcerRecord(dir string, rec enforcerRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, enforcerRecordFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("enforcer record: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, enforcerRecordFile)); err != nil {
		return fmt.Errorf("enforcer record: %w", err)
	}
	return nil
}

func readEnforcerRecord(dir string) (enforcerRecord, error) {
	var rec enforcerRecord
	b, err := os.ReadFile(filepath.Join(dir, enforcerRecordFile))
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, err
	}
	return rec, nil
}

// processZombie reports whether pid has exited and waits to be reaped.
func processZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

// killProcess kills pid if it is still the process that started at start (a pidfd pins
// it, so a reused pid is never signalled) and waits up to ten seconds for its exit.
func killProcess(pid int, start string) {
	if pid <= 0 {
		return
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if processStart(pid) != start {
		return
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		return
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, err := unix.Poll(fds, 100)
		if n > 0 || (err != nil && err != unix.EINTR) {
			return
		}
	}
}

// openContainerNetns opens the network namespace of process pid, which must belong to
// container containerID (its cgroup names the container) before and after the open,
// and must not be the gateway's own namespace.
func openContainerNetns(pid int, containerID string, own unix.Stat_t) (*os.File, error) {
	if pid <= 0 || containerID == "" {
		return nil, errors.New("the sandbox's container has no running process")
	}
	start := processStart(pid)
	if start == "" || !processInContainer(pid, containerID) {
		return nil, errors.New("the sandbox's container process is gone")
	}
	ns, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return nil, fmt.Errorf("open the sandbox's network namespace: %w", err)
	}
	if processStart(pid) != start || !processInContainer(pid, containerID) {
		ns.Close()
		return nil, errors.New("the sandbox's container process is gone")
	}
	var nsStat unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &nsStat); err != nil {
		ns.Close()
		return nil, fmt.Errorf("the sandbox's network namespace: %w", err)
	}
	if nsStat.Ino == own.Ino && nsStat.Dev == own.Dev {
		ns.Close()
		return nil, errors.New("the sandbox's container shares the gateway's network namespace")
	}
	return ns, nil
}

// processInContainer reports whether pid's cgroups name container containerID (the
// engine's cgroupfs and systemd drivers both put the id in the path).
func processInContainer(pid int, containerID string) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	return err == nil && strings.Contains(string(b), containerID)
}

// chooseEnforcer starts the runtime's process enforcers when Options.Enforcer asks for
// them or, on auto, when this host can run them (engineHost: the engine's address).
func (r *Runtime) chooseEnforcer(engineHost string) error {
	mode := r.opts.Enforcer
	if mode == "" {
		mode = EnforcerAuto
	}
	switch mode {
	case EnforcerAuto, EnforcerProcess:
	case EnforcerContainer:
		return nil
	default:
		return fmt.Errorf("enforcer %q: want %s, %s or %s", mode, EnforcerAuto, EnforcerProcess, EnforcerContainer)
	}
	if r.opts.NoEgress {
		return nil
	}
	why := ""
	switch {
	case os.Geteuid() != 0:
		why = "the gateway does not run as root"
	case !strings.HasPrefix(engineHost, "unix://"):
		why = "the engine is not on the gateway's host"
	case strings.HasPrefix(r.opts.OCIRuntime, "runsc"):
		why = "sandboxes run under gVisor"
	default:
		if err := usableCgroupsV1(cgroupV1Root); err != nil {
			why = err.Error()
		}
	}
	var procs *processEnforcers
	if why == "" {
		dir := r.opts.EnforcerDir
		if dir == "" {
			dir = defaultEnforcerDir
		}
		var err error
		if procs, err = newProcessEnforcers(dir, r.opts.Network, r.opts.AgentBinary, enforcerCgroups{root: cgroupV1Root}, r.log); err != nil {
			why = err.Error()
		}
	}
	if why != "" {
		if mode == EnforcerProcess {
			return fmt.Errorf("egress enforcers as host processes (enforcer %s): %s", EnforcerProcess, why)
		}
		r.log.Info("egress enforcers run as sidecar containers", "why", why)
		return nil
	}
	procs.ownerPID = func(containerID string) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), egressCallTimeout)
		defer cancel()
		res, err := r.cli.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
		if err != nil {
			return 0, err
		}
		if res.Container.State == nil || !res.Container.State.Running {
			return 0, fmt.Errorf("container %s does not run", containerID)
		}
		return res.Container.State.Pid, nil
	}
	procs.adoptAll()
	r.procs = procs
	return nil
}

// EnforcerProcessRestarts implements runtimes.EnforcerRestartCounter: the enforcer
// processes this runtime started again after they exited (0 with sidecars, which their
// own loop restarts).
func (r *Runtime) EnforcerProcessRestarts() uint64 {
	if r.procs == nil {
		return 0
	}
	return r.procs.restarts.Load()
}

// EnforcerProcessOf returns the record of sandbox id's enforcer process under the
// default directory; ok is false when it has none (its enforcer is a sidecar, or gone).
func EnforcerProcessOf(id string) (rec EnforcerRecord, ok bool) {
	if strings.ContainsAny(id, "/.") || id == "" {
		return rec, false
	}
	rec, err := readEnforcerRecord(filepath.Join(defaultEnforcerDir, id))
	return rec, err == nil
}

// RemoveEnforcerProcesses kills every enforcer process under the default directory
// whose record names network and removes its directory and cgroups: a deployment's (or
// a test's) teardown when no gateway is left to delete its sandboxes. It returns how
// many it removed.
func RemoveEnforcerProcesses(network string) int {
	e := &processEnforcers{dir: defaultEnforcerDir, network: network, cgroups: enforcerCgroups{root: cgroupV1Root},
		log: slog.New(slog.DiscardHandler), started: map[string]*enforcerProcess{}}
	n := 0
	for _, c := range e.sweepCandidates() {
		if c.rec != nil {
			e.remove(c.id)
			n++
		}
	}
	return n
}
