// Package inprocess is a runtimes.Runtime whose sandboxes live inside the calling
// process, for tests of the core that must not need Docker: each sandbox is the real
// agent API (sandbox-agent/agent) listening on a loopback address of its own
// (127.x.y.z, port runtimes.AgentPort, as a container's address would be), and its
// entrypoint, when it has one, is a real child process that Pause stops (SIGSTOP) and
// Resume continues. There is no isolation and no egress enforcer (it does not
// implement EnforcesEgress, so the core creates its sandboxes without one): it runs the
// lifecycle, not the workload's containment, and is never wired into the binary.
package inprocess

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agent"
	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

// Runtime holds in-process sandboxes. It is safe for concurrent use.
type Runtime struct {
	mu        sync.Mutex
	sandboxes map[string]*sandbox
	closed    bool
}

// sandbox is one in-process sandbox.
type sandbox struct {
	inst   runtimes.Instance
	dir    string
	api    *agent.Server
	srv    *http.Server
	served chan struct{}

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    *tailBuffer
	paused bool
}

// New returns an empty runtime.
func New() *Runtime { return &Runtime{sandboxes: map[string]*sandbox{}} }

// Name implements runtimes.Runtime.
func (r *Runtime) Name() string { return "inprocess" }

// Create implements runtimes.Runtime: it starts the sandbox's agent on a fresh loopback
// address and, when the spec has one, its entrypoint.
func (r *Runtime) Create(ctx context.Context, spec runtimes.Spec) (runtimes.Instance, error) {
	if spec.Egress != nil {
		return runtimes.Instance{}, errors.New("inprocess: no egress enforcer (the runtime does not enforce egress)")
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return runtimes.Instance{}, runtimes.ErrUnavailable
	}
	if _, dup := r.sandboxes[spec.ID]; dup {
		r.mu.Unlock()
		return runtimes.Instance{}, fmt.Errorf("inprocess: sandbox %s exists", spec.ID)
	}
	r.mu.Unlock()

	ln, addr, err := listenLoopback()
	if err != nil {
		return runtimes.Instance{}, err
	}
	dir, err := os.MkdirTemp("", "sandgate-inprocess-")
	if err != nil {
		ln.Close()
		return runtimes.Instance{}, err
	}
	sb := &sandbox{dir: dir, out: &tailBuffer{max: 64 << 10}, served: make(chan struct{})}
	env := procs.NewEnvironment()
	env.Set(spec.Env)
	sb.api, err = agent.New(agent.Config{
		Token: spec.AgentToken, Env: env, StateDir: dir,
		StartEntrypoint: func(argv []string) error { return sb.start(argv, env) },
		Logger:          log.New(io.Discard, "", 0),
	})
	if err != nil {
		ln.Close()
		os.RemoveAll(dir)
		return runtimes.Instance{}, err
	}
	sb.srv = &http.Server{Handler: sb.api, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(sb.served)
		_ = sb.srv.Serve(ln) // ends with ErrServerClosed when the sandbox is deleted
	}()

	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[runtimes.LabelID] = spec.ID
	labels[runtimes.LabelTenant] = spec.Tenant
	labels[runtimes.LabelCreatedAt] = spec.CreatedAt.UTC().Format(time.RFC3339Nano)
	if spec.Pool != "" {
		labels[runtimes.LabelPool] = spec.Pool
	}
	if spec.ExpiresAt != nil {
		labels[runtimes.LabelExpiresAt] = spec.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	sb.inst = runtimes.Instance{
		ID: spec.ID, Tenant: spec.Tenant, Pool: spec.Pool, Image: spec.Image,
		Entrypoint: slices.Clone(spec.Entrypoint), State: runtimes.StateRunning, Address: addr,
		AgentToken: spec.AgentToken, EgressToken: spec.EgressToken, Labels: labels,
		ExpiresAt: spec.ExpiresAt, CreatedAt: spec.CreatedAt, Complete: true,
	}
	if len(spec.Entrypoint) > 0 {
		if err := sb.start(spec.Entrypoint, env); err != nil {
			sb.remove()
			return runtimes.Instance{}, fmt.Errorf("inprocess: start entrypoint: %w", err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		sb.remove()
		return runtimes.Instance{}, runtimes.ErrUnavailable
	}
	r.sandboxes[spec.ID] = sb
	return sb.view(), nil
}

// listenLoopback binds runtimes.AgentPort on a random address of 127.0.0.0/8 (never
// 127.0.0.1), trying others while one is taken.
func listenLoopback() (net.Listener, string, error) {
	var last error
	for range 64 {
		addr := fmt.Sprintf("127.%d.%d.%d", 100+rand.IntN(100), rand.IntN(256), 2+rand.IntN(250))
		ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(runtimes.AgentPort)))
		if err == nil {
			return ln, addr, nil
		}
		last = err
	}
	return nil, "", fmt.Errorf("inprocess: no free loopback address: %w", last)
}

// start starts (or replaces) the sandbox's main process.
func (sb *sandbox) start(argv []string, env *procs.Environment) error {
	if len(argv) == 0 {
		return errors.New("empty entrypoint")
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.stopLocked()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = sb.dir
	cmd.Env = env.Build(nil)
	cmd.Stdout, cmd.Stderr = sb.out, sb.out
	// Its own process group, so that Pause and Delete reach its children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the exit status is read from cmd.ProcessState
		close(exited)
	}()
	sb.cmd, sb.exited, sb.paused = cmd, exited, false
	sb.inst.Entrypoint = slices.Clone(argv)
	return nil
}

// stopLocked kills the main process group and waits for it; sb.mu is held.
func (sb *sandbox) stopLocked() {
	if sb.cmd == nil {
		return
	}
	_ = syscall.Kill(-sb.cmd.Process.Pid, syscall.SIGKILL) // already gone is fine
	<-sb.exited
	sb.cmd = nil
}

// signal sends sig to the main process group.
func (sb *sandbox) signal(sig syscall.Signal) error {
	if sb.cmd == nil {
		return nil
	}
	if err := syscall.Kill(-sb.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// view is the sandbox's current Instance.
func (sb *sandbox) view() runtimes.Instance {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	inst := sb.inst
	inst.Labels = maps.Clone(sb.inst.Labels)
	switch {
	case sb.paused:
		inst.State = runtimes.StatePaused
	case sb.cmd != nil && isClosed(sb.exited):
		inst.State = runtimes.StateExited
		inst.ExitCode = sb.cmd.ProcessState.ExitCode()
		inst.Message = fmt.Sprintf("entrypoint exited with code %d", inst.ExitCode)
	}
	return inst
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// remove stops everything of the sandbox and deletes its directory.
func (sb *sandbox) remove() {
	sb.mu.Lock()
	if sb.paused {
		_ = sb.signal(syscall.SIGCONT) // a stopped group must run to die
	}
	sb.stopLocked()
	sb.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if sb.srv.Shutdown(ctx) != nil {
		_ = sb.srv.Close() // streams still open after a second are cut
	}
	<-sb.served
	sb.api.Close()
	_ = os.RemoveAll(sb.dir) // a temp dir; nothing else refers to it
}

func (r *Runtime) get(id string) (*sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[id]
	if !ok {
		return nil, runtimes.ErrNotFound
	}
	return sb, nil
}

// Inspect implements runtimes.Runtime.
func (r *Runtime) Inspect(_ context.Context, id string) (runtimes.Instance, error) {
	sb, err := r.get(id)
	if err != nil {
		return runtimes.Instance{}, err
	}
	return sb.view(), nil
}

// List implements runtimes.Runtime.
func (r *Runtime) List(context.Context) ([]runtimes.Instance, error) {
	r.mu.Lock()
	all := slices.Collect(maps.Values(r.sandboxes))
	r.mu.Unlock()
	out := make([]runtimes.Instance, 0, len(all))
	for _, sb := range all {
		out = append(out, sb.view())
	}
	slices.SortFunc(out, func(a, b runtimes.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Delete implements runtimes.Runtime.
func (r *Runtime) Delete(_ context.Context, id string) error {
	r.mu.Lock()
	sb, ok := r.sandboxes[id]
	delete(r.sandboxes, id)
	r.mu.Unlock()
	if ok {
		sb.remove()
	}
	return nil
}

// Pause implements runtimes.Runtime: the main process group is stopped. The agent API
// keeps answering (it lives in this process), unlike a frozen container's.
func (r *Runtime) Pause(_ context.Context, id string) error { return r.freeze(id, true) }

// Resume implements runtimes.Runtime.
func (r *Runtime) Resume(_ context.Context, id string) error { return r.freeze(id, false) }

// freeze stops (SIGSTOP) or continues (SIGCONT) the sandbox's main process group.
func (r *Runtime) freeze(id string, stop bool) error {
	sb, err := r.get(id)
	if err != nil {
		return err
	}
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.paused == stop {
		return fmt.Errorf("sandbox %s (paused %t): %w", id, sb.paused, runtimes.ErrWrongState)
	}
	if err := sb.signal(sig); err != nil {
		return err
	}
	sb.paused = stop
	return nil
}

// Logs implements runtimes.Runtime: the last lines of the entrypoint's output.
func (r *Runtime) Logs(_ context.Context, id string, lines int) (string, error) {
	sb, err := r.get(id)
	if err != nil {
		return "", err
	}
	all := strings.Split(strings.TrimRight(sb.out.String(), "\n"), "\n")
	if lines > 0 && len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n"), nil
}

// Close implements runtimes.Runtime: every sandbox is removed.
func (r *Runtime) Close() error {
	r.mu.Lock()
	r.closed = true
	all := r.sandboxes
	r.sandboxes = map[string]*sandbox{}
	r.mu.Unlock()
	for _, sb := range all {
		sb.remove()
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}

// Interface guard
var _ runtimes.Runtime = (*Runtime)(nil)
