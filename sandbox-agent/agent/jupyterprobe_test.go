package agent_test

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/agent"
)

// freeLoopbackPort is a port nothing listens on at the moment.
func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// TestJupyterProbe: in a sandbox with Jupyter (a jupyter-server program on its PATH)
// the agent accepts connections on $JUPYTER_PORT, as the code-interpreter SDKs' readiness
// probe needs, and closes them at once with nothing said; without Jupyter, or once the
// agent is closed, nothing listens there.
func TestJupyterProbe(t *testing.T) {
	port := freeLoopbackPort(t)
	t.Setenv("JUPYTER_PORT", port)
	addr := net.JoinHostPort("127.0.0.1", port)
	dial := func() (net.Conn, error) { return net.DialTimeout("tcp", addr, 2*time.Second) }

	t.Run("without Jupyter", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		newTestAgent(t, agent.Config{JupyterProbe: true})
		if c, err := dial(); err == nil {
			c.Close()
			t.Fatal("something listens on the probe port in a sandbox without Jupyter")
		}
	})

	t.Run("with Jupyter", func(t *testing.T) {
		bin := t.TempDir()
		// Only its presence counts here; a probe's start of Jupyter then fails (no
		// Python with jupyter_server on this PATH), which is logged, not fatal.
		if err := os.WriteFile(filepath.Join(bin, "jupyter-server"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
		a := newTestAgent(t, agent.Config{JupyterProbe: true})
		for range 3 {
			c, err := dial()
			if err != nil {
				t.Fatalf("probe: %v", err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
				t.Fatalf("probe connection answered %q, %v; want it closed with nothing said", b, err)
			}
			c.Close()
		}
		a.api.Close()
		if c, err := dial(); err == nil {
			c.Close()
			t.Fatal("the probe port still listens after the agent closed")
		}
	})

	t.Run("not asked for", func(t *testing.T) {
		bin := t.TempDir()
		if err := os.WriteFile(filepath.Join(bin, "jupyter-server"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
		newTestAgent(t, agent.Config{})
		if c, err := dial(); err == nil {
			c.Close()
			t.Fatal("an agent not asked to probe listens on the probe port")
		}
	})
}
