package testenv

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Sandgate is one running `sandgate run` process.
type Sandgate struct {
	Addr string
	cmd  *exec.Cmd
	logs *SyncBuffer
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
	s := &Sandgate{Addr: fmt.Sprintf("127.0.0.1:%d", port), logs: &SyncBuffer{}, done: make(chan struct{})}
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
