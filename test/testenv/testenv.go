// Package testenv holds what the two end-to-end suites share — test/e2e (sandgate on
// Docker) and test/k8s (sandgate on Kubernetes): a private redis-server, the sandgate
// process, a client of its API and a few small helpers. Only tests import it.
package testenv

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RandomHex returns n random bytes in hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitFor polls cond every 50 ms and fails the test when it is not true within d.
func WaitFor(t testing.TB, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Tail returns the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Redis is a private redis-server on a loopback port, without persistence.
type Redis struct {
	Port int
	URL  string
	dir  string
	cmd  *exec.Cmd
}

// Pid is the redis-server's process id (0 when it is stopped).
func (r *Redis) Pid() int {
	if r.cmd == nil || r.cmd.Process == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

// StartRedis starts a redis-server that keeps its files in dir.
func StartRedis(dir string) (*Redis, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	r := &Redis{Port: port, URL: fmt.Sprintf("redis://127.0.0.1:%d/0", port), dir: dir}
	return r, r.Start()
}

// Start (re)starts the server on its port and waits until it listens.
func (r *Redis) Start() error {
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir)
	if err := r.cmd.Start(); err != nil {
		r.cmd = nil
		return fmt.Errorf("start redis-server (run `make deps`): %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", r.Port)); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			r.Stop()
			return fmt.Errorf("redis-server did not listen on port %d", r.Port)
		}
	}
}

// Stop kills the server; it can be started again.
func (r *Redis) Stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
	r.cmd = nil
}

// syncBuffer collects a process's output while tests read it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Sandgate is one running `sandgate run` process.
type Sandgate struct {
	Addr string
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

// StartSandgate runs bin (`sandgate run`) in dir with env added to this process's
// environment, listening on a free loopback port, and returns once /health answers. A
// process that exits or stays unhealthy for a minute is stopped and its logs returned in
// the error.
func StartSandgate(bin, dir string, env []string) (*Sandgate, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	s := &Sandgate{Addr: fmt.Sprintf("127.0.0.1:%d", port), logs: &syncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(bin, "run")
	s.cmd.Dir = dir
	s.cmd.Env = append(append(os.Environ(), "SANDGATE_LISTEN="+s.Addr), env...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sandgate: %w", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + s.Addr + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("sandgate exited during start:\n%s", s.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			s.Kill()
			return nil, fmt.Errorf("sandgate did not become healthy:\n%s", s.logs.String())
		}
	}
}

// Pid is the process id.
func (s *Sandgate) Pid() int { return s.cmd.Process.Pid }

// Logs returns what the process has written so far.
func (s *Sandgate) Logs() string { return s.logs.String() }

// Kill ends the process abruptly (SIGKILL), as a crash would.
func (s *Sandgate) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Stop ends the process gracefully (SIGTERM), killing it if it hangs for 15 s.
func (s *Sandgate) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		s.Kill()
	}
}

// Response is a decoded API answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as an object and fails the test when it is not one.
func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response %d is not a JSON object: %v: %s", r.Status, err, r.Body)
	}
	return m
}

// Do sends an API request to addr with apiKey. body may be nil, []byte, a string or any
// JSON value; headers are name, value pairs, and an empty value removes the header.
func Do(t testing.TB, client *http.Client, addr, apiKey, method, path string, body any, headers ...string) Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		js, _ := json.Marshal(b)
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, "http://"+addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("OPEN-SANDBOX-API-KEY", apiKey)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}
