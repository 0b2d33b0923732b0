package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/runtimes/docker"
)

// agentTokenHeader is the header the in-sandbox agent demands its token in.
const agentTokenHeader = "X-EXECD-ACCESS-TOKEN"

// TestHardening checks, from inside real sandboxes started by the gateway with its
// defaults, that a workload cannot take the host or its neighbours down (fork bomb, memory
// hog), cannot use the kernel features a container escape starts with (mount, raw
// sockets, the clock), and cannot reach a neighbour's agent; and, from the host, that the
// agent refuses calls without its token and that no port is published.
func TestHardening(t *testing.T) {
	e := newEnv(t, nil)
	g := e.startGateway()
	bomber := g.createSandbox(map[string]any{})
	neighbour := g.createSandbox(map[string]any{})
	hog := g.createSandbox(map[string]any{"resourceLimits": map[string]string{"memory": "64Mi"}})

	// stillServing fails the test unless the gateway and the neighbour answer.
	stillServing := func(t *testing.T) {
		t.Helper()
		resp, err := http.Get("http://" + g.Addr + "/health")
		if err != nil {
			t.Fatalf("gateway health: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("gateway health: status %d", resp.StatusCode)
		}
		if out := stdoutOf(g.agent(neighbour).run("echo alive")); out != "alive" {
			t.Fatalf("neighbour answered %q, want alive", out)
		}
	}

	t.Run("fork bomb stops at the pids limit", func(t *testing.T) {
		id := containerID(t, bomber)
		limit := readCgroupInt(t, "pids", id, "pids.max")
		if limit <= 0 || limit > 4096 {
			t.Fatalf("pids.max of the sandbox = %d, want a limit (1024 by default)", limit)
		}
		// Bounded bomb: fork sleeping children until fork fails (or 4000 of them), hold
		// them long enough for the checks below, then reap them all.
		bomb := `python3 -c '
import os, time
pids, err = [], ""
for _ in range(4000):
    try:
        pid = os.fork()
    except OSError as e:
        err = e.strerror
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    pids.append(pid)
print("spawned", len(pids), "error", err, flush=True)
time.sleep(4)
for p in pids:
    os.kill(p, 9)
for p in pids:
    os.waitpid(p, 0)
print("reaped", flush=True)
'`
		a := g.agent(bomber)
		var wg sync.WaitGroup
		var out string
		var runErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, runErr = runNoFatal(a, bomb, 2*time.Minute)
		}()
		// While the bomb holds every pid it could get, the others keep serving.
		waitFor(t, time.Minute, func() bool { return readCgroupInt(t, "pids", id, "pids.current") >= limit-2 }, "the bomb to reach the pids limit")
		stillServing(t)
		// The bombed sandbox's own agent keeps serving too (it is how a user would stop a
		// runaway command): concurrent file reads are blocking syscalls, each of which
		// needs an OS thread of the agent while no new one can be made.
		var calls sync.WaitGroup
		callErrs := make(chan error, 16)
		for i := 0; i < 16; i++ {
			calls.Add(1)
			go func(i int) {
				defer calls.Done()
				path := "/files/download?path=/usr/bin/python3"
				if i%2 == 1 {
					path = "/files/info?path=/etc/passwd"
				}
				if err := agentGet(a, path); err != nil {
					callErrs <- err
				}
			}(i)
		}
		calls.Wait()
		close(callErrs)
		for err := range callErrs {
			t.Errorf("bombed sandbox's agent during the bomb: %v", err)
		}
		wg.Wait()
		if runErr != nil {
			t.Fatalf("fork bomb command: %v", runErr)
		}
		var spawned int
		var reason string
		if _, err := fmt.Sscanf(out, "spawned %d error %s", &spawned, &reason); err != nil {
			t.Fatalf("bomb output %q: %v", out, err)
		}
		if spawned >= int(limit) || !strings.Contains(out, "Resource temporarily unavailable") || !strings.Contains(out, "reaped") {
			t.Fatalf("bomb output %q: want fork to fail with EAGAIN below %d processes", out, limit)
		}
		// The bombed sandbox itself recovers once its processes are gone.
		if got := stdoutOf(a.run("echo recovered")); got != "recovered" {
			t.Fatalf("bombed sandbox answered %q after the bomb", got)
		}
		stillServing(t)
	})

	t.Run("memory hog is killed by its own limit", func(t *testing.T) {
		id := containerID(t, hog)
		if got := readCgroupInt(t, "memory", id, "memory.limit_in_bytes"); got != 64<<20 {
			t.Fatalf("memory limit = %d, want 64 MiB", got)
		}
		evs := g.agent(hog).run(`python3 -c '
chunks = []
while True:
    chunks.append(b"x" * (8 << 20))
'`)
		last := lastEvent(evs)
		if last.Type != "error" {
			t.Fatalf("hog ended with %+v, want an error (killed)", last)
		}
		if kills := oomKills(t, id); kills < 1 {
			t.Fatalf("the sandbox's memory cgroup recorded %d OOM kills, want at least 1", kills)
		}
		// The kernel killed the hog, not the sandbox: its agent answers.
		if got := stdoutOf(g.agent(hog).run("echo survived")); got != "survived" {
			t.Fatalf("hog sandbox answered %q after the kill", got)
		}
		stillServing(t)
	})

	t.Run("privileged operations fail", func(t *testing.T) {
		a := g.agent(neighbour)
		for _, tt := range []struct {
			name    string
			command string
		}{
			{"mount a tmpfs", "mkdir -p /mnt/x && mount -t tmpfs none /mnt/x"},
			{"open a raw socket", `python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)'`},
			{"set the clock", "date -s '2001-02-03 04:05:06'"},
			{"load a kernel module", `python3 -c '
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.init_module(None, 0, b"") != 0:
    sys.exit(os.strerror(ctypes.get_errno()))
'`},
			{"create a user namespace", "unshare --user --map-root-user true"},
			{"change the hostname", `python3 -c 'import socket; socket.sethostname("evil")'`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				evs := a.run(tt.command)
				if last := lastEvent(evs); last.Type != "error" {
					t.Fatalf("%q succeeded (%+v), want a failure", tt.command, last)
				}
				// The failure must be the kernel's refusal, not a missing tool.
				stderr := strings.ToLower(stderrOf(evs))
				if !strings.Contains(stderr, "not permitted") && !strings.Contains(stderr, "permission denied") {
					t.Fatalf("%q failed without a permission error; stderr: %s", tt.command, stderr)
				}
			})
		}
		t.Run("capabilities are the documented set", func(t *testing.T) {
			out := stdoutOf(a.run("grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status"))
			fields := map[string]string{}
			for _, line := range strings.Split(out, "\n") {
				if k, v, ok := strings.Cut(line, ":"); ok {
					fields[k] = strings.TrimSpace(v)
				}
			}
			if fields["NoNewPrivs"] != "1" {
				t.Errorf("NoNewPrivs = %q, want 1", fields["NoNewPrivs"])
			}
			bnd, err := strconv.ParseUint(fields["CapBnd"], 16, 64)
			if err != nil {
				t.Fatalf("CapBnd %q: %v (status: %s)", fields["CapBnd"], err, out)
			}
			// Bits from linux/capability.h of what a workload must never hold.
			for name, bit := range map[string]uint{
				"NET_ADMIN": 12, "NET_RAW": 13, "IPC_LOCK": 14, "SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_PTRACE": 19,
				"SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23, "SYS_RESOURCE": 24, "SYS_TIME": 25,
				"MAC_ADMIN": 33, "SYSLOG": 34, "BPF": 39, "PERFMON": 38, "CHECKPOINT_RESTORE": 40,
			} {
				if bnd&(1<<bit) != 0 {
					t.Errorf("the bounding set holds CAP_%s (CapBnd %s)", name, fields["CapBnd"])
				}
			}
		})
	})

	t.Run("agent refuses calls without its token", func(t *testing.T) {
		ip := containerIP(t, bomber, e.Network)
		// From a neighbour sandbox: the private bridge (ICC off) and the egress enforcer
		// keep the connection from being made at all.
		evs := g.agent(neighbour).run(fmt.Sprintf("curl -sS -m 5 -o /dev/null -w '%%{http_code}' http://%s:%d/ping", ip, runtimes.AgentPort))
		if last := lastEvent(evs); last.Type != "error" || stdoutOf(evs) == "200" {
			t.Fatalf("neighbour reached the agent at %s: stdout %q, last %+v", ip, stdoutOf(evs), last)
		}
		// From the host, which does reach it: no token, or a wrong one, is a 401.
		for _, tt := range []struct {
			name, token string
		}{{"no token", ""}, {"wrong token", "not-the-token"}} {
			t.Run(tt.name, func(t *testing.T) {
				req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s:%d/ping", ip, runtimes.AgentPort), nil)
				if tt.token != "" {
					req.Header.Set(agentTokenHeader, tt.token)
				}
				resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
				if err != nil {
					t.Fatalf("GET /ping: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					t.Fatalf("GET /ping with %s: status %d, want 401", tt.name, resp.StatusCode)
				}
			})
		}
	})

	t.Run("no host port is published", func(t *testing.T) {
		for _, cid := range e.containers() {
			out, err := exec.Command("docker", "inspect", "-f", "{{json .HostConfig.PortBindings}} {{.HostConfig.PublishAllPorts}} {{json .NetworkSettings.Ports}}", cid).CombinedOutput()
			if err != nil {
				t.Fatalf("docker inspect %s: %v: %s", cid, err, out)
			}
			got := strings.TrimSpace(string(out))
			if strings.Contains(got, "HostPort") || strings.Contains(got, " true ") {
				t.Errorf("container %s publishes ports: %s", cid, got)
			}
		}
	})
}

// TestHardeningReadOnlyRootfs starts a sandbox through the Docker runtime with a
// read-only root filesystem and checks that the agent still runs and the workload can
// write only to its workspace and /tmp.
func TestHardeningReadOnlyRootfs(t *testing.T) {
	e := newEnv(t, nil)
	a := startRuntimeSandbox(t, e, docker.Options{ReadOnlyRootfs: true}, "")
	for _, tt := range []struct {
		name     string
		command  string
		wantFail bool
	}{
		{"root is read-only", "touch /etc/sandgate-was-here", true},
		{"binaries cannot be replaced", "cp /bin/true /usr/bin/python3", true},
		{"workspace is writable", "echo hi > /workspace/f && cat /workspace/f", false},
		{"tmp is writable and executable", "printf '#!/bin/sh\\necho ran\\n' > /tmp/s && chmod +x /tmp/s && /tmp/s", false},
		{"workspace has no setuid", "mount | grep ' /workspace ' | grep -q nosuid", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			last := lastEvent(a.run(tt.command))
			if failed := last.Type == "error"; failed != tt.wantFail {
				t.Fatalf("%q: last event %+v, want failure=%v", tt.command, last, tt.wantFail)
			}
		})
	}
}

// startRuntimeSandbox creates one sandbox through the Docker runtime package directly (not
// the gateway), with egress enforcement off, on the test's network, and returns a client
// for its agent. ociRuntime is the per-sandbox runtime (runtimes.Spec.Runtime).
func startRuntimeSandbox(t *testing.T, e *env, opts docker.Options, ociRuntime string) *agent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts.Network = e.Network
	opts.AgentBinary = filepath.Join(binDir, "sandbox-agent")
	opts.NoEgress = true
	rt, err := docker.New(ctx, opts)
	if err != nil {
		t.Fatalf("docker runtime: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	spec := runtimes.Spec{
		ID: "hard-" + randomHex(6), Tenant: "e2e", Image: baseImage,
		Entrypoint: []string{"tail", "-f", "/dev/null"},
		AgentToken: randomHex(16), CreatedAt: time.Now(), Runtime: ociRuntime,
	}
	inst, err := rt.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() {
		rmCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := rt.Delete(rmCtx, spec.ID); err != nil {
			t.Errorf("delete sandbox: %v", err)
		}
	})
	a := &agent{t: t, base: fmt.Sprintf("http://%s:%d", inst.Address, runtimes.AgentPort),
		headers: map[string]string{agentTokenHeader: spec.AgentToken}, client: &http.Client{Timeout: 2 * time.Minute}}
	waitFor(t, time.Minute, func() bool {
		req, _ := http.NewRequest("GET", a.base+"/ping", nil)
		req.Header.Set(agentTokenHeader, spec.AgentToken)
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, "the agent to answer /ping")
	return a
}

func stderrOf(evs []event) string {
	var lines []string
	for _, ev := range evs {
		if ev.Type == "stderr" {
			lines = append(lines, ev.Text)
		}
	}
	return strings.Join(lines, "\n")
}

// runNoFatal runs a command through an agent from a goroutine other than the test's,
// returning its stdout, or an error unless it completed.
// agentGet calls path on a's agent and reads the whole answer, which must be a 200.
func agentGet(a *agent, path string) error {
	req, err := http.NewRequest("GET", a.base+path, nil)
	if err != nil {
		return err
	}
	for k, v := range a.headers {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("GET %s: reading: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	return nil
}

func runNoFatal(a *agent, command string, timeout time.Duration) (string, error) {
	body, _ := json.Marshal(map[string]any{"command": command})
	req, err := http.NewRequest("POST", a.base+"/command", strings.NewReader(string(body)))
	if err != nil {
		return "", err
	}
	for k, v := range a.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	var lines []string
	done := false
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "data:"))
		var ev event
		if line == "" || json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		switch ev.Type {
		case "stdout":
			lines = append(lines, ev.Text)
		case "execution_complete":
			done = true
		}
	}
	if !done {
		return strings.Join(lines, "\n"), fmt.Errorf("command did not complete: %s", tail(string(data), 2000))
	}
	return strings.Join(lines, "\n"), nil
}

// containerID returns the full Docker id of a sandbox's container.
func containerID(t *testing.T, sandboxID string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{.Id}}", "sandgate-"+sandboxID).CombinedOutput()
	if err != nil {
		t.Fatalf("docker inspect sandgate-%s: %v: %s", sandboxID, err, out)
	}
	return strings.TrimSpace(string(out))
}

// containerIP returns a sandbox's address on the test's network.
func containerIP(t *testing.T, sandboxID, network string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", fmt.Sprintf(`{{with index .NetworkSettings.Networks %q}}{{.IPAddress}}{{else}}{{index .Config.Labels "sandgate.io/address"}}{{end}}`, network), "sandgate-"+sandboxID).CombinedOutput()
	ip := strings.TrimSpace(string(out))
	if err != nil || ip == "" {
		t.Fatalf("address of sandgate-%s on %s: %v: %s", sandboxID, network, err, out)
	}
	return ip
}

// cgroupFile finds a container's file of a cgroup v1 controller (dockerd here uses
// cgroupfs with cgroup v1: /sys/fs/cgroup/<controller>/docker/<id>/<file>).
func cgroupFile(t *testing.T, controller, id, file string) string {
	t.Helper()
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup", controller, "docker", id, file),
		filepath.Join("/sys/fs/cgroup", controller, "system.slice", "docker-"+id+".scope", file),
	} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("no %s cgroup file %s for container %s (cgroup v2 or another layout?)", controller, file, id)
	return ""
}

func readCgroupInt(t *testing.T, controller, id, file string) int64 {
	t.Helper()
	data, err := os.ReadFile(cgroupFile(t, controller, id, file))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return -1
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s %s: %v", controller, file, err)
	}
	return n
}

// oomKills reads the count of OOM kills the kernel made inside the container's memory
// cgroup: proof that its own limit, not the host's memory, stopped a process.
func oomKills(t *testing.T, id string) int {
	t.Helper()
	data, err := os.ReadFile(cgroupFile(t, "memory", id, "memory.oom_control"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatalf("memory.oom_control has no oom_kill counter: %s", data)
	return 0
}
