package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/runtimes"
)

// realNodePoolSize is how many warm members the real node's pool holds, and how many
// one batch claims.
const realNodePoolSize = 20

// realNodePoolMember is a pool member's size: twenty of them request 1.5 CPUs and
// 1.25 GiB, which fits the real node's allocatable (its two cores, and this host's
// memory less the kubelet's 100Mi eviction threshold) with room for another test's pod.
var realNodePoolMember = map[string]string{"cpu": "75m", "memory": "64Mi"}

// TestRealNodePoolClaimWithoutAPIWrites fills a pool of 20 with real pods on the real
// node, claims all 20 in one batch while the API server's own counters show no write
// (the kubelet's node heartbeats aside), and runs a command in each claimed member
// through the gateway, which sees the env the claim gave: the claim's late binding
// reaches real containers, not only the kwok stand-ins.
func TestRealNodePoolClaimWithoutAPIWrites(t *testing.T) {
	agentImage := requireRealNode(t)
	ns := realNodeNamespace(t)
	ctx := context.Background()

	node, err := kube.CoreV1().Nodes().Get(ctx, realNode.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alloc := node.Status.Allocatable
	for kind, each := range map[corev1.ResourceName]string{corev1.ResourceCPU: realNodePoolMember["cpu"], corev1.ResourceMemory: realNodePoolMember["memory"]} {
		q := resource.MustParse(each)
		need := resource.NewMilliQuantity(q.MilliValue()*realNodePoolSize, q.Format)
		have := alloc[kind]
		if need.Cmp(have) > 0 {
			t.Fatalf("a pool of %d × %s %s needs %s, more than the real node's allocatable %s", realNodePoolSize, each, kind, need, have.String())
		}
	}
	t.Logf("real node allocatable: cpu %s, memory %s, pods %s", alloc.Cpu(), alloc.Memory(), alloc.Pods())

	g := startRealNodeGateway(t, ns, agentImage)
	t0 := time.Now()
	g.createPool("warm", realNodePoolSize, map[string]any{"resourceLimits": realNodePoolMember, "timeout": 600})
	g.waitAvailable("warm", realNodePoolSize, 4*time.Minute)
	t.Logf("a pool of %d filled on the real node in %s", realNodePoolSize, time.Since(t0).Round(time.Millisecond))

	podsBefore := map[string]string{}
	for _, p := range pods(t, ns) {
		if p.Spec.NodeName != realNode.name || p.Status.Phase != corev1.PodRunning {
			t.Fatalf("pool member pod %s on %q in phase %s, want Running on %s", p.Name, p.Spec.NodeName, p.Status.Phase, realNode.name)
		}
		podsBefore[p.Labels[runtimes.LabelID]] = string(p.UID)
	}
	if len(podsBefore) != realNodePoolSize {
		t.Fatalf("%d pods after the pool filled, want %d", len(podsBefore), realNodePoolSize)
	}

	// The kubelet's last status updates and events of the fill land first.
	settle(t)
	before := apiWrites(t)
	t1 := time.Now()
	r := g.do("POST", "/v1/batches", map[string]any{"count": realNodePoolSize, "poolRef": "warm", "env": map[string]string{"CLAIMED": "yes"}})
	took := time.Since(t1)
	after := apiWrites(t)
	if r.Status != 202 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	writes, heartbeats := writesBetween(before, after)
	t.Logf("claim of %d took %s; API writes during it: %v (heartbeats left out: %v)", realNodePoolSize, took, writes, heartbeats)
	if len(writes) != 0 {
		t.Fatalf("the claim made %v Kubernetes API writes, want none", writes)
	}
	var b batch
	if err := json.Unmarshal(r.Body, &b); err != nil {
		t.Fatal(err)
	}
	claimed := map[string]bool{}
	for _, m := range b.Members {
		if m.Source != "pool" || m.Status.State != "Running" || claimed[m.ID] || podsBefore[m.ID] == "" {
			t.Fatalf("member %+v: want a distinct, running member of the pool's pods", m)
		}
		claimed[m.ID] = true
	}
	if len(claimed) != realNodePoolSize {
		t.Fatalf("%d members, want %d", len(claimed), realNodePoolSize)
	}

	t2 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(b.Members))
	for _, m := range b.Members {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			out, code, err := g.command(id, `echo "$CLAIMED $(tr '\0' ' ' </proc/1/cmdline)"`)
			if err == nil && (code != 0 || !strings.HasPrefix(out, "yes /.sandgate/sandbox-agent init -- sleep infinity")) {
				err = fmt.Errorf("stdout %q exit %d, want the claim's env and the agent as PID 1", out, code)
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
	t.Logf("%d claimed members answered a command in %s", realNodePoolSize, time.Since(t2).Round(time.Millisecond))

	podsAfter := map[string]string{}
	for _, p := range pods(t, ns) {
		podsAfter[p.Labels[runtimes.LabelID]] = string(p.UID)
	}
	for id, uid := range podsBefore {
		if podsAfter[id] != uid {
			t.Errorf("sandbox %s: pod %s before the claim, %q after, want the same pod", id, uid, podsAfter[id])
		}
	}
}
