package docker

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// processRuntime is a runtime whose enforcers are host processes; the test is skipped
// where the host cannot run them (not root, version 2 cgroups).
func processRuntime(t *testing.T) (*Runtime, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("enforcer processes need root")
	}
	if err := usableCgroupsV1(cgroupV1Root); err != nil {
		t.Skipf("enforcer processes need version 1 cgroups: %v", err)
	}
	r, image := testRuntimeWith(t, EnforcerProcess)
	if r.procs == nil {
		t.Fatal("the runtime runs no enforcer processes")
	}
	return r, image
}

// enforcerRecordOf is the record of sandbox id's enforcer process.
func enforcerRecordOf(t *testing.T, r *Runtime, id string) EnforcerRecord {
	t.Helper()
	rec, err := readEnforcerRecord(r.procs.sandboxDir(id))
	if err != nil {
		t.Fatalf("no enforcer process of %s: %v", id, err)
	}
	return rec
}

// namespaceOf is process pid's namespace of kind ("net", "pid"…).
func namespaceOf(t *testing.T, pid int, kind string) string {
	t.Helper()
	ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/" + kind)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// processNetns is the network namespace of sandbox id's enforcer process.
func processNetns(t *testing.T, r *Runtime, id string) string {
	t.Helper()
	return namespaceOf(t, enforcerRecordOf(t, r, id).PID, "net")
}

// containerNetns is the network namespace of container ref's main process.
func containerNetns(t *testing.T, ref string) string {
	t.Helper()
	return namespaceOf(t, containerPid(t, ref), "net")
}

func containerPid(t *testing.T, ref string) int {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", ref).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", ref, err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return pid
}

// statusField is a field of /proc/<pid>/status.
func statusField(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}

// TestEnforcerProcessIsolation looks at a sandbox's enforcer process from the host as
// an attacker who got code into it would find itself: not root, with NET_ADMIN and
// NET_BIND_SERVICE only and no way to gain more, in the sandbox's network namespace but
// in PID, mount, IPC and UTS namespaces of its own (neither the host's nor the
// workload's), chrooted into a directory holding only the agent (root's, read-only) and
// its own state, with an environment of the runtime's writing only, inside memory and
// pids limits; and what it leaves on the host readable by root alone.
func TestEnforcerProcessIsolation(t *testing.T) {
	r, image := processRuntime(t)
	ctx := context.Background()
	t.Setenv("SANDGATE_HOSTILE_GATEWAY_ENV", "leaked")
	spec := enforcedSpec(t, r, image, `{"defaultAction":"deny"}`)
	inst, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	rec := enforcerRecordOf(t, r, spec.ID)
	pid := rec.PID
	uid := strconv.Itoa(enforcerUID(spec.ID))

	for _, field := range []string{"Uid", "Gid"} {
		if got := strings.Fields(statusField(t, pid, field)); len(got) != 4 || slices.IndexFunc(got, func(v string) bool { return v != uid }) >= 0 {
			t.Errorf("%s %v, want %s four times (real, effective, saved, filesystem)", field, got, uid)
		}
	}
	if got := statusField(t, pid, "Groups"); got != "" {
		t.Errorf("supplementary groups %q, want none", got)
	}
	// CAP_NET_BIND_SERVICE is bit 10, CAP_NET_ADMIN bit 12.
	const want = "0000000000001400"
	for _, set := range []string{"CapEff", "CapPrm", "CapAmb"} {
		if got := statusField(t, pid, set); got != want {
			t.Errorf("%s %s, want %s (NET_ADMIN and NET_BIND_SERVICE only)", set, got, want)
		}
	}
	if got := statusField(t, pid, "NoNewPrivs"); got != "1" {
		t.Errorf("NoNewPrivs %s, want 1", got)
	}
	// Every thread is under the enforcer's syscall filter (sandbox-agent/egress/syscallfilter.go).
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of the enforcer: %v", err)
	}
	for _, task := range tasks {
		status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/status")
		if err != nil {
			continue // the thread ended
		}
		if !regexp.MustCompile(`(?m)^Seccomp:\s+2$`).Match(status) {
			t.Errorf("thread %s of the enforcer is not under a seccomp filter", task.Name())
		}
	}

	workload := containerPid(t, containerName(spec.ID))
	if got, want := namespaceOf(t, pid, "net"), namespaceOf(t, workload, "net"); got != want {
		t.Errorf("network namespace %s, the workload's is %s", got, want)
	}
	for _, kind := range []string{"pid", "mnt", "ipc", "uts"} {
		own := namespaceOf(t, pid, kind)
		if own == namespaceOf(t, os.Getpid(), kind) || own == namespaceOf(t, workload, kind) {
			t.Errorf("%s namespace %s is the host's or the workload's", kind, own)
		}
	}

	root, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/root")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(r.procs.sandboxDir(spec.ID), "root"); root != want {
		t.Errorf("root %s, want the chroot %s", root, want)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"sandbox-agent", "state"}) {
		t.Errorf("the chroot holds %v, want only sandbox-agent and state", names)
	}
	for path, wantMode := range map[string]os.FileMode{filepath.Join(root, "sandbox-agent"): 0o555, root: os.ModeDir | 0o755} {
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st := info.Sys().(*syscall.Stat_t); st.Uid != 0 || info.Mode() != wantMode {
			t.Errorf("%s: owner %d, mode %v; want root's, %v", path, st.Uid, info.Mode(), wantMode)
		}
	}
	if info, err := os.Stat(filepath.Join(root, "state")); err != nil {
		t.Fatal(err)
	} else if st := info.Sys().(*syscall.Stat_t); strconv.Itoa(int(st.Uid)) != uid || info.Mode().Perm() != 0o700 {
		t.Errorf("state directory: owner %d, mode %v; want the enforcer's, 0700", st.Uid, info.Mode())
	}

	environ, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00") {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	for _, k := range keys {
		if !slices.Contains([]string{envEgressToken, envEgressPolicy, "SANDGATE_EGRESS_DNS_SERVERS"}, k) {
			t.Errorf("the enforcer's environment holds %s, which the runtime did not write", k)
		}
	}

	cgroups, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"memory", "pids"} {
		if !strings.Contains(string(cgroups), h+":/"+enforcerCgroupParent+"/"+spec.ID+"\n") {
			t.Errorf("not in its own %s cgroup: %s", h, cgroups)
		}
	}
	for file, want := range map[string]string{
		filepath.Join(r.procs.cgroups.path("memory", spec.ID), "memory.limit_in_bytes"): strconv.Itoa(enforcerMemoryBytes),
		filepath.Join(r.procs.cgroups.path("pids", spec.ID), "pids.max"):                strconv.Itoa(enforcerPids),
	} {
		if b, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s = %q (%v), want %s", file, b, err, want)
		}
	}

	// A local user reads nothing of it: the directories are root's, 0700, the record
	// (with the token) and the log 0600.
	for path, want := range map[string]os.FileMode{
		r.procs.dir:                 os.ModeDir | 0o700,
		r.procs.sandboxDir(spec.ID): os.ModeDir | 0o700,
		filepath.Join(r.procs.sandboxDir(spec.ID), enforcerRecordFile): 0o600,
		filepath.Join(r.procs.sandboxDir(spec.ID), "enforcer.log"):     0o600,
	} {
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st := info.Sys().(*syscall.Stat_t); st.Uid != 0 || info.Mode() != want {
			t.Errorf("%s: owner %d, mode %v; want root's, %v", path, st.Uid, info.Mode(), want)
		}
	}

	if got := signedPolicy(t, inst.Address, spec.EgressToken); !strings.Contains(got, `"defaultAction":"deny"`) {
		t.Fatalf("policy in force: %s", got)
	}
}

// waitRestartedPatched waits until sandbox id's enforcer, whose process killed was
// killed, runs again as another process (as r sees it) and enforces its policy with
// "patched.test" allowed through the API.
func waitRestartedPatched(t *testing.T, r *Runtime, id string, killed int, addr, token string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rec, err := readEnforcerRecord(r.procs.sandboxDir(id))
		if err == nil && rec.PID != killed && r.procs.running(id) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed enforcer process was not started again")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The new process answers once its rules are installed.
	var got string
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if got, err = readSignedPolicy(addr, token); strings.Contains(got, "patched.test") || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(got, "patched.test") || !strings.Contains(got, "created.test") {
		t.Fatalf("policy after the restart: %q (%v), want the patched one", got, err)
	}
}

// TestEgressProcessLifecycle: an enforcer process killed is started again by its
// runtime with the policy it had (its state), a restarted gateway's runtime finds it
// running and knows its token, RestoreEgress gives a workload whose enforcer is gone a
// new one and does not take a workload on port 18080 for it, and Delete leaves no
// process, directory or cgroup.
func TestEgressProcessLifecycle(t *testing.T) {
	r, image := processRuntime(t)
	ctx := context.Background()
	spec := enforcedSpec(t, r, image, `{"defaultAction":"deny","egress":[{"action":"allow","target":"created.test"}]}`)
	id := spec.ID
	inst, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	first := enforcerRecordOf(t, r, id)

	// A change through the API, then a crash: the restarted enforcer keeps the change.
	status, body, err := r.agents.Policy(ctx, inst.Address, spec.EgressToken, http.MethodPatch,
		[]byte(`[{"action":"allow","target":"patched.test"}]`), 5*time.Second)
	if err != nil || status != http.StatusOK {
		t.Fatalf("PATCH /policy: %d %s %v", status, body, err)
	}
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitRestartedPatched(t, r, id, first.PID, inst.Address, spec.EgressToken)
	if n := r.EnforcerProcessRestarts(); n != 1 {
		t.Errorf("the runtime counts %d enforcer restarts, want 1", n)
	}

	// A log grown to its rotation size is kept as enforcer.log.1 by the next sweep and
	// emptied in place.
	logPath := filepath.Join(r.procs.sandboxDir(id), enforcerLogFile)
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = logFile.Write(make([]byte, enforcerLogRotateBytes))
	logFile.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.SweepHelpers(ctx); err != nil {
		t.Fatal(err)
	}
	if kept, err := os.Stat(logPath + ".1"); err != nil || kept.Size() < enforcerLogRotateBytes {
		t.Errorf("after the sweep enforcer.log.1 is %v (%v), want the rotated log", kept, err)
	}
	if now, err := os.Stat(logPath); err != nil || now.Size() >= enforcerLogRotateBytes {
		t.Errorf("after the sweep enforcer.log is %v (%v), want it emptied", now, err)
	}

	// A gateway that restarts finds the process running and its token.
	r2 := testRuntimeOn(t, Options{Network: r.opts.Network, Enforcer: EnforcerProcess, Spares: -1})
	listed, err := r2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	running := false
	for _, l := range listed {
		if l.ID == id {
			running = l.EnforcerRunning
		}
	}
	if !running {
		t.Fatal("a new runtime does not see the enforcer process running")
	}
	if got, err := r2.Inspect(ctx, id); err != nil || !got.Complete || got.EgressToken != spec.EgressToken {
		t.Fatalf("a new runtime's Inspect: %+v, %v", got, err)
	}

	// Gone for good (its record removed first, so that nothing starts it again): the
	// reconciler's view names it missing, and RestoreEgress gives a new one.
	killEnforcerForGood(t, r, id)
	missing, _ := r2.List(ctx)
	names, _ := r2.MissingEnforcers(ctx, missing)
	if !slices.Contains(names, id) {
		t.Fatalf("MissingEnforcers %v lacks %s", names, id)
	}
	restoreThenRefuseFake(t, r2, &spec, inst.Address, "patched.test")
	last, err := readEnforcerRecord(r2.procs.sandboxDir(id))
	if err != nil {
		t.Fatal(err)
	}

	if err := r.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.procs.sandboxDir(id)); err == nil {
		t.Error("the enforcer's directory is left after Delete")
	}
	for deadline := time.Now().Add(5 * time.Second); processStart(last.PID) == last.Start; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Error("the enforcer process runs after Delete")
			break
		}
	}
	for _, h := range enforcerHierarchies {
		if _, err := os.Stat(r.procs.cgroups.path(h.name, id)); err == nil {
			t.Errorf("the enforcer's %s cgroup is left after Delete", h.name)
		}
	}
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=sandgate.io/id="+id).Output()
	if ids := strings.Fields(string(out)); len(ids) != 0 {
		t.Fatalf("containers left after Delete: %v", ids)
	}
	if _, err := r.cli.ContainerInspect(ctx, egressContainerName(id), client.ContainerInspectOptions{}); err == nil {
		t.Fatal("a sidecar exists for a sandbox whose enforcer is a process")
	}
}

// TestEnforcerProcessAdoptedByAnotherGateway: a gateway of the network that started
// before a sandbox was made adopts its enforcer at its next helper sweep, so that when
// the gateway that made it is gone and the enforcer dies, this one starts it again with
// the policy it had.
func TestEnforcerProcessAdoptedByAnotherGateway(t *testing.T) {
	r, image := processRuntime(t)
	ctx := context.Background()
	other := testRuntimeOn(t, Options{Network: r.opts.Network, Enforcer: EnforcerProcess, Spares: -1})
	spec := enforcedSpec(t, r, image, `{"defaultAction":"deny","egress":[{"action":"allow","target":"created.test"}]}`)
	inst, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	status, body, err := r.agents.Policy(ctx, inst.Address, spec.EgressToken, http.MethodPatch,
		[]byte(`[{"action":"allow","target":"patched.test"}]`), 5*time.Second)
	if err != nil || status != http.StatusOK {
		t.Fatalf("PATCH /policy: %d %s %v", status, body, err)
	}
	if _, err := other.SweepHelpers(ctx); err != nil {
		t.Fatal(err)
	}
	// The gateway that made it is gone: nothing of it starts its enforcers again.
	r.procs.close()
	first := enforcerRecordOf(t, r, spec.ID)
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitRestartedPatched(t, other, spec.ID, first.PID, inst.Address, spec.EgressToken)
	if n, m := other.EnforcerProcessRestarts(), r.EnforcerProcessRestarts(); n != 1 || m != 0 {
		t.Errorf("enforcer restarts counted: %d by the gateway that restarted it, %d by the one gone; want 1 and 0", n, m)
	}
	if err := other.Delete(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(other.procs.sandboxDir(spec.ID)); err == nil {
		t.Error("the enforcer's directory is left after Delete")
	}
}
