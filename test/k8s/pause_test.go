package k8s_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sgk8s "github.com/sandgate/sandgate/runtimes/kubernetes"
)

// pauseHold is how long checkPauseFreezes keeps a sandbox paused.
const pauseHold = 1500 * time.Millisecond

// checkPauseFreezes pauses a running sandbox through the API and resumes it: while it
// is paused its pod carries the pause mark and its workload does not run (a loop that
// notes the time every 50 ms leaves a gap as long as the pause), and after the resume it
// runs again and answers commands.
func checkPauseFreezes(t *testing.T, g *gateway, ns, id string) {
	t.Helper()
	// The loop notes the machine's uptime (seconds, to the hundredth) in $HOME/ticks.
	if _, code, err := g.command(id, `nohup sh -c 'while :; do cut -d" " -f1 /proc/uptime >> "$HOME/ticks"; sleep 0.05; done' >/dev/null 2>&1 &`); err != nil || code != 0 {
		t.Fatalf("start the ticking loop: exit %d, %v", code, err)
	}
	waitFor(t, 30*time.Second, func() bool {
		out, _, err := g.command(id, `wc -l < "$HOME/ticks"`)
		n, _ := strconv.Atoi(strings.TrimSpace(out))
		return err == nil && n >= 3
	}, "the loop to tick")

	if r := g.do("POST", "/v1/sandboxes/"+id+"/pause", nil); r.Status/100 != 2 {
		t.Fatalf("pause: %d %s", r.Status, r.Body)
	}
	if st := g.state(id); st != "Paused" {
		t.Fatalf("state after the pause = %s, want Paused", st)
	}
	pod, err := kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Annotations["sandgate.io/paused"] != "true" {
		t.Fatalf("the paused sandbox's pod lacks the pause mark: %v", pod.Annotations)
	}
	if r := g.do("POST", "/v1/sandboxes/"+id+"/pause", nil); r.Status != 409 {
		t.Fatalf("a second pause: %d %s, want 409", r.Status, r.Body)
	}
	time.Sleep(pauseHold)
	if r := g.do("POST", "/v1/sandboxes/"+id+"/resume", nil); r.Status/100 != 2 {
		t.Fatalf("resume: %d %s", r.Status, r.Body)
	}
	if st := g.state(id); st != "Running" {
		t.Fatalf("state after the resume = %s, want Running", st)
	}
	pod, err = kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, marked := pod.Annotations["sandgate.io/paused"]; marked {
		t.Fatalf("the resumed sandbox's pod keeps the pause mark: %v", pod.Annotations)
	}
	var ticks []float64
	waitFor(t, 30*time.Second, func() bool {
		out, code, err := g.command(id, `cat "$HOME/ticks"`)
		if err != nil || code != 0 {
			return false
		}
		ticks = ticks[:0]
		for _, f := range strings.Fields(out) {
			if v, err := strconv.ParseFloat(f, 64); err == nil {
				ticks = append(ticks, v)
			}
		}
		// Ticking again: some ticks after the longest gap.
		gapAt := longestGap(ticks)
		return gapAt > 0 && len(ticks)-gapAt >= 3
	}, "the loop to tick again after the resume")
	i := longestGap(ticks)
	if gap := ticks[i] - ticks[i-1]; gap < pauseHold.Seconds()*0.8 {
		t.Fatalf("the longest pause in the loop's ticks is %.2f s; the sandbox was paused for %s", gap, pauseHold)
	}
}

// longestGap returns the index i for which ticks[i]-ticks[i-1] is largest (0 when
// there are fewer than two ticks).
func longestGap(ticks []float64) int {
	best, at := -1.0, 0
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i] - ticks[i-1]; d > best {
			best, at = d, i
		}
	}
	return at
}

// TestIdlePause: on Kubernetes too, a sandbox with extensions idle.pause.seconds pauses
// after that long without traffic (its agent freezes the workload, its pod carries the
// pause mark), and the next agent call resumes it and succeeds.
func TestIdlePause(t *testing.T) {
	ns := newNamespace(t)
	g := startGateway(t, ns)
	id := g.createSandbox(map[string]any{"timeout": 600, "extensions": map[string]string{"idle.pause.seconds": "2"}})
	if _, code, err := g.command(id, `echo kept > "$HOME/kept"`); err != nil || code != 0 {
		t.Fatalf("write: exit %d, %v", code, err)
	}
	waitFor(t, time.Minute, func() bool {
		st, _ := g.do("GET", "/v1/sandboxes/"+id, nil).JSON(t)["status"].(map[string]any)
		return st["state"] == "Paused" && st["reason"] == "idle"
	}, "the sandbox to pause for idleness")
	pod, err := kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Annotations["sandgate.io/paused"] != "true" {
		t.Fatalf("the idle-paused sandbox's pod lacks the pause mark: %v", pod.Annotations)
	}
	out, code, err := g.command(id, `cat "$HOME/kept"`)
	if err != nil || code != 0 || out != "kept" {
		t.Fatalf("the first command after the idle pause: %q, exit %d, %v", out, code, err)
	}
	if st := g.state(id); st != "Running" {
		t.Fatalf("state after the waking command = %s", st)
	}
}

// checkUsageFromCgroup reads a smallSandbox's resource use through the gateway (GET
// /v1/sandboxes/{id}/metrics): the Kubernetes runtime has no engine reading, so the
// agent reads its container's cgroup, and the limits are the pod's (250m, 256Mi); a
// busy loop in the sandbox shows as CPU time.
func checkUsageFromCgroup(t *testing.T, g *gateway, id string) {
	t.Helper()
	type point struct {
		CPUCores         float64  `json:"cpuCores"`
		CPULimitCores    *float64 `json:"cpuLimitCores"`
		MemoryBytes      uint64   `json:"memoryBytes"`
		MemoryLimitBytes uint64   `json:"memoryLimitBytes"`
	}
	var usage struct {
		Source  string  `json:"source"`
		Current *point  `json:"current"`
		History []point `json:"history"`
	}
	read := func() bool {
		r := g.do("GET", "/v1/sandboxes/"+id+"/metrics", nil)
		if r.Status != 200 {
			t.Fatalf("usage: %d %s", r.Status, r.Body)
		}
		if err := json.Unmarshal(r.Body, &usage); err != nil {
			t.Fatal(err)
		}
		return usage.Current != nil
	}
	waitFor(t, 30*time.Second, read, "a first usage reading")
	cur := usage.Current
	if usage.Source != "agent" || cur.MemoryLimitBytes != 256<<20 || cur.CPULimitCores == nil || *cur.CPULimitCores != 0.25 {
		t.Fatalf("usage source %q, memory limit %d, CPU limit %v: want the agent's reading of the pod's 256Mi and 250m", usage.Source, cur.MemoryLimitBytes, cur.CPULimitCores)
	}
	if cur.MemoryBytes == 0 || cur.MemoryBytes >= cur.MemoryLimitBytes {
		t.Fatalf("memory in use %d, want above 0 and under the limit", cur.MemoryBytes)
	}
	if _, code, err := g.command(id, `nohup timeout 12 sh -c 'while :; do :; done' >/dev/null 2>&1 &`); err != nil || code != 0 {
		t.Fatalf("start a busy loop: exit %d, %v", code, err)
	}
	waitFor(t, 40*time.Second, func() bool { return read() && usage.Current.CPUCores > 0.1 }, "the busy loop's CPU time in a reading")
}
