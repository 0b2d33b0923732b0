package k8s_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sgk8s "github.com/sandgate/sandgate/runtimes/kubernetes"
)

// TestRealNodeGatewayRestart kills the gateway (SIGKILL, as a crash) while sandboxes
// run as real pods, and kills one sandbox's workload container while no gateway is up.
// A gateway started again on the same store finds the survivor Running in its same pod,
// answering a command, with its enforcer's policy in force, and reports the other
// Failed with the reason a killed Docker container gets. That gateway killed too and a
// third sandbox's workload killed meanwhile, a gateway on an empty store adopts the
// survivor from its pod's labels (it answers a command through the new gateway) and
// removes the third sandbox's pod rather than adopt a dead sandbox.
func TestRealNodeGatewayRestart(t *testing.T) {
	agentImage := requireRealNode(t)
	ns := realNodeNamespace(t)
	g := startRealNodeGateway(t, ns, agentImage)
	ctx := context.Background()

	survivor := g.createSandbox(smallSandbox(map[string]any{"env": map[string]string{"WHO": "survivor"},
		"networkPolicy": map[string]any{"defaultAction": "deny"}}))
	victim := g.createSandbox(smallSandbox(nil))
	laterVictim := g.createSandbox(smallSandbox(nil))
	survivorPod, err := kube.CoreV1().Pods(ns).Get(ctx, sgk8s.PodName(survivor), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// killWhileDown kills a sandbox's workload container and waits until the kubelet
	// reports it, so that the next gateway starts with the death already done.
	killWhileDown := func(t *testing.T, id string) {
		killWorkloadContainer(t, ns, id)
		waitFor(t, time.Minute, func() bool {
			pod, err := kube.CoreV1().Pods(ns).Get(ctx, sgk8s.PodName(id), metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, st := range pod.Status.ContainerStatuses {
				if st.Name == sgk8s.WorkloadContainer && st.State.Terminated != nil {
					return true
				}
			}
			return false
		}, "the kubelet to report the killed workload container")
	}
	g.Kill()
	killWhileDown(t, victim)
	g.start()

	t.Run("same store", func(t *testing.T) {
		out, code, err := g.command(survivor, `echo "$WHO"`)
		if err != nil || code != 0 || out != "survivor" {
			t.Fatalf("command in the survivor after the restart: %q exit %d %v", out, code, err)
		}
		waitFor(t, time.Minute, func() bool { return g.state(victim) == "Failed" }, "the sandbox killed while no gateway ran to be Failed")
		status := g.do("GET", "/v1/sandboxes/"+victim, nil).JSON(t)["status"].(map[string]any)
		if status["reason"] != "EXITED" {
			t.Errorf("victim status %v, want reason EXITED", status)
		}
		if st := g.state(survivor); st != "Running" {
			t.Errorf("survivor is %s after the restart, want Running", st)
		}
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, sgk8s.PodName(survivor), metav1.GetOptions{})
		if err != nil || pod.UID != survivorPod.UID || pod.Status.Phase != corev1.PodRunning {
			t.Fatalf("survivor's pod after the restart: %v, want the same Running pod %s", err, survivorPod.UID)
		}
		code, body := egressPolicy(t, g, survivor)
		if code != 200 || !strings.Contains(string(body), `"defaultAction":"deny"`) {
			t.Errorf("survivor's egress policy after the restart: %d %s, want deny", code, body)
		}
	})

	t.Run("empty store adopts from pod labels", func(t *testing.T) {
		if st := g.state(laterVictim); st != "Running" {
			t.Fatalf("the second victim is %s before its kill, want Running", st)
		}
		g.Kill()
		killWhileDown(t, laterVictim)
		fresh := startRealNodeGateway(t, ns, agentImage)
		waitFor(t, 30*time.Second, func() bool { return fresh.state(survivor) == "Running" }, "the survivor to be adopted")
		out, code, err := fresh.command(survivor, `echo "$WHO"`)
		if err != nil || code != 0 || out != "survivor" {
			t.Fatalf("command in the adopted survivor: %q exit %d %v", out, code, err)
		}
		// A pod whose workload is dead is no sandbox to adopt: it is removed.
		waitFor(t, time.Minute, func() bool {
			_, err := kube.CoreV1().Pods(ns).Get(ctx, sgk8s.PodName(laterVictim), metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, "the dead sandbox's pod to be removed")
		if r := fresh.do("GET", "/v1/sandboxes/"+laterVictim, nil); r.Status != 404 {
			t.Errorf("the dead sandbox on the empty store: %d %s, want 404", r.Status, r.Body)
		}
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, sgk8s.PodName(survivor), metav1.GetOptions{})
		if err != nil || pod.UID != survivorPod.UID {
			t.Fatalf("survivor's pod after adoption: %v, want the same pod %s", err, survivorPod.UID)
		}
	})
}
