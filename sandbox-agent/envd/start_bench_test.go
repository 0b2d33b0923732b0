package envd_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"
)

// BenchmarkProcessStartTrue is one `commands.run("true")` of the E2B SDKs as the agent
// serves it: envd's process.Start of `bash -l -c true` as `user`, the Connect stream read
// to its end, written on the wire as the SDKs write it. Beside it, the OpenSandbox
// door's POST /command `true` on the same agent. Both report the CPU time per call of
// this process and of the commands, which a loaded machine inflates less than the wall
// time.
func BenchmarkProcessStartTrue(b *testing.B) {
	s := newSandbox(b)
	agentURL := s.url[:len(s.url)-len("/envd")]
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", "true"}}})
	envdBody := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(envdBody[1:5], uint32(len(msg)))
	copy(envdBody[5:], msg)
	envdStart := func(b *testing.B) {
		req, _ := http.NewRequest("POST", s.url+"/process.Process/Start", bytes.NewReader(envdBody))
		req.Header.Set("Content-Type", "application/connect+json")
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set("Authorization", asUser("user"))
		resp, err := s.client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(data, []byte(`"end"`)) {
			b.Fatalf("%d %s", resp.StatusCode, data)
		}
	}
	commandBody := []byte(`{"command":"true"}`)
	command := func(b *testing.B) {
		req, _ := http.NewRequest("POST", agentURL+"/command", bytes.NewReader(commandBody))
		req.Header.Set("Content-Type", "application/json")
		resp, err := s.client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Contains(data, []byte(`execution_complete`)) {
			b.Fatalf("%d %s", resp.StatusCode, data)
		}
	}
	for _, c := range []struct {
		name string
		call func(*testing.B)
	}{{"envd-bash-l-c-true", envdStart}, {"opensandbox-command-true", command}} {
		b.Run(c.name, func(b *testing.B) {
			defer reportCPU(b)()
			for b.Loop() {
				c.call(b)
			}
		})
	}
	// The two alternating, so that both see the same machine: the median of each, and
	// the ratio.
	b.Run("alternating", func(b *testing.B) {
		var door, base []time.Duration
		for b.Loop() {
			t0 := time.Now()
			envdStart(b)
			door = append(door, time.Since(t0))
			t0 = time.Now()
			command(b)
			base = append(base, time.Since(t0))
		}
		d, o := median(door), median(base)
		b.ReportMetric(float64(d.Microseconds()), "envd-µs")
		b.ReportMetric(float64(o.Microseconds()), "command-µs")
		b.ReportMetric(float64(d)/float64(o), "ratio")
	})
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// reportCPU reports the CPU time per operation of this process (cpu-µs/op) and of its
// children, the commands (child-cpu-µs/op), from now until the returned function runs.
func reportCPU(b *testing.B) func() {
	cpu := func(who int) time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(who, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	self, children := cpu(syscall.RUSAGE_SELF), cpu(syscall.RUSAGE_CHILDREN)
	return func() {
		b.ReportMetric(float64((cpu(syscall.RUSAGE_SELF)-self).Microseconds())/float64(b.N), "cpu-µs/op")
		b.ReportMetric(float64((cpu(syscall.RUSAGE_CHILDREN)-children).Microseconds())/float64(b.N), "child-cpu-µs/op")
	}
}
