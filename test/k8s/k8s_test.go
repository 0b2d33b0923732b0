package k8s_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/runtimes"
	sgk8s "github.com/sandgate/sandgate/runtimes/kubernetes"
)

// TestLifecycle: create, get, list, a command and delete through the gateway API, with
// every sandbox a pod whose spec carries the agent injection, the enforcer sidecar and
// the hardening.
func TestLifecycle(t *testing.T) {
	ns := newNamespace(t)
	g := startGateway(t, ns)

	id := g.createSandbox(map[string]any{
		"env":            map[string]string{"GREETING": "hello $(HOME) $$ from k8s"},
		"metadata":       map[string]string{"team": "alpha"},
		"resourceLimits": map[string]string{"cpu": "250m", "memory": "128Mi"},
		"timeout":        600,
	})
	pod, err := kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the sandbox's pod: %v", err)
	}

	t.Run("get and list", func(t *testing.T) {
		r := g.do("GET", "/v1/sandboxes/"+id, nil)
		if r.Status != 200 {
			t.Fatalf("get: %d %s", r.Status, r.Body)
		}
		m := r.JSON(t)
		if m["status"].(map[string]any)["state"] != "Running" || m["metadata"].(map[string]any)["team"] != "alpha" {
			t.Fatalf("get: %s", r.Body)
		}
		r = g.do("GET", "/v1/sandboxes?metadata=team%3Dalpha", nil)
		items, _ := r.JSON(t)["items"].([]any)
		if len(items) != 1 || items[0].(map[string]any)["id"] != id {
			t.Fatalf("list: %s", r.Body)
		}
	})

	t.Run("pod labels and annotations", func(t *testing.T) {
		for k, want := range map[string]string{runtimes.LabelID: id, runtimes.LabelTenant: "default"} {
			if pod.Labels[k] != want {
				t.Errorf("label %s = %q, want %q", k, pod.Labels[k], want)
			}
		}
		if pod.Annotations[runtimes.LabelExpiresAt] == "" || !strings.Contains(pod.Annotations["sandgate.io/metadata"], `"team":"alpha"`) {
			t.Errorf("annotations lack expiry or metadata: %v", pod.Annotations)
		}
	})

	t.Run("pod spec", func(t *testing.T) {
		assertPodSpec(t, pod, podExpectations{egress: true, cpu: "250m", memory: "128Mi"})
	})

	t.Run("command reaches the pod's agent", func(t *testing.T) {
		// The env was written escaped into the pod; the agent got it verbatim.
		out, code, err := g.command(id, `echo "$GREETING"`)
		if err != nil || code != 0 {
			t.Fatalf("command: exit %d, %v", code, err)
		}
		if want := "hello $(HOME) $$ from k8s"; out != want {
			t.Fatalf("stdout = %q, want %q", out, want)
		}
		if _, code, _ := g.command(id, "exit 3"); code != 3 {
			t.Fatalf("exit code = %d, want 3", code)
		}
	})

	t.Run("pause freezes the workload and resume thaws it", func(t *testing.T) {
		checkPauseFreezes(t, g, ns, id)
	})

	t.Run("delete removes the pod and its agent", func(t *testing.T) {
		if r := g.do("DELETE", "/v1/sandboxes/"+id, nil); r.Status != 204 {
			t.Fatalf("delete: %d %s", r.Status, r.Body)
		}
		if r := g.do("GET", "/v1/sandboxes/"+id, nil); r.Status != 404 {
			t.Fatalf("get after delete: %d", r.Status)
		}
		waitFor(t, time.Minute, func() bool {
			_, err := kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(id), metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, "the pod to go")
		waitFor(t, 30*time.Second, func() bool { return agents.runningIn(ns) == 0 }, "the agent to stop")
	})
}

// podExpectations are what assertPodSpec checks beyond the invariants.
type podExpectations struct {
	egress       bool
	cpu, memory  string
	runtimeClass string
}

// assertPodSpec checks a sandbox pod: the agent copied by an init container into an
// emptyDir the workload runs it from, the enforcer as a native sidecar with NET_ADMIN,
// a workload without NET_ADMIN/NET_RAW or privilege escalation, resources, runtime class
// and the pod-level hardening.
func assertPodSpec(t *testing.T, pod *corev1.Pod, want podExpectations) {
	t.Helper()
	spec := pod.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken must be false")
	}
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		t.Error("enableServiceLinks must be false")
	}
	if spec.SecurityContext == nil || spec.SecurityContext.SeccompProfile == nil || spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("the pod's seccomp profile must be RuntimeDefault")
	}
	if spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy = %s, want Never (a sandbox whose main process ended is over)", spec.RestartPolicy)
	}
	gotClass := ""
	if spec.RuntimeClassName != nil {
		gotClass = *spec.RuntimeClassName
	}
	if gotClass != want.runtimeClass {
		t.Errorf("runtimeClassName = %q, want %q", gotClass, want.runtimeClass)
	}
	var emptyDir bool
	for _, v := range spec.Volumes {
		if v.Name == sgk8s.AgentVolume && v.EmptyDir != nil {
			emptyDir = true
		}
	}
	if !emptyDir {
		t.Errorf("no emptyDir volume %s for the agent: %+v", sgk8s.AgentVolume, spec.Volumes)
	}

	// Init containers: the installer first, then (with egress) the native sidecar.
	var names []string
	for _, c := range spec.InitContainers {
		names = append(names, c.Name)
	}
	wantNames := []string{sgk8s.InstallContainer}
	if want.egress {
		wantNames = append(wantNames, sgk8s.EgressContainer)
	}
	if diff := cmp.Diff(wantNames, names); diff != "" {
		t.Fatalf("init containers (-want +got):\n%s", diff)
	}
	install := spec.InitContainers[0]
	if !strings.HasPrefix(install.Image, "sandgate/agent:") || install.RestartPolicy != nil {
		t.Errorf("installer: image %q restartPolicy %v, want sandgate/agent:<version>, a plain init container", install.Image, install.RestartPolicy)
	}
	if diff := cmp.Diff([]string{"/sandbox-agent", "install", "/.sandgate/sandbox-agent"}, install.Command); diff != "" {
		t.Errorf("installer command (-want +got):\n%s", diff)
	}
	if !mountsAgent(install, false) {
		t.Errorf("installer does not mount the agent volume writable: %+v", install.VolumeMounts)
	}
	checkHardened(t, "installer", install, nil)

	if want.egress {
		sidecar := spec.InitContainers[1]
		if sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Errorf("egress sidecar restartPolicy = %v, want Always (a native sidecar)", sidecar.RestartPolicy)
		}
		if sidecar.Image != install.Image || len(sidecar.Command) < 2 || sidecar.Command[1] != "egress" {
			t.Errorf("egress sidecar: image %q command %q, want the agent image running `egress`", sidecar.Image, sidecar.Command)
		}
		if sidecar.StartupProbe == nil || sidecar.StartupProbe.HTTPGet == nil || sidecar.StartupProbe.HTTPGet.Port.IntValue() != runtimes.EgressPort {
			t.Errorf("egress sidecar needs a startup probe on %d so the workload waits for the rules", runtimes.EgressPort)
		}
		checkHardened(t, "egress sidecar", sidecar, []corev1.Capability{"NET_ADMIN", "NET_BIND_SERVICE"})
		if envOf(sidecar, sgk8s.EnvEgressToken) == "" || envOf(sidecar, sgk8s.EnvEgressPolicy) == "" {
			t.Error("egress sidecar lacks its token or its policy")
		}
	}

	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want the workload alone", len(spec.Containers))
	}
	w := spec.Containers[0]
	if w.Name != sgk8s.WorkloadContainer || w.Image != image {
		t.Errorf("workload %s image %s, want %s image %s", w.Name, w.Image, sgk8s.WorkloadContainer, image)
	}
	if len(w.Command) < 4 || w.Command[0] != "/.sandgate/sandbox-agent" || w.Command[1] != "init" || w.Command[2] != "--" {
		t.Errorf("workload command = %q, want the agent as PID 1 in front of the entrypoint", w.Command)
	}
	if !mountsAgent(w, true) {
		t.Errorf("workload does not mount the agent volume read-only: %+v", w.VolumeMounts)
	}
	if envOf(w, sgk8s.EnvAgentToken) == "" {
		t.Error("workload lacks the agent token")
	}
	if want.egress && envOf(w, sgk8s.EnvEgressToken) != "" {
		t.Error("the workload must not hold the enforcer's token")
	}
	checkHardened(t, "workload", w, nil)
	for _, c := range w.SecurityContext.Capabilities.Add {
		if c == "NET_ADMIN" || c == "NET_RAW" || c == "SYS_ADMIN" || c == "SYS_PTRACE" {
			t.Errorf("workload holds %s", c)
		}
	}
	for _, kind := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		wantQ := resource.MustParse(map[corev1.ResourceName]string{corev1.ResourceCPU: want.cpu, corev1.ResourceMemory: want.memory}[kind])
		lim, req := w.Resources.Limits[kind], w.Resources.Requests[kind]
		if lim.Cmp(wantQ) != 0 || req.Cmp(wantQ) != 0 {
			t.Errorf("workload %s: limit %s request %s, want both %s", kind, lim.String(), req.String(), wantQ.String())
		}
	}
}

// checkHardened: every capability dropped but add, no privilege escalation, not privileged.
func checkHardened(t *testing.T, what string, c corev1.Container, add []corev1.Capability) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Errorf("%s has no security context with capabilities", what)
		return
	}
	if diff := cmp.Diff([]corev1.Capability{"ALL"}, sc.Capabilities.Drop); diff != "" {
		t.Errorf("%s drops (-want +got):\n%s", what, diff)
	}
	if add != nil {
		if diff := cmp.Diff(add, sc.Capabilities.Add); diff != "" {
			t.Errorf("%s adds (-want +got):\n%s", what, diff)
		}
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation must be false", what)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s is privileged", what)
	}
}

func mountsAgent(c corev1.Container, readOnly bool) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == sgk8s.AgentVolume && m.MountPath == "/.sandgate" && m.ReadOnly == readOnly {
			return true
		}
	}
	return false
}

func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// TestRuntimeDirect drives the runtime package itself against the API server, for what
// the gateway's configuration does not reach: gVisor's runtime class (the gateway above
// enforces egress, which gVisor cannot carry), no sidecar without egress, and the
// Runtime contract (Inspect, List, Delete of a missing pod).
func TestRuntimeDirect(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	rt, err := sgk8s.New(ctx, sgk8s.Options{Kubeconfig: kubeconfig, Namespace: ns, AgentImage: "sandgate/agent:test", StartTimeout: time.Minute})
	if err != nil {
		t.Fatalf("new runtime: %v", err)
	}
	defer rt.Close()
	base := runtimes.Spec{
		Tenant: "team a.", Image: image, Entrypoint: []string{"sleep", "infinity"},
		AgentToken: "agent-" + randomHex(8), CreatedAt: time.Now().UTC(), CPUMillis: 100, MemoryBytes: 64 << 20,
	}

	t.Run("gVisor gets its runtime class and no sidecar", func(t *testing.T) {
		spec := base
		spec.ID = "4b0c6a6e-0000-4000-8000-" + randomHex(6)
		spec.Runtime = "runsc"
		inst, err := rt.Create(ctx, spec)
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		defer rt.Delete(ctx, spec.ID)
		if inst.State != runtimes.StateRunning || !strings.HasPrefix(inst.Address, "127.64.") || inst.AgentToken != spec.AgentToken || inst.Tenant != "team a." {
			t.Fatalf("instance = %+v", inst)
		}
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, sgk8s.PodName(spec.ID), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		assertPodSpec(t, pod, podExpectations{egress: false, cpu: "100m", memory: "64Mi", runtimeClass: "gvisor"})
		if pod.Labels[runtimes.LabelTenant] == "team a." || pod.Annotations[runtimes.LabelTenant] != "team a." {
			t.Errorf("a tenant that is no label value goes to the label as a digest and exactly to the annotation: %v %v", pod.Labels, pod.Annotations)
		}
		// The runtime reads its cache: what it says matches the API server.
		got, err := rt.Inspect(ctx, spec.ID)
		if err != nil || got.Address != pod.Status.PodIP || got.State != runtimes.StateRunning {
			t.Fatalf("inspect = %+v, %v; pod IP %s", got, err, pod.Status.PodIP)
		}
		list, err := rt.List(ctx)
		if err != nil || len(list) != 1 || list[0].ID != spec.ID || cmp.Diff(spec.Entrypoint, list[0].Entrypoint) != "" {
			t.Fatalf("list = %+v, %v", list, err)
		}
	})

	t.Run("gVisor with egress is refused", func(t *testing.T) {
		spec := base
		spec.ID = "4b0c6a6e-0000-4000-8000-" + randomHex(6)
		spec.Runtime = "runsc"
		spec.Egress = &runtimes.EgressSpec{Policy: []byte(`{"defaultAction":"deny"}`)}
		if _, err := rt.Create(ctx, spec); !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("create = %v, want ErrUnsupported", err)
		}
		if _, err := kube.CoreV1().Pods(ns).Get(ctx, sgk8s.PodName(spec.ID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a refused create left a pod: %v", err)
		}
	})

	t.Run("a pod that cannot be scheduled fails the create and is removed", func(t *testing.T) {
		short, err := sgk8s.New(ctx, sgk8s.Options{Kubeconfig: kubeconfig, Namespace: ns, StartTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer short.Close()
		spec := base
		spec.ID = "4b0c6a6e-0000-4000-8000-" + randomHex(6)
		spec.CPUMillis = 1_000_000 // a thousand CPUs: no node has them
		_, err = short.Create(ctx, spec)
		if err == nil || !strings.Contains(err.Error(), "did not run within") {
			t.Fatalf("create = %v, want a start timeout naming the reason", err)
		}
		waitFor(t, 30*time.Second, func() bool {
			_, err := kube.CoreV1().Pods(ns).Get(ctx, sgk8s.PodName(spec.ID), metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, "the unschedulable pod to be removed")
	})

	t.Run("missing sandboxes", func(t *testing.T) {
		if _, err := rt.Inspect(ctx, "4b0c6a6e-0000-4000-8000-000000000000"); !errors.Is(err, runtimes.ErrNotFound) {
			t.Fatalf("inspect missing = %v, want ErrNotFound", err)
		}
		if err := rt.Delete(ctx, "4b0c6a6e-0000-4000-8000-000000000000"); err != nil {
			t.Fatalf("delete missing = %v, want nil", err)
		}
	})
}

// TestPoolClaimWithoutAPIWrites: a pool of 200 fills; a batch of 100 is claimed from it
// while the API server's own counters show no write at all; every member answers.
func TestPoolClaimWithoutAPIWrites(t *testing.T) {
	ns := newNamespace(t)
	g := startGateway(t, ns)
	g.createPool("warm", 200, nil)

	t.Run("a pool of 200 fills", func(t *testing.T) {
		g.waitAvailable("warm", 200, 5*time.Minute)
		// A pod whose create the API server finished after the gateway gave up on it is an
		// orphan the reconciler removes; the pool itself must settle at exactly 200.
		deadline := time.Now().Add(time.Minute)
		for n := len(pods(t, ns)); n != 200; n = len(pods(t, ns)) {
			if time.Now().After(deadline) {
				var names []string
				for _, p := range pods(t, ns) {
					names = append(names, fmt.Sprintf("%s(%s,pool=%q,deleting=%v)", p.Name, p.Status.Phase, p.Labels["sandgate.io/pool"], p.DeletionTimestamp != nil))
				}
				t.Fatalf("%d pods a minute after the pool filled, want 200: %v", n, names)
			}
			time.Sleep(500 * time.Millisecond)
		}
		waitFor(t, time.Minute, func() bool { return agents.runningIn(ns) == 200 }, "200 agents")
	})

	t.Run("a batch of 100 is claimed with zero API writes", func(t *testing.T) {
		// Let the fill's last status updates land first.
		settle(t)
		before := apiWrites(t)
		t0 := time.Now()
		r := g.do("POST", "/v1/batches", map[string]any{"count": 100, "poolRef": "warm", "env": map[string]string{"CLAIMED": "yes"}})
		took := time.Since(t0)
		after := apiWrites(t)
		if r.Status != 202 {
			t.Fatalf("batch: %d %s", r.Status, r.Body)
		}
		writes, heartbeats := writesBetween(before, after)
		t.Logf("claim of 100 took %s; API writes during it: %v (heartbeats left out: %v)", took, writes, heartbeats)
		if len(writes) != 0 {
			t.Fatalf("the claim made %v Kubernetes API writes, want none", writes)
		}
		var b batch
		if err := json.Unmarshal(r.Body, &b); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, m := range b.Members {
			if m.Source != "pool" || m.Status.State != "Running" || seen[m.ID] {
				t.Fatalf("member %+v: want a distinct, running pool member", m)
			}
			seen[m.ID] = true
		}
		if len(seen) != 100 {
			t.Fatalf("%d members, want 100", len(seen))
		}
		// Every member's agent got the claim's env (late binding through the agent).
		var wg sync.WaitGroup
		errs := make(chan error, len(b.Members))
		for _, m := range b.Members {
			wg.Add(1)
			go func(id string) {
				defer wg.Done()
				out, code, err := g.command(id, `echo "$CLAIMED"`)
				if err == nil && (code != 0 || out != "yes") {
					err = fmt.Errorf("stdout %q exit %d", out, code)
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", id, err)
				}
			}(m.ID)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if n := len(pods(t, ns)); n != 200 {
			t.Fatalf("%d pods after the claim, want the same 200", n)
		}
	})
}

// settle waits until the API server has seen no sandbox-related write for a second.
func settle(t testing.TB) {
	t.Helper()
	prev := apiWrites(t)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		cur := apiWrites(t)
		if w, _ := writesBetween(prev, cur); len(w) == 0 {
			return
		}
		prev = cur
	}
	t.Fatalf("the API server kept seeing writes for a minute")
}

// TestNodeLossFailsItsSandboxes: deleting a kwok node marks the sandboxes on it Failed
// (their pods are failed and removed by the controller-manager); the others stay Running.
func TestNodeLossFailsItsSandboxes(t *testing.T) {
	ns := newNamespace(t)
	g := startGateway(t, ns)
	ids := make([]string, 6)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func(i int) { defer wg.Done(); ids[i] = g.createSandbox(map[string]any{}) }(i)
	}
	wg.Wait()
	ctx := context.Background()
	nodeOf := map[string]string{}
	for _, p := range pods(t, ns) {
		nodeOf[p.Labels[runtimes.LabelID]] = p.Spec.NodeName
	}
	victim := nodeOf[ids[0]]
	node, err := kube.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { restoreNode(t, node) })
	if err := kube.CoreV1().Nodes().Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete node %s: %v", victim, err)
	}
	var lost, kept []string
	for _, id := range ids {
		if nodeOf[id] == victim {
			lost = append(lost, id)
		} else {
			kept = append(kept, id)
		}
	}
	t.Logf("node %s held %d of %d sandboxes", victim, len(lost), len(ids))
	waitFor(t, 3*time.Minute, func() bool {
		for _, id := range lost {
			if g.state(id) != "Failed" {
				return false
			}
		}
		return true
	}, "the lost node's sandboxes to be Failed")
	for _, id := range kept {
		if st := g.state(id); st != "Running" {
			t.Errorf("sandbox %s on a healthy node is %s", id, st)
		}
	}
	r := g.do("GET", "/v1/sandboxes/"+lost[0], nil)
	t.Logf("a lost sandbox reads: %s", r.Body)
}

// restoreNode puts a deleted kwok node back (kwok adopts it by its annotation).
func restoreNode(t testing.TB, node *corev1.Node) {
	n := node.DeepCopy()
	n.ResourceVersion, n.UID, n.CreationTimestamp = "", "", metav1.Time{}
	n.Status.Conditions = nil
	if _, err := kube.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Errorf("restore node %s: %v", n.Name, err)
		return
	}
	waitFor(t, time.Minute, func() bool {
		cur, err := kube.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range cur.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}, "the restored node to be Ready")
}

// TestGatewayRestart: a gateway killed and started again on the same Redis keeps every
// sandbox (same ids, Running, commands work, the same pods); a gateway on an empty store
// adopts the cold sandboxes from their pods' labels.
func TestGatewayRestart(t *testing.T) {
	ns := newNamespace(t)
	g := startGateway(t, ns)
	g.createPool("small", 4, nil)
	var cold []string
	for i := 0; i < 3; i++ {
		cold = append(cold, g.createSandbox(map[string]any{"env": map[string]string{"N": fmt.Sprint(i)}, "timeout": 3600}))
	}
	g.waitAvailable("small", 4, 2*time.Minute)
	r := g.do("POST", "/v1/batches", map[string]any{"count": 2, "poolRef": "small"})
	if r.Status != 202 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	var b batch
	json.Unmarshal(r.Body, &b)
	all := append([]string{}, cold...)
	for _, m := range b.Members {
		all = append(all, m.ID)
	}
	sort.Strings(all)
	g.waitAvailable("small", 2, time.Minute)
	podUIDs := func() map[string]string {
		m := map[string]string{}
		for _, p := range pods(t, ns) {
			m[p.Labels[runtimes.LabelID]] = string(p.UID)
		}
		return m
	}
	uidsBefore := podUIDs()
	started := agents.started.Load()

	listed := func(g *gateway) []string {
		var ids []string
		for _, it := range g.do("GET", "/v1/sandboxes", nil).JSON(t)["items"].([]any) {
			item := it.(map[string]any)
			if item["status"].(map[string]any)["state"] != "Running" {
				t.Errorf("sandbox %v is %v", item["id"], item["status"])
			}
			ids = append(ids, item["id"].(string))
		}
		sort.Strings(ids)
		return ids
	}

	t.Run("same Redis keeps every sandbox", func(t *testing.T) {
		g.Kill()
		g.start()
		// A few sync passes of the new gateway: nothing may be marked lost or removed.
		time.Sleep(2 * time.Second)
		if diff := cmp.Diff(all, listed(g)); diff != "" {
			t.Fatalf("sandboxes after restart (-before +after):\n%s", diff)
		}
		for i, id := range cold {
			out, code, err := g.command(id, `echo "$N"`)
			if err != nil || code != 0 || out != fmt.Sprint(i) {
				t.Fatalf("command in %s after restart: %q %d %v", id, out, code, err)
			}
		}
		for _, m := range b.Members {
			if _, code, err := g.command(m.ID, "true"); err != nil || code != 0 {
				t.Fatalf("command in claimed %s after restart: %d %v", m.ID, code, err)
			}
		}
		if diff := cmp.Diff(uidsBefore, podUIDs()); diff != "" {
			t.Fatalf("pods changed across the restart (-before +after):\n%s", diff)
		}
		if n := agents.started.Load() - started; n != 0 {
			t.Fatalf("%d agents were started again", n)
		}
		if a := g.poolAvailable("small"); a != 2 {
			t.Fatalf("pool holds %d available after restart, want 2", a)
		}
	})

	t.Run("an empty store adopts from pod labels", func(t *testing.T) {
		g.Kill()
		fresh := startGateway(t, ns)
		// Cold sandboxes carry their tenant, expiry and token in the pod: adopted. Pool
		// members have no owner without the store (the Docker runtime's rule): removed.
		waitFor(t, 30*time.Second, func() bool { return cmp.Equal(sortedCopy(cold), listed(fresh)) }, "the cold sandboxes to be adopted")
		for i, id := range cold {
			out, code, err := fresh.command(id, `echo "$N"`)
			if err != nil || code != 0 || out != fmt.Sprint(i) {
				t.Fatalf("command in adopted %s: %q %d %v", id, out, code, err)
			}
		}
		r := fresh.do("GET", "/v1/sandboxes/"+cold[0], nil).JSON(t)
		if r["expiresAt"] == nil {
			t.Fatalf("adopted sandbox lost its expiry: %v", r)
		}
	})
}

func sortedCopy(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}

var _ = http.StatusOK
