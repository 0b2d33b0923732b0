package agent_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/agent"
)

// BenchmarkCommandTrue is the round trip of POST /command running `true` (which the
// agent execs without the shell: directexec.go), of `\true` (the same command, which
// the agent leaves to bash), next to starting `bash -c true` and `true` directly.
func BenchmarkCommandTrue(b *testing.B) {
	for _, c := range []struct{ name, command string }{{"agent", "true"}, {"agent-shell", `\true`}} {
		b.Run(c.name, func(b *testing.B) {
			a := newTestAgent(b, agent.Config{})
			defer reportCPU(b)()
			body, _ := json.Marshal(map[string]any{"command": c.command})
			hdr := http.Header{"Content-Type": {"application/json"}}
			// The client reads the answer whole, as the e2e benchmark does (runStream's
			// parser and 1 MiB buffer would weigh more than the agent).
			for i := 0; i < b.N; i++ {
				resp := a.request(http.MethodPost, "/command", bytes.NewReader(body), hdr)
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if !bytes.Contains(data, []byte(`"type":"execution_complete"`)) {
					b.Fatalf("answer %s", data)
				}
			}
		})
	}
	b.Run("raw", func(b *testing.B) {
		defer reportCPU(b)()
		for i := 0; i < b.N; i++ {
			if err := exec.Command("bash", "-c", "true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw-exec", func(b *testing.B) {
		defer reportCPU(b)()
		for i := 0; i < b.N; i++ {
			if err := exec.Command("true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// reportCPU reports the CPU time per operation of this process and its children (the
// agent, the client and the commands, whose sum a loaded machine's scheduling does not
// inflate as much as it does the wall time), from now until the returned function runs.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var self, children syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
		return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
	}
	start := cpu()
	return func() {
		b.ReportMetric(float64((cpu()-start).Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

// outputCommand prints 64 MiB in 65536 lines of 1 KiB.
const (
	outputBytes   = 64 << 20
	outputCommand = "seq -f '%01023.0f' 1 65536"
)

// BenchmarkStdoutStream measures command output delivered as stdout events, next to
// the same command's output read from a plain pipe.
func BenchmarkStdoutStream(b *testing.B) {
	b.Run("agent", func(b *testing.B) {
		a := newTestAgent(b, agent.Config{})
		b.SetBytes(outputBytes)
		for i := 0; i < b.N; i++ {
			stream := a.openStream("/command", map[string]any{"command": outputCommand})
			// Count output events without decoding them: this measures the agent's
			// delivery, not the client's JSON parser (TestCommandLargeOutput checks
			// the content).
			lines := 0
			prefix := []byte(`{"type":"stdout","text":"`)
			for {
				line, err := stream.br.ReadSlice('\n')
				if bytes.HasPrefix(line, prefix) {
					lines++
				}
				if err != nil {
					break
				}
			}
			if lines != 65536 {
				b.Fatalf("got %d output events, want 65536", lines)
			}
		}
	})
	b.Run("raw", func(b *testing.B) {
		b.SetBytes(outputBytes)
		for i := 0; i < b.N; i++ {
			cmd := exec.Command("sh", "-c", outputCommand)
			pipe, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, pipe)
			_ = cmd.Wait()
			if n != outputBytes {
				b.Fatalf("got %d bytes", n)
			}
		}
	})
}

const transferBytes = 64 << 20

// zeroReader yields n zero bytes without allocating them.
type zeroReader struct{ n int64 }

func (z *zeroReader) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > z.n {
		p = p[:z.n]
	}
	clear(p)
	z.n -= int64(len(p))
	return len(p), nil
}

// BenchmarkFileTransfer measures upload and download through the agent next to a raw
// loopback TCP copy of the same size.
func BenchmarkFileTransfer(b *testing.B) {
	b.Run("upload", func(b *testing.B) {
		a := newTestAgent(b, agent.Config{})
		dst := filepath.Join(b.TempDir(), "up.bin")
		b.SetBytes(transferBytes)
		for i := 0; i < b.N; i++ {
			status, body := upload(b, a, []uploadPart{{map[string]any{"path": dst}, &zeroReader{transferBytes}}})
			if status != 200 {
				b.Fatalf("upload: %d %s", status, body)
			}
		}
	})
	b.Run("download", func(b *testing.B) {
		a := newTestAgent(b, agent.Config{})
		src := filepath.Join(b.TempDir(), "down.bin")
		f, _ := os.Create(src)
		_, _ = io.Copy(f, &zeroReader{transferBytes})
		f.Close()
		b.SetBytes(transferBytes)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			resp := a.request(http.MethodGet, "/files/download"+q("path", src), nil, nil)
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if n != transferBytes {
				b.Fatalf("got %d bytes", n)
			}
		}
	})
	b.Run("raw loopback", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
			}
		}()
		b.SetBytes(transferBytes)
		for i := 0; i < b.N; i++ {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(c, &zeroReader{transferBytes}); err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
}

// BenchmarkSessionRun is one run in a warm persistent shell.
func BenchmarkSessionRun(b *testing.B) {
	a := newTestAgent(b, agent.Config{})
	id := createSession(b, a, nil)
	for i := 0; i < b.N; i++ {
		events := a.runStream("/session/"+id+"/run", map[string]any{"command": fmt.Sprintf("echo %d", i)})
		if out := texts(events, agent.EventStdout); len(out) != 1 || strings.TrimSpace(out[0]) != fmt.Sprint(i) {
			b.Fatalf("events %+v", events)
		}
	}
}
