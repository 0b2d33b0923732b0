package k8s_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/runtimes"
	sgk8s "github.com/sandgate/sandgate/runtimes/kubernetes"
)

// realNode is the cluster's one real node (scripts/k8s-node.sh): a kubelet on a
// containerd of its own, so its sandbox pods run as real containers. It carries the
// label and taint sandgate.io/node=real; a namespace from realNodeNamespace puts its
// pods there and nowhere else, and no other test's pod lands on it.
var realNode struct {
	skip   string // why this machine has no real node; empty when it has one
	name   string
	hostIP string // this host's address on the node's bridge, where pods reach it
	// containerd is the socket of the node's own containerd.
	containerd string
	script     string
	state      string

	loadOnce   sync.Once
	loadErr    error
	agentImage string
}

// realNodePrereqs asks scripts/k8s.sh what this machine lacks for a real node.
func realNodePrereqs(script string) (string, error) {
	out, err := exec.Command(script, "node-prereqs").Output()
	if err != nil {
		return "", fmt.Errorf("k8s.sh node-prereqs: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// readRealNodeEnv fills realNode from STATE/env, which `k8s.sh up --node` wrote.
func readRealNodeEnv(script, state string) error {
	f, err := os.Open(filepath.Join(state, "env"))
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "NODE_NAME":
			realNode.name = v
		case "NODE_HOST_IP":
			realNode.hostIP = v
		case "NODE_CONTAINERD":
			realNode.containerd = v
		}
	}
	if realNode.name == "" || realNode.hostIP == "" {
		return fmt.Errorf("%s/env names no real node", state)
	}
	realNode.script, realNode.state = script, state
	return nil
}

// removeRealNodeImages removes the agent image the tests imported into Docker to copy
// it into the node (the node's own copy goes with its state directory).
func removeRealNodeImages() {
	if realNode.agentImage != "" {
		_ = exec.Command("docker", "rmi", "-f", realNode.agentImage).Run()
	}
}

// requireRealNode skips a test on a machine without a real node, saying why, and loads
// the images sandbox pods name into the node once per run: the base image and an agent
// image made from the sandbox-agent under test. It returns the agent image.
func requireRealNode(t testing.TB) string {
	t.Helper()
	if realNode.skip != "" {
		t.Skipf("no real node on this machine: %s", realNode.skip)
	}
	realNode.loadOnce.Do(func() {
		t0 := time.Now()
		tag := "k8s-test-" + randomHex(6)
		out, err := exec.Command(filepath.Join(repoRoot, "images", "agent.sh"), tag, filepath.Join(binDir, "sandbox-agent")).CombinedOutput()
		if err != nil {
			realNode.loadErr = fmt.Errorf("images/agent.sh: %v\n%s", err, out)
			return
		}
		realNode.agentImage = "sandgate/agent:" + tag
		if out, err := exec.Command(realNode.script, "load", realNode.state, image, realNode.agentImage).CombinedOutput(); err != nil {
			realNode.loadErr = fmt.Errorf("k8s.sh load: %v\n%s", err, out)
			return
		}
		fmt.Fprintf(os.Stderr, "test/k8s: images loaded into the real node in %s\n", time.Since(t0).Round(time.Millisecond))
	})
	if realNode.loadErr != nil {
		t.Fatal(realNode.loadErr)
	}
	return realNode.agentImage
}

// realNodeNamespace is newNamespace for pods that must run on the real node: the
// apiserver's PodNodeSelector and PodTolerationRestriction plugins give every pod of
// the namespace the node's selector and toleration, as a cluster admin would for a
// dedicated node pool, so the runtime's pods need nothing of their own.
func realNodeNamespace(t testing.TB) string {
	t.Helper()
	ns := newNamespace(t)
	ctx := context.Background()
	obj, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	obj.Annotations["scheduler.alpha.kubernetes.io/node-selector"] = "sandgate.io/node=real"
	obj.Annotations["scheduler.alpha.kubernetes.io/defaultTolerations"] = `[{"key":"sandgate.io/node","operator":"Equal","value":"real","effect":"NoSchedule"}]`
	if _, err := kube.CoreV1().Namespaces().Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("annotate namespace %s for the real node: %v", ns, err)
	}
	// Pods are deleted with their namespace; the real kubelet takes a moment to stop
	// their containers, which the namespace's cleanup waits for.
	t.Cleanup(func() { waitRealPodsGone(t, ns) })
	return ns
}

// waitRealPodsGone waits until no pod of namespace is left on the real node.
func waitRealPodsGone(t testing.TB, ns string) {
	zero := int64(0)
	ctx := context.Background()
	_ = kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("pods of namespace %s still exist on the real node after 2m", ns)
}

// startRealNodeGateway starts a gateway whose sandboxes copy the agent under test.
func startRealNodeGateway(t testing.TB, ns, agentImage string) *gateway {
	t.Helper()
	return startGateway(t, ns, "SANDGATE_K8S_AGENT_IMAGE="+agentImage)
}

// smallSandbox is a create request sized for a two-core node.
func smallSandbox(extra map[string]any) map[string]any {
	req := map[string]any{"resourceLimits": map[string]string{"cpu": "250m", "memory": "256Mi"}, "timeout": 600}
	for k, v := range extra {
		req[k] = v
	}
	return req
}

// TestRealNodeLifecycle creates a sandbox on the real node and works in it through the
// gateway: its pod runs there with the agent the init container copied, commands run,
// files go in and come out, a terminal answers over its WebSocket, and deleting it
// removes the pod.
func TestRealNodeLifecycle(t *testing.T) {
	agentImage := requireRealNode(t)
	ns := realNodeNamespace(t)
	g := startRealNodeGateway(t, ns, agentImage)

	t0 := time.Now()
	id := g.createSandbox(smallSandbox(map[string]any{"env": map[string]string{"GREETING": "hello from a real node"}}))
	t.Logf("create → Running: %s", time.Since(t0).Round(time.Millisecond))

	pod, err := kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != realNode.name || pod.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod on %q in phase %s, want Running on %s", pod.Spec.NodeName, pod.Status.Phase, realNode.name)
	}
	for _, st := range pod.Status.InitContainerStatuses {
		if st.Name == sgk8s.InstallContainer && (st.State.Terminated == nil || st.State.Terminated.ExitCode != 0) {
			t.Errorf("init container %s: %+v, want exited 0", st.Name, st.State)
		}
	}

	t.Run("commands", func(t *testing.T) {
		out, code, err := g.command(id, `echo "$GREETING"; cat /proc/1/cmdline | tr '\0' ' '; hostname`)
		if err != nil || code != 0 {
			t.Fatalf("command: exit %d, %v", code, err)
		}
		if !strings.Contains(out, "hello from a real node") || !strings.Contains(out, "/.sandgate/sandbox-agent init") {
			t.Errorf("output %q lacks the env value or the agent as PID 1", out)
		}
		if _, code, err := g.command(id, "exit 7"); err != nil || code != 7 {
			t.Errorf("exit 7: code %d, %v", code, err)
		}
	})

	t.Run("the node's resolver is its own", func(t *testing.T) {
		// Without cluster DNS the kubelet hands a pod its resolvConf: the node's file,
		// naming the host's bridge address, never the host's own resolver.
		out, code, err := g.command(id, `grep '^nameserver' /etc/resolv.conf`)
		if err != nil || code != 0 {
			t.Fatalf("resolv.conf: exit %d, %v", code, err)
		}
		if got := strings.Fields(strings.TrimSpace(out)); len(got) != 2 || got[1] != realNode.hostIP {
			t.Fatalf("the pod's nameservers: %q, want only %s", out, realNode.hostIP)
		}
	})

	t.Run("files", func(t *testing.T) {
		base, headers, err := g.endpoint(id)
		if err != nil {
			t.Fatal(err)
		}
		content := "written on the real node " + randomHex(8)
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
		h.Set("Content-Type", "application/json")
		meta, _ := mw.CreatePart(h)
		io.WriteString(meta, `{"path":"/tmp/realnode/greeting.txt"}`)
		fw, _ := mw.CreateFormFile("file", "blob")
		io.WriteString(fw, content)
		mw.Close()
		resp := agentRequest(t, g, "POST", base+"/files/upload", headers, mw.FormDataContentType(), &buf)
		if resp.status != 200 {
			t.Fatalf("upload: %d %s", resp.status, resp.body)
		}
		out, code, err := g.command(id, "cat /tmp/realnode/greeting.txt")
		if err != nil || code != 0 || out != content {
			t.Fatalf("cat: %q exit %d %v, want %q", out, code, err, content)
		}
		if _, code, err := g.command(id, "echo made-by-a-command > /tmp/realnode/back.txt"); err != nil || code != 0 {
			t.Fatalf("write: exit %d %v", code, err)
		}
		resp = agentRequest(t, g, "GET", base+"/files/download?path="+url.QueryEscape("/tmp/realnode/back.txt"), headers, "", nil)
		if resp.status != 200 || strings.TrimSpace(resp.body) != "made-by-a-command" {
			t.Fatalf("download: %d %q", resp.status, resp.body)
		}
	})

	t.Run("pty", func(t *testing.T) {
		base, headers, err := g.endpoint(id)
		if err != nil {
			t.Fatal(err)
		}
		r := agentRequest(t, g, "POST", base+"/pty", headers, "application/json", strings.NewReader(`{"cwd":"/tmp"}`))
		var created struct {
			SessionID string `json:"session_id"`
		}
		if err := json.Unmarshal([]byte(r.body), &created); r.status != 200 || err != nil || created.SessionID == "" {
			t.Fatalf("create pty: %d %s", r.status, r.body)
		}
		t.Cleanup(func() { agentRequest(t, g, "DELETE", base+"/pty/"+created.SessionID, headers, "", nil) })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		h := http.Header{}
		for k, v := range headers {
			h.Set(k, v)
		}
		conn, _, err := websocket.Dial(ctx, "ws://"+strings.TrimPrefix(base, "http://")+"/pty/"+created.SessionID+"/ws", &websocket.DialOptions{HTTPHeader: h})
		if err != nil {
			t.Fatalf("pty WebSocket: %v", err)
		}
		defer conn.CloseNow()
		// Input frames start with 0x00; output frames with 0x01 or 0x02 (stdout, stderr)
		// or 0x03 and an 8-byte offset (replay).
		if err := conn.Write(ctx, websocket.MessageBinary, append([]byte{0x00}, "echo pty-$((6*7))\r"...)); err != nil {
			t.Fatalf("pty write: %v", err)
		}
		var out strings.Builder
		for !strings.Contains(out.String(), "pty-42\r\n") {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				t.Fatalf("pty read: %v; output so far %q", err, out.String())
			}
			switch {
			case typ != websocket.MessageBinary || len(data) == 0:
			case data[0] == 0x01 || data[0] == 0x02:
				out.Write(data[1:])
			case data[0] == 0x03 && len(data) >= 9:
				out.Write(data[9:])
			}
		}
	})

	t.Run("usage comes from the pod's cgroup", func(t *testing.T) {
		checkUsageFromCgroup(t, g, id)
	})

	t.Run("pause freezes the workload and resume thaws it", func(t *testing.T) {
		checkPauseFreezes(t, g, ns, id)
	})

	t.Run("delete", func(t *testing.T) {
		if r := g.do("DELETE", "/v1/sandboxes/"+id, nil); r.Status != 204 && r.Status != 200 {
			t.Fatalf("delete: %d %s", r.Status, r.Body)
		}
		waitFor(t, 2*time.Minute, func() bool {
			_, err := kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(id), metav1.GetOptions{})
			return err != nil
		}, "the sandbox's pod to be gone from the real node")
	})
}

// TestRealNodeEgress runs the enforcer sidecar for real, in the pods' own network
// namespaces. Under default deny a workload reaches neither a server this test runs on
// the host's bridge address (the host is denied to every sandbox, whatever its policy)
// nor another sandbox; with that sandbox's address allowed, it reaches it. Every address
// involved is this host's or a pod's on the node's bridge.
func TestRealNodeEgress(t *testing.T) {
	agentImage := requireRealNode(t)
	ns := realNodeNamespace(t)
	g := startRealNodeGateway(t, ns, agentImage)

	ln, err := net.Listen("tcp", net.JoinHostPort(realNode.hostIP, "0"))
	if err != nil {
		t.Fatalf("listen on the node's bridge address: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "reached") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	fetch := func(u string) string {
		return "curl -s -o /dev/null -w '%{http_code}' --connect-timeout 3 --max-time 5 " + u + " || true"
	}

	// The target's agent answers any HTTP request (401 without a signature): an answer
	// of any status is a connection made.
	target := g.createSandbox(smallSandbox(nil))
	targetPod, err := kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(target), metav1.GetOptions{})
	if err != nil || targetPod.Status.PodIP == "" {
		t.Fatalf("the target's pod IP: %v", err)
	}
	targetURL := fmt.Sprintf("http://%s:%d/ping", targetPod.Status.PodIP, runtimes.AgentPort)
	hostURL := "http://" + ln.Addr().String() + "/"

	var denied, allowed string
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		denied = g.createSandbox(smallSandbox(map[string]any{"networkPolicy": map[string]any{"defaultAction": "deny"}}))
	}()
	go func() {
		defer wg.Done()
		allowed = g.createSandbox(smallSandbox(map[string]any{"networkPolicy": map[string]any{"defaultAction": "deny",
			"egress": []map[string]string{{"action": "allow", "target": targetPod.Status.PodIP}}}}))
	}()
	wg.Wait()
	if t.Failed() {
		return
	}

	for _, tc := range []struct {
		name, sandbox, url string
		reach              bool
	}{
		{"allowed sandbox reaches the allowed pod", allowed, targetURL, true},
		{"denied sandbox does not reach that pod", denied, targetURL, false},
		{"denied sandbox does not reach the host", denied, hostURL, false},
		{"allowed sandbox does not reach the host", allowed, hostURL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := g.command(tc.sandbox, fetch(tc.url))
			if err != nil {
				t.Fatal(err)
			}
			if reached := out != "000"; reached != tc.reach {
				t.Errorf("%s: HTTP status %q, want reached=%v", tc.url, out, tc.reach)
			}
		})
	}
	// The rules live in the pods' network namespaces, not the host's.
	if out, err := exec.Command("nft", "list", "tables").Output(); err == nil && strings.Contains(string(out), "sandgate_egress") {
		t.Errorf("the host's nftables holds a sandgate_egress table:\n%s", out)
	}
}

// TestRealNodeKilledContainerFails kills a sandbox's workload container behind the
// gateway's back, through the node's containerd: the sandbox is reported Failed with
// the reason a killed Docker container gets, and its calls answer SANDBOX::UNAVAILABLE.
func TestRealNodeKilledContainerFails(t *testing.T) {
	agentImage := requireRealNode(t)
	ns := realNodeNamespace(t)
	g := startRealNodeGateway(t, ns, agentImage)
	id := g.createSandbox(smallSandbox(nil))
	if _, code, err := g.command(id, "true"); err != nil || code != 0 {
		t.Fatalf("command before the kill: exit %d, %v", code, err)
	}
	killWorkloadContainer(t, ns, id)
	waitFor(t, time.Minute, func() bool { return g.state(id) == "Failed" }, "the killed sandbox to be Failed")
	status := g.do("GET", "/v1/sandboxes/"+id, nil).JSON(t)["status"].(map[string]any)
	if status["reason"] != "EXITED" {
		t.Errorf("status %v, want reason EXITED", status)
	}
	expectUnavailable(t, g, id)
}

// expectUnavailable checks that a call to a Failed sandbox's agent answers
// SANDBOX::UNAVAILABLE (or that its endpoint already does).
func expectUnavailable(t *testing.T, g *gateway, id string) {
	t.Helper()
	base, headers, err := g.endpoint(id)
	if err != nil {
		// The endpoint itself may already answer that the sandbox is unavailable.
		if !strings.Contains(err.Error(), "SANDBOX::UNAVAILABLE") {
			t.Fatalf("endpoint of the failed sandbox: %v", err)
		}
		return
	}
	r := agentRequest(t, g, "POST", base+"/command", headers, "application/json", strings.NewReader(`{"command":"true"}`))
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "SANDBOX::UNAVAILABLE") {
		t.Errorf("call after the death: %d %s, want 503 SANDBOX::UNAVAILABLE", r.status, r.body)
	}
}

// killWorkloadContainer kills a sandbox's workload container with SIGKILL through the
// real node's containerd, behind the kubelet's and the gateway's backs.
func killWorkloadContainer(t *testing.T, ns, id string) {
	t.Helper()
	pod, err := kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var containerID string
	for _, st := range pod.Status.ContainerStatuses {
		if st.Name == sgk8s.WorkloadContainer {
			_, containerID, _ = strings.Cut(st.ContainerID, "://")
		}
	}
	if containerID == "" {
		t.Fatalf("no container ID for %s in %+v", sgk8s.WorkloadContainer, pod.Status.ContainerStatuses)
	}
	if out, err := exec.Command("ctr", "-a", realNode.containerd, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", containerID).CombinedOutput(); err != nil {
		t.Fatalf("ctr tasks kill: %v: %s", err, out)
	}
}

// agentAnswer is one response from a sandbox's agent.
type agentAnswer struct {
	status int
	body   string
}

// agentRequest sends one request to a sandbox's agent through the gateway's proxy with
// the endpoint's headers.
func agentRequest(t *testing.T, g *gateway, method, u string, headers map[string]string, contentType string, body io.Reader) agentAnswer {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return agentAnswer{status: resp.StatusCode, body: string(data)}
}
