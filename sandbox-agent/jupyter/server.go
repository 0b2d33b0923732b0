// Package jupyter bridges the agent's code interpreter to Jupyter: it starts a local
// Jupyter Server on demand (loopback only, random token), starts kernels through its REST
// API and runs code over the kernel WebSocket using Jupyter's messaging protocol
// (execute_request on the shell channel; stream, execute_result, display_data, error and
// status on iopub).
package jupyter

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

// ErrUnavailable means the image has no usable Jupyter (jupyter-server and ipykernel).
var ErrUnavailable = errors.New("jupyter: jupyter-server and ipykernel are not installed in this sandbox")

// ErrNoKernel means Jupyter runs but has no kernel for the language asked for.
var ErrNoKernel = errors.New("jupyter: no kernel for that language")

// NoKernelError is a language no installed kernel speaks, with the languages that are.
type NoKernelError struct {
	Language  string
	Languages []string // sorted
}

func (e *NoKernelError) Error() string {
	return fmt.Sprintf("no Jupyter kernel for language %q in this sandbox; its kernels speak: %s", e.Language, strings.Join(e.Languages, ", "))
}

func (e *NoKernelError) Unwrap() error { return ErrNoKernel }

// Python returns the Python interpreter that has jupyter_server and ipykernel, or
// ErrUnavailable.
func Python(env []string) (string, error) {
	for _, name := range []string{"python3", "python"} {
		p, err := lookPath(name, env)
		if err != nil {
			continue
		}
		cmd := exec.Command(p, "-c", "import jupyter_server, ipykernel")
		cmd.Env = env
		if procs.Start(cmd) != nil {
			continue
		}
		if procs.Wait(cmd) == nil {
			return p, nil
		}
	}
	return "", ErrUnavailable
}

// Installed reports, without starting anything, whether the sandbox looks like it has
// Jupyter: a jupyter-server program on the PATH of env. Python tells for sure, at the
// cost of starting an interpreter.
func Installed(env []string) bool {
	_, err := lookPath("jupyter-server", env)
	return err == nil
}

// lookPath resolves name against the PATH of env (the sandbox's, not the agent's).
func lookPath(name string, env []string) (string, error) {
	path, _ := procs.Lookup(env, "PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	for _, dir := range strings.Split(path, ":") {
		if dir == "" {
			continue
		}
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// Server is a running Jupyter Server.
type Server struct {
	cmd     *exec.Cmd
	base    string // http://127.0.0.1:port
	token   string
	client  *http.Client
	done    chan struct{}
	logFile *os.File

	mu        sync.Mutex
	specs     map[string]string // language → kernel name
	languages []string          // the kernels' languages, as listed
}

// Start launches a Jupyter Server with python on a free loopback port and waits until
// its API answers. Its log goes to logPath.
func Start(ctx context.Context, python string, env []string, logPath string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("jupyter: pick a port: %w", err)
	}
	tokenBytes := make([]byte, 24)
	_, _ = rand.Read(tokenBytes)
	token := hex.EncodeToString(tokenBytes)
	args := []string{"-m", "jupyter_server",
		"--ServerApp.ip=127.0.0.1",
		"--ServerApp.port=" + strconv.Itoa(port),
		"--ServerApp.port_retries=0",
		"--ServerApp.open_browser=False",
		"--ServerApp.allow_root=True",
		"--ServerApp.root_dir=/",
		"--ServerApp.disable_check_xsrf=True",
		"--no-browser",
	}
	cmd := exec.Command(python, args...)
	// The token travels in the environment, not on the command line.
	// Kernels inherit this environment: figures must render inline (as PNG results),
	// whatever non-interactive backend the image sets for plain scripts.
	cmd.Env = append(append([]string{}, env...), "JUPYTER_TOKEN="+token,
		"MPLBACKEND=module://matplotlib_inline.backend_inline", "PYTHONUNBUFFERED=1")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("jupyter: open log: %w", err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := procs.Start(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("jupyter: start server: %w", err)
	}
	s := &Server{
		cmd: cmd, base: "http://127.0.0.1:" + strconv.Itoa(port), token: token,
		client:  &http.Client{Transport: &http.Transport{Proxy: nil}},
		done:    make(chan struct{}),
		logFile: logFile,
	}
	go func() {
		_ = procs.Wait(cmd)
		logFile.Close()
		close(s.done)
	}()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var status struct{}
		if err := s.do(ctx, http.MethodGet, "/api/status", nil, &status); err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("jupyter: server exited during startup (see %s)", logPath)
		case <-ctx.Done():
			s.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("jupyter: server did not answer within 90s (see %s)", logPath)
		}
	}
}

// Close stops the server and its kernels.
func (s *Server) Close() {
	_ = procs.KillGroup(s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(3 * time.Second):
		_ = procs.KillGroup(s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
	// Kernels run in the server's process group; make sure none is left.
	_ = procs.KillGroup(s.cmd.Process.Pid, syscall.SIGKILL)
}

// Alive reports whether the server process still runs.
func (s *Server) Alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

func (s *Server) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "token "+s.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("jupyter: %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(msg)))
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// KernelName returns the kernel spec for a language ("python" → "python3"), or
// a *NoKernelError when no installed kernel speaks it.
func (s *Server) KernelName(ctx context.Context, language string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.specs == nil {
		s.languages = nil
		var resp struct {
			Default     string `json:"default"`
			Kernelspecs map[string]struct {
				Name string `json:"name"`
				Spec struct {
					Language string `json:"language"`
				} `json:"spec"`
			} `json:"kernelspecs"`
		}
		if err := s.do(ctx, http.MethodGet, "/api/kernelspecs", nil, &resp); err != nil {
			return "", err
		}
		s.specs = map[string]string{}
		for name, ks := range resp.Kernelspecs {
			lang := strings.ToLower(ks.Spec.Language)
			if _, ok := s.specs[lang]; !ok {
				s.languages = append(s.languages, lang)
			}
			if cur, ok := s.specs[lang]; !ok || name == resp.Default || cur > name {
				s.specs[lang] = name
			}
			s.specs[strings.ToLower(name)] = name
		}
	}
	if name, ok := s.specs[strings.ToLower(language)]; ok {
		return name, nil
	}
	langs := slices.Clone(s.languages)
	slices.Sort(langs)
	return "", &NoKernelError{Language: language, Languages: slices.Compact(langs)}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
