package testenv

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"time"
)

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
