package agent

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
	"github.com/sandgate/sandgate/sandbox-agent/jupyter"
	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

// jupyterWarmTimeout bounds a Jupyter start that a probe asked for, and
// jupyterWarmRetry is how long probes after a failed start start none (the SDKs probe
// every 200 ms; the code call itself reports why Jupyter does not start).
const (
	jupyterWarmTimeout = 2 * time.Minute
	jupyterWarmRetry   = 30 * time.Second
)

// jupyterProbe answers OpenSandbox's code-interpreter readiness check. The SDKs call a
// sandbox's interpreter ready once a TCP connection to 127.0.0.1:${JUPYTER_PORT:-44771}
// opens from inside it, because OpenSandbox's image starts Jupyter there. The agent
// starts Jupyter itself, on a port of its own with a token the workload never sees, and
// only when code first runs, so that a sandbox that never runs code never pays for it.
// In a sandbox with Jupyter installed the agent therefore listens on that port itself
// (loopback only): every connection is closed at once, with nothing read or written,
// and starts Jupyter in the background if it is not running, so that the code calls
// that follow a probe find it warm. Nothing of Jupyter is reachable through it.
type jupyterProbe struct {
	ln      net.Listener
	warming atomic.Bool
	// failedAt is when the last start a probe asked for failed (UnixNano; 0: never).
	failedAt atomic.Int64
	wg       sync.WaitGroup
}

// startJupyterProbe listens on the probe port when the sandbox has Jupyter. A port the
// workload holds already (its own Jupyter) is left to it.
func (s *Server) startJupyterProbe() {
	env := s.env.Build(nil)
	if !jupyter.Installed(env) {
		return
	}
	port := agentproto.JupyterProbePort
	if v, ok := procs.Lookup(env, agentproto.EnvJupyterPort); ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 && n < 65536 && n != agentproto.AgentPort {
			port = n
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		s.logger.Printf("sandbox-agent: no code interpreter readiness port: %v", err)
		return
	}
	p := &jupyterProbe{ln: ln}
	s.jupyterProbe = p
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			conn.Close()
			s.warmJupyter(p)
		}
	}()
}

// warmJupyter starts Jupyter in the background unless a start is under way already.
func (s *Server) warmJupyter(p *jupyterProbe) {
	if time.Since(time.Unix(0, p.failedAt.Load())) < jupyterWarmRetry {
		return
	}
	if !p.warming.CompareAndSwap(false, true) {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.warming.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), jupyterWarmTimeout)
		defer cancel()
		if _, err := s.code.jupyterServer(ctx); err != nil {
			p.failedAt.Store(time.Now().UnixNano())
			s.logger.Printf("sandbox-agent: start Jupyter for a readiness probe: %v", err)
		}
	}()
}

// closeJupyterProbe stops listening and waits for a start in progress.
func (s *Server) closeJupyterProbe() {
	if p := s.jupyterProbe; p != nil {
		p.ln.Close()
		p.wg.Wait()
	}
}
