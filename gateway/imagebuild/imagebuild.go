// Package imagebuild builds the images a gateway was told to build once it serves
// (`image_builds`), one build at a time in the background, and reports their progress:
// `make run` starts the gateway as soon as the default image exists and lets the large
// ones (the code interpreter, the E2B templates) follow, so a newcomer need not wait for
// them. While a build of an image waits or runs, the core refuses a create naming it
// with SANDBOX::IMAGE_BUILDING (retryable) instead of a missing image; GET /v1/images
// and the console show each build's state and its latest line of output.
//
// A build is an operator's command (run with /bin/sh -c in the gateway's working
// directory, in a process group of its own that Stop ends) and the images it makes. It
// is skipped when the engine already has all of them; a build that exits non-zero, or
// leaves one of its images missing, is Failed with the last lines of its output.
package imagebuild

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/gateway/internal/spawn"
)

// Build is one command and the images it makes.
type Build struct {
	Images  []string
	Command string
}

// ParseBuilds reads `image_builds` entries: `image[+image…]=command`.
func ParseBuilds(entries []string) ([]Build, error) {
	var out []Build
	seen := map[string]bool{}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		names, command, ok := strings.Cut(e, "=")
		command = strings.TrimSpace(command)
		if !ok || command == "" {
			return nil, fmt.Errorf("image build %q: want image[+image…]=command", e)
		}
		var images []string
		for _, n := range strings.Split(names, "+") {
			n = strings.TrimSpace(n)
			if n == "" || strings.ContainsAny(n, " \t") {
				return nil, fmt.Errorf("image build %q: %q is not an image name", e, n)
			}
			if seen[n] {
				return nil, fmt.Errorf("image build %q: image %s is built by another entry too", e, n)
			}
			seen[n] = true
			images = append(images, n)
		}
		out = append(out, Build{Images: images, Command: command})
	}
	return out, nil
}

// The states of a build.
const (
	StateWaiting  = "Waiting"  // behind another build
	StateBuilding = "Building" // its command runs
	StateReady    = "Ready"    // the engine has every image it makes
	StateFailed   = "Failed"   // see Message
)

// Status is what a caller sees of one build.
type Status struct {
	Images     []string   `json:"images"`
	State      string     `json:"state"`
	Step       string     `json:"step,omitempty"` // the command's latest line of output
	Message    string     `json:"message,omitempty"`
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
}

// HasImage reports whether the engine has an image.
type HasImage func(ctx context.Context, image string) (bool, error)

// maxStep bounds a step line; failTail is how many last lines a failure keeps.
const (
	maxStep  = 200
	failTail = 5
)

// Manager runs the builds and answers for their state. It is safe for concurrent use.
type Manager struct {
	has HasImage
	log *slog.Logger

	mu     sync.Mutex
	builds []*Status
	cmds   []string
	cmd    *exec.Cmd // the command running now

	// group runs the builds' goroutine; its Done tells a build to end.
	group spawn.Group
}

// New returns a Manager of builds; nothing runs before Start.
func New(builds []Build, has HasImage, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{has: has, log: log}
	for _, b := range builds {
		m.builds = append(m.builds, &Status{Images: append([]string(nil), b.Images...), State: StateWaiting})
		m.cmds = append(m.cmds, b.Command)
	}
	return m
}

// stoppedBeforeRun is the message of a build the gateway stopped before it ran.
const stoppedBeforeRun = "the gateway stopped before this build ran"

// Start runs the builds, one after the other, in the background.
func (m *Manager) Start() {
	started := m.group.Go(func() {
		for i := range m.builds {
			select {
			case <-m.group.Done():
				m.finishAll(stoppedBeforeRun)
				return
			default:
			}
			m.run(i)
		}
	})
	if !started {
		m.finishAll(stoppedBeforeRun)
	}
}

// Stop ends the running command (its whole process group) and waits for the builds'
// goroutine, killing the command when it outlives 10 s; builds not yet run are Failed.
func (m *Manager) Stop() {
	if m.group.Close() {
		m.signalRunning(syscall.SIGTERM)
	}
	waited := make(chan struct{})
	go func() {
		m.group.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		m.signalRunning(syscall.SIGKILL)
		<-waited
	}
}

// signalRunning sends sig to the process group of the command running now, if any.
func (m *Manager) signalRunning(sig syscall.Signal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil && m.cmd.Process != nil {
		_ = syscall.Kill(-m.cmd.Process.Pid, sig)
	}
}

func (m *Manager) finishAll(msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now().UTC()
	for _, b := range m.builds {
		if b.State == StateWaiting || b.State == StateBuilding {
			b.State, b.Message, b.FinishedAt = StateFailed, msg, &now
		}
	}
}

// missing returns the images of build i the engine lacks.
func (m *Manager) missing(ctx context.Context, i int) ([]string, error) {
	var out []string
	for _, img := range m.builds[i].Images {
		ok, err := m.has(ctx, img)
		if err != nil {
			return nil, err
		}
		if !ok {
			out = append(out, img)
		}
	}
	return out, nil
}

func (m *Manager) run(i int) {
	ctx := context.Background()
	st := m.builds[i]
	missing, err := m.missing(ctx, i)
	if err == nil && len(missing) == 0 {
		now := time.Now().UTC()
		m.mu.Lock()
		st.State, st.FinishedAt = StateReady, &now
		m.mu.Unlock()
		return
	}
	started := time.Now().UTC()
	cmd := exec.Command("/bin/sh", "-c", m.cmds[i])
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A child the command left in the background may hold its output open: the build
	// is over when the command is.
	cmd.WaitDelay = 5 * time.Second
	out, werr := io.Pipe()
	cmd.Stdout, cmd.Stderr = werr, werr
	m.mu.Lock()
	st.State, st.StartedAt = StateBuilding, &started
	m.mu.Unlock()
	m.log.Info("building images", "images", st.Images)

	var tail []string
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			if len(line) > maxStep {
				line = line[:maxStep] + "…"
			}
			m.mu.Lock()
			st.Step = line
			tail = append(tail, line)
			if len(tail) > failTail {
				tail = tail[1:]
			}
			m.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	err = cmd.Start()
	if err == nil {
		m.mu.Lock()
		m.cmd = cmd
		m.mu.Unlock()
		select {
		case <-m.group.Done(): // Stop came before m.cmd was set: it killed nothing
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		default:
		}
		err = cmd.Wait()
	}
	_ = werr.Close()
	<-lines
	if err == nil {
		if missing, merr := m.missing(ctx, i); merr != nil {
			err = merr
		} else if len(missing) > 0 {
			err = fmt.Errorf("the build ended without %s", strings.Join(missing, ", "))
		}
	}
	now := time.Now().UTC()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cmd = nil
	st.FinishedAt = &now
	if err != nil {
		st.State = StateFailed
		st.Message = err.Error()
		if len(tail) > 0 {
			st.Message += ": " + strings.Join(tail, " | ")
		}
		m.log.Warn("image build failed", "images", st.Images, "err", err)
		return
	}
	st.State = StateReady
	m.log.Info("images built", "images", st.Images, "took", now.Sub(started).Round(time.Second))
}

// Pending reports the build of image when it is still waiting or running: a create
// naming that image must wait for it.
func (m *Manager) Pending(image string) (Status, bool) {
	if m == nil {
		return Status{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range m.builds {
		for _, img := range b.Images {
			if img == image && (b.State == StateWaiting || b.State == StateBuilding) {
				return copyStatus(b), true
			}
		}
	}
	return Status{}, false
}

// List returns every build's status, in the order they run.
func (m *Manager) List() []Status {
	if m == nil {
		return []Status{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Status, 0, len(m.builds))
	for _, b := range m.builds {
		out = append(out, copyStatus(b))
	}
	return out
}

func copyStatus(b *Status) Status {
	c := *b
	c.Images = append([]string(nil), b.Images...)
	return c
}
