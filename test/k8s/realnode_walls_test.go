package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/runtimes"
	sgk8s "github.com/sandgate/sandgate/runtimes/kubernetes"
)

// hostileEnforcerVars are what the tenant's image sets for an enforcer that would take
// its environment from it: none may reach the real one.
var hostileEnforcerVars = []string{"LD_PRELOAD", "SANDGATE_EGRESS_UPSTREAM", "SANDGATE_HOSTILE"}

// allowAllState is the state file the tenant's image plants where the enforcer keeps the
// policy in force.
const allowAllState = `{"policy":{"defaultAction":"allow","egress":[]}}`

// buildHostileTenantImage builds, from the base image, what a tenant who wants its
// enforcer for itself brings: an allow-all state file where the enforcer keeps its
// policy, a /bin/sh that plants it again each time it runs, and ENV meant for the
// enforcer. It loads the image into the real node as requireRealNode loads the others,
// and returns its tag; the Docker copy goes when the test ends, the node's with its
// state directory.
func buildHostileTenantImage(t *testing.T) string {
	t.Helper()
	tag := "sandgate-test/hostile-tenant:" + randomHex(4)
	dir := t.TempDir()
	dockerfile := `FROM ` + image + `
RUN cp /bin/sh /bin/sh.real && mkdir -p /var/lib/sandgate-egress \
 && printf '` + allowAllState + `' > /var/lib/sandgate-egress/policy.json \
 && rm /bin/sh \
 && printf '#!/bin/sh.real\nmkdir -p /var/lib/sandgate-egress\nprintf %%s '"'"'` + allowAllState + `'"'"' > /var/lib/sandgate-egress/policy.json\nexec /bin/sh.real "$@"\n' > /bin/sh \
 && chmod 755 /bin/sh
ENV LD_PRELOAD=/nonexistent.so SANDGATE_EGRESS_UPSTREAM=` + realNode.hostIP + `:53 SANDGATE_HOSTILE=1
`
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("docker", "build", "-q", "-t", tag, dir)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })
	if out, err := exec.Command(realNode.script, "load", realNode.state, tag).CombinedOutput(); err != nil {
		t.Fatalf("k8s.sh load: %v\n%s", err, out)
	}
	return tag
}

// TestRealNodeEnforcerOwesNothingToTheImage attacks a sandbox's enforcer through the
// tenant's image on the real node: a deny-all sandbox of an image that plants an
// allow-all state file, replaces /bin/sh and sets LD_PRELOAD and
// SANDGATE_EGRESS_UPSTREAM still reaches neither another pod (which the same image with
// that pod allowed does reach, so the path exists) nor a server on the host's bridge
// address; its enforcer runs from the agent image with no shell, holds in its process
// environment only what the runtime wrote in the pod (and what the kubelet adds to every
// container), keeps a deny-all state of its own, and the gateway's GET of the egress
// policy says deny.
func TestRealNodeEnforcerOwesNothingToTheImage(t *testing.T) {
	agentImage := requireRealNode(t)
	hostile := buildHostileTenantImage(t)
	ns := realNodeNamespace(t)
	g := startRealNodeGateway(t, ns, agentImage)

	ln, err := net.Listen("tcp", net.JoinHostPort(realNode.hostIP, "0"))
	if err != nil {
		t.Fatalf("listen on the node's bridge address: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "reached") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	// Any HTTP answer of the target's agent (401 without a signature) is a connection made.
	target := g.createSandbox(smallSandbox(nil))
	targetPod, err := kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(target), metav1.GetOptions{})
	if err != nil || targetPod.Status.PodIP == "" {
		t.Fatalf("the target's pod IP: %v", err)
	}
	targetURL := fmt.Sprintf("http://%s:%d/ping", targetPod.Status.PodIP, runtimes.AgentPort)
	hostURL := "http://" + ln.Addr().String() + "/"

	denied := g.createSandbox(smallSandbox(map[string]any{"image": map[string]any{"uri": hostile},
		"networkPolicy": map[string]any{"defaultAction": "deny"}}))
	allowed := g.createSandbox(smallSandbox(map[string]any{"image": map[string]any{"uri": hostile},
		"networkPolicy": map[string]any{"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": targetPod.Status.PodIP}}}}))

	fetch := func(u string) string {
		return "curl -s -o /dev/null -w '%{http_code}' --connect-timeout 3 --max-time 5 " + u + " || true"
	}
	for _, tc := range []struct {
		name, sandbox, url string
		reach              bool
	}{
		{"the hostile image with the target allowed reaches it", allowed, targetURL, true},
		{"the deny-all hostile sandbox does not reach the target", denied, targetURL, false},
		{"the deny-all hostile sandbox does not reach the host", denied, hostURL, false},
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

	t.Run("the gateway's egress policy says deny", func(t *testing.T) {
		status, body := egressPolicy(t, g, denied)
		var answer struct {
			Policy struct {
				DefaultAction string            `json:"defaultAction"`
				Egress        []json.RawMessage `json:"egress"`
			} `json:"policy"`
		}
		if err := json.Unmarshal(body, &answer); status != http.StatusOK || err != nil {
			t.Fatalf("GET egress policy: %d %s", status, body)
		}
		if answer.Policy.DefaultAction != "deny" || len(answer.Policy.Egress) != 0 {
			t.Fatalf("GET egress policy of a deny-all sandbox of the hostile image: %s", body)
		}
	})

	t.Run("the enforcer runs from the agent image with the runtime's environment", func(t *testing.T) {
		pod, err := kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(denied), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var sidecar *corev1.Container
		for i := range pod.Spec.InitContainers {
			if pod.Spec.InitContainers[i].Name == sgk8s.EgressContainer {
				sidecar = &pod.Spec.InitContainers[i]
			}
		}
		if sidecar == nil {
			t.Fatalf("the pod has no %s container", sgk8s.EgressContainer)
		}
		if sidecar.Image != agentImage {
			t.Errorf("the enforcer runs from image %q, not the agent image %q", sidecar.Image, agentImage)
		}
		written := map[string]string{}
		for _, e := range sidecar.Env {
			if e.ValueFrom != nil {
				t.Errorf("the enforcer's %s comes from %+v, not from the runtime", e.Name, e.ValueFrom)
			}
			written[e.Name] = sgk8s.Unescape(e.Value)
		}
		if len(written) != 2 || written[sgk8s.EnvEgressToken] == "" || written[sgk8s.EnvEgressPolicy] == "" {
			t.Errorf("the pod writes the enforcer the variables %v, want %s and %s only", keysOf(written), sgk8s.EnvEgressToken, sgk8s.EnvEgressPolicy)
		}

		root := enforcerProcRoot(t, pod)
		environ, err := os.ReadFile(filepath.Join(root, "environ"))
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range bytes.Split(bytes.TrimRight(environ, "\x00"), []byte{0}) {
			name, value, _ := strings.Cut(string(kv), "=")
			switch {
			case written[name] != "":
				if value != written[name] {
					t.Errorf("the enforcer's %s is not the value the pod wrote", name)
				}
			case kubeletAdds(name):
			default:
				t.Errorf("the enforcer's process environment holds %s, which the runtime did not write", name)
			}
			for _, h := range hostileEnforcerVars {
				if name == h {
					t.Errorf("the enforcer's process environment holds the image's %s", kv)
				}
			}
		}
		if _, err := os.Lstat(filepath.Join(root, "root", "bin", "sh")); err == nil {
			t.Error("the enforcer's filesystem has a /bin/sh")
		}
		state, err := os.ReadFile(filepath.Join(root, "root", "var", "lib", "sandgate-egress", "policy.json"))
		if err != nil {
			t.Fatalf("the enforcer's state file: %v", err)
		}
		if strings.Contains(string(state), `"allow"`) || !strings.Contains(string(state), `"deny"`) {
			t.Errorf("the enforcer's state file holds %s", state)
		}
	})
}

// kubeletAdds reports whether the kubelet or the container runtime gives a variable of
// this name to every container, whatever the pod says.
func kubeletAdds(name string) bool {
	return name == "PATH" || name == "HOSTNAME" || name == "HOME" || strings.HasPrefix(name, "KUBERNETES_")
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// enforcerProcRoot returns /proc/<pid> of the enforcer's main process, found through the
// real node's containerd by the container ID the kubelet reports.
func enforcerProcRoot(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	containerID := ""
	for _, st := range pod.Status.InitContainerStatuses {
		if st.Name == sgk8s.EgressContainer {
			_, containerID, _ = strings.Cut(st.ContainerID, "://")
		}
	}
	if containerID == "" {
		t.Fatalf("no container ID for %s in %+v", sgk8s.EgressContainer, pod.Status.InitContainerStatuses)
	}
	out, err := exec.Command("ctr", "-a", realNode.containerd, "-n", "k8s.io", "tasks", "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr tasks ls: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == containerID {
			return "/proc/" + f[1]
		}
	}
	t.Fatalf("the enforcer's container %s has no task:\n%s", containerID, out)
	return ""
}

// egressPolicy is the gateway's GET of a sandbox's egress policy: the enforcer's policy
// API through the endpoint the gateway hands out for port 18080.
func egressPolicy(t *testing.T, g *gateway, id string) (int, []byte) {
	t.Helper()
	r := g.do("GET", fmt.Sprintf("/v1/sandboxes/%s/endpoints/%d", id, runtimes.EgressPort), nil)
	if r.Status != http.StatusOK {
		t.Fatalf("egress endpoint: %d %s", r.Status, r.Body)
	}
	var ep struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(r.Body, &ep); err != nil {
		t.Fatal(err)
	}
	answer := agentRequest(t, g, "GET", "http://"+ep.Endpoint+"/policy", ep.Headers, "", nil)
	return answer.status, []byte(answer.body)
}
