package k8s_test

import (
	"context"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sgk8s "github.com/sandgate/sandgate/runtimes/kubernetes"
)

// TestRealNodeEvictedPodFails evicts a sandbox's pod through the Eviction API (what a
// node drain does), behind the gateway's back: the sandbox is reported Failed with
// reason EVICTED and a message that says so, as a death on Docker is reported with
// its cause, and its calls answer SANDBOX::UNAVAILABLE.
func TestRealNodeEvictedPodFails(t *testing.T) {
	agentImage := requireRealNode(t)
	ns := realNodeNamespace(t)
	g := startRealNodeGateway(t, ns, agentImage)
	id := g.createSandbox(smallSandbox(nil))
	if _, code, err := g.command(id, "true"); err != nil || code != 0 {
		t.Fatalf("command before the eviction: exit %d, %v", code, err)
	}
	eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: sgk8s.PodName(id), Namespace: ns}}
	if err := kube.PolicyV1().Evictions(ns).Evict(context.Background(), eviction); err != nil {
		t.Fatalf("evict the sandbox's pod: %v", err)
	}
	waitFor(t, time.Minute, func() bool { return g.state(id) == "Failed" }, "the evicted sandbox to be Failed")
	status := g.do("GET", "/v1/sandboxes/"+id, nil).JSON(t)["status"].(map[string]any)
	t.Logf("status after the eviction: %v", status)
	if msg, _ := status["message"].(string); status["reason"] != "EVICTED" || !strings.Contains(msg, "evicted") {
		t.Errorf("status %v, want reason EVICTED and a message saying the pod was evicted", status)
	}
	expectUnavailable(t, g, id)
}

// TestRealNodeKubeletEvictsAPod: the kubelet's own eviction manager, not the API,
// evicts a sandbox's pod whose workload writes past the operator's bound on ephemeral
// storage (SANDGATE_K8S_EPHEMERAL_STORAGE): the kubelet fails the pod with reason
// Evicted, as it does under node pressure, and the sandbox is reported Failed with
// reason EVICTED and the kubelet's words. The agent's own directory is no way around
// the bound: the workload cannot write there.
func TestRealNodeKubeletEvictsAPod(t *testing.T) {
	agentImage := requireRealNode(t)
	ns := realNodeNamespace(t)
	g := startGateway(t, ns, "SANDGATE_K8S_AGENT_IMAGE="+agentImage, "SANDGATE_K8S_EPHEMERAL_STORAGE=32Mi")
	id := g.createSandbox(smallSandbox(nil))
	if _, code, err := g.command(id, "echo x > /.sandgate/planted"); err == nil && code == 0 {
		t.Errorf("the workload wrote into the agent's directory")
	}
	if _, code, err := g.command(id, "head -c 64M /dev/zero > /var/fill && sync"); err != nil || code != 0 {
		t.Fatalf("fill the writable layer: exit %d, %v", code, err)
	}
	// The eviction manager looks every 10 s.
	waitFor(t, 2*time.Minute, func() bool { return g.state(id) == "Failed" }, "the kubelet to evict the sandbox's pod")
	status := g.do("GET", "/v1/sandboxes/"+id, nil).JSON(t)["status"].(map[string]any)
	t.Logf("status after the eviction: %v", status)
	if msg, _ := status["message"].(string); status["reason"] != "EVICTED" || !strings.Contains(msg, "ephemeral local storage") {
		t.Errorf("status %v, want reason EVICTED and the kubelet's message about the ephemeral storage limit", status)
	}
	pod, err := kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(id), metav1.GetOptions{})
	if err == nil && pod.Status.Reason != "Evicted" {
		t.Errorf("the pod's status reason is %q, want the kubelet's Evicted", pod.Status.Reason)
	}
	expectUnavailable(t, g, id)
}
