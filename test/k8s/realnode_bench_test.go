package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/sandgate/sandgate/test/testenv"
)

// realNodeSandbox is the size of BenchmarkRealNode's single sandboxes (smallSandbox's).
var realNodeSandbox = map[string]string{"cpu": "250m", "memory": "256Mi"}

// BenchmarkRealNode: sandboxes on the real node (scripts/k8s-node.sh), each figure
// beside the raw baseline of plain pods of the same image and size created with
// client-go to Ready, on the same node in the same run:
//
//   - sandgate-cold: POST /v1/sandboxes → the first command answered through the
//     gateway (the pod scheduled, the agent copied by its init container, the enforcer
//     sidecar started and checked, the workload running; created-p50-ms: until the
//     create answered), beside raw-pod-ready: one pod of the base image to Ready;
//   - sandgate-warm: a claim from a warm pool of one → the first command answered,
//     beside the same raw-pod-ready;
//   - sandgate-batch20: POST /v1/batches of 20 from a warm pool of 20 (75m CPU and
//     64Mi each) → every member answered a command, beside raw-20-pods-ready: 20 pods
//     of that size created at once to all Ready.
//
// Between iterations every pod is removed (and the pools refill) with the timer
// stopped. The figures (bench/results.json) are realnode_cold_first_command,
// realnode_warm_first_command and realnode_batch20_answered; what they mean and the
// last measured values are in docs/PERFORMANCE.md ("Sandboxes on a real Kubernetes
// node").
func BenchmarkRealNode(b *testing.B) {
	agentImage := requireRealNode(b)
	logLoad(b, "before")
	defer logLoad(b, "after")
	var rawPod, cold, warm, rawBatch, batch20 []time.Duration

	b.Run("raw-pod-ready", func(b *testing.B) {
		ns := realNodeNamespace(b)
		rawPod = nil
		for i := 0; i < b.N; i++ {
			rawPod = append(rawPod, podsToReady(b, ns, 1, realNodeSandbox))
			b.StopTimer()
			waitRealPodsGone(b, ns)
			b.StartTimer()
		}
		reportLatencies(b, rawPod)
	})
	b.Run("sandgate-cold", func(b *testing.B) {
		ns := realNodeNamespace(b)
		g := startRealNodeGateway(b, ns, agentImage)
		cold = nil
		var created []time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			id := g.createSandbox(smallSandbox(nil))
			created = append(created, time.Since(t0))
			firstCommand(b, g, id)
			cold = append(cold, time.Since(t0))
			b.StopTimer()
			g.do("DELETE", "/v1/sandboxes/"+id, nil)
			waitRealPodsGone(b, ns)
			b.StartTimer()
		}
		reportLatencies(b, cold)
		p50, _ := testenv.Quantiles(created, time.Millisecond)
		b.ReportMetric(p50, "created-p50-ms")
	})
	b.Run("sandgate-warm", func(b *testing.B) {
		ns := realNodeNamespace(b)
		g := startRealNodeGateway(b, ns, agentImage)
		g.createPool("warm", 1, map[string]any{"resourceLimits": realNodeSandbox, "timeout": 600})
		warm = nil
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			g.waitAvailable("warm", 1, 4*time.Minute)
			b.StartTimer()
			t0 := time.Now()
			r := g.do("POST", "/v1/sandboxes", map[string]any{"extensions": map[string]string{"poolRef": "warm"}})
			if r.Status != 202 {
				b.Fatalf("claim: %d %s", r.Status, r.Body)
			}
			id := r.JSON(b)["id"].(string)
			firstCommand(b, g, id)
			warm = append(warm, time.Since(t0))
			b.StopTimer()
			g.do("DELETE", "/v1/sandboxes/"+id, nil)
			b.StartTimer()
		}
		reportLatencies(b, warm)
	})
	b.Run("raw-20-pods-ready", func(b *testing.B) {
		ns := realNodeNamespace(b)
		rawBatch = nil
		for i := 0; i < b.N; i++ {
			rawBatch = append(rawBatch, podsToReady(b, ns, realNodePoolSize, realNodePoolMember))
			b.StopTimer()
			waitRealPodsGone(b, ns)
			b.StartTimer()
		}
		reportLatencies(b, rawBatch)
	})
	b.Run("sandgate-batch20", func(b *testing.B) {
		ns := realNodeNamespace(b)
		g := startRealNodeGateway(b, ns, agentImage)
		g.createPool("batch", realNodePoolSize, map[string]any{"resourceLimits": realNodePoolMember, "timeout": 600})
		batch20 = nil
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			g.waitAvailable("batch", realNodePoolSize, 6*time.Minute)
			b.StartTimer()
			t0 := time.Now()
			r := g.do("POST", "/v1/batches", map[string]any{"count": realNodePoolSize, "poolRef": "batch"})
			if r.Status != 202 {
				b.Fatalf("batch: %d %s", r.Status, r.Body)
			}
			var bt batch
			if err := json.Unmarshal(r.Body, &bt); err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			for _, id := range memberIDs(bt) {
				wg.Add(1)
				go func() { defer wg.Done(); firstCommand(b, g, id) }()
			}
			wg.Wait()
			batch20 = append(batch20, time.Since(t0))
			b.StopTimer()
			g.do("DELETE", "/v1/batches/"+bt.ID, nil)
			b.StartTimer()
		}
		reportLatencies(b, batch20)
	})

	if len(rawPod) == 0 || len(cold) == 0 || len(warm) == 0 || len(rawBatch) == 0 || len(batch20) == 0 {
		return
	}
	rawP50, _ := testenv.Quantiles(rawPod, time.Millisecond)
	rawBatchP50, _ := testenv.Quantiles(rawBatch, time.Millisecond)
	for _, f := range []struct {
		name     string
		samples  []time.Duration
		baseline float64
		target   string
	}{
		{"realnode_cold_first_command", cold, rawP50, "<= 4000"},
		{"realnode_warm_first_command", warm, rawP50, "<= 100"},
		{"realnode_batch20_answered", batch20, rawBatchP50, "<= 1000"},
	} {
		p50, p99 := testenv.Quantiles(f.samples, time.Millisecond)
		testenv.RecordFigure(b, testenv.Figure{Name: f.name, Unit: "ms", P50: p50, P99: p99, BaselineP50: f.baseline, Target: f.target})
	}
}

// firstCommand runs `true` in a sandbox through the gateway and fails unless it
// answers exit 0. It is safe to call from any goroutine.
func firstCommand(b *testing.B, g *gateway, id string) {
	if _, code, err := g.command(id, "true"); err != nil || code != 0 {
		b.Errorf("first command in %s: exit %d, %v", id, code, err)
	}
}

// reportLatencies reports the p50 and p99 of ds in milliseconds.
func reportLatencies(b *testing.B, ds []time.Duration) {
	p50, p99 := testenv.Quantiles(ds, time.Millisecond)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
}

// logLoad logs the machine's load averages, which the real node's figures depend on.
func logLoad(b *testing.B, when string) {
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		b.Logf("load average %s: %s", when, strings.TrimSpace(string(data)))
	}
}

// podsToReady creates n plain pods of the base image (sleep infinity, the given limits
// as requests too, as the runtime sizes a workload) at once with client-go and returns
// how long until every one was Ready, as a watch of the namespace reports it.
func podsToReady(b *testing.B, ns string, n int, limits map[string]string) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	w, err := kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	res := corev1.ResourceList{}
	for k, v := range limits {
		res[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	no := false
	t0 := time.Now()
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			_, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("raw-%d-%s", i, randomHex(4))},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: &no,
					EnableServiceLinks:           &no,
					Containers: []corev1.Container{{Name: "main", Image: image, Command: []string{"sleep", "infinity"},
						ImagePullPolicy: corev1.PullIfNotPresent, Resources: corev1.ResourceRequirements{Limits: res, Requests: res}}},
				},
			}, metav1.CreateOptions{})
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			b.Fatalf("create a plain pod: %v", err)
		}
	}
	ready := map[string]bool{}
	for ev := range w.ResultChan() {
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok || ev.Type == watch.Deleted {
			continue
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready[pod.Name] = true
			}
		}
		if len(ready) == n {
			return time.Since(t0)
		}
	}
	b.Fatalf("%d of %d plain pods Ready before the watch ended", len(ready), n)
	return 0
}
