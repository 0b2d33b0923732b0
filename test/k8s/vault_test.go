package k8s_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sgk8s "github.com/sandgate/sandgate/runtimes/kubernetes"
)

// TestCredentialProxyPod: a create with credentialProxy makes a pod whose egress
// native sidecar runs the vault (--credential-proxy, the CA key in its environment
// only), a trust init container in the workload's image between the installer and the
// sidecar, and a workload with the trust variables and the bundle mounted over the
// system roots, never the key. (The vault's behaviour is the Docker e2e suite's: the
// same enforcer; kwok runs no sidecar.) Without a networkPolicy the create is refused.
func TestCredentialProxyPod(t *testing.T) {
	ns := newNamespace(t)
	g := startGateway(t, ns)

	r := g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": "sandgate/base:test"}, "entrypoint": []string{"tail", "-f", "/dev/null"},
		"credentialProxy": map[string]any{"enabled": true}})
	if r.Status != 400 || !strings.Contains(string(r.Body), "SANDBOX::CREDENTIAL_PROXY_REQUIRES_NETWORK_POLICY") {
		t.Fatalf("create without a networkPolicy: %d %s", r.Status, r.Body)
	}

	id := g.createSandbox(map[string]any{
		"networkPolicy":   map[string]any{"defaultAction": "deny", "egress": []map[string]any{{"action": "allow", "target": "api.example.test"}}},
		"credentialProxy": map[string]any{"enabled": true},
		"resourceLimits":  map[string]string{"cpu": "250m", "memory": "128Mi"},
	})
	pod, err := kube.CoreV1().Pods(ns).Get(context.Background(), sgk8s.PodName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the sandbox's pod: %v", err)
	}
	var names []string
	for _, c := range pod.Spec.InitContainers {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != strings.Join([]string{sgk8s.InstallContainer, sgk8s.VaultTrustContainer, sgk8s.EgressContainer}, ",") {
		t.Fatalf("init containers = %v", names)
	}
	trust, sidecar, w := pod.Spec.InitContainers[1], pod.Spec.InitContainers[2], pod.Spec.Containers[0]
	if sidecar.Command[len(sidecar.Command)-1] != "--credential-proxy" || !strings.Contains(envOf(sidecar, sgk8s.EnvVaultCAKey), "PRIVATE KEY") {
		t.Fatalf("sidecar: command %v", sidecar.Command)
	}
	if trust.Image != w.Image || envOf(trust, sgk8s.EnvVaultCACert) != envOf(sidecar, sgk8s.EnvVaultCACert) {
		t.Fatalf("trust container: image %s, want the workload's %s, with the sidecar's certificate", trust.Image, w.Image)
	}
	for _, c := range append(pod.Spec.Containers, pod.Spec.InitContainers[:2]...) {
		for _, e := range c.Env {
			if e.Name == sgk8s.EnvVaultCAKey || strings.Contains(e.Value, "PRIVATE KEY") {
				t.Fatalf("container %s holds the CA key", c.Name)
			}
		}
	}
	if envOf(w, "SSL_CERT_FILE") == "" || envOf(w, "REQUESTS_CA_BUNDLE") == "" || envOf(w, "NODE_EXTRA_CA_CERTS") == "" {
		t.Fatalf("workload trust variables missing: %+v", w.Env)
	}
	mounted := false
	for _, m := range w.VolumeMounts {
		mounted = mounted || (m.MountPath == "/etc/ssl/certs/ca-certificates.crt" && m.Name == sgk8s.AgentVolume && m.ReadOnly)
	}
	if !mounted {
		t.Fatalf("the system bundle is not mounted from the agent volume: %+v", w.VolumeMounts)
	}
	checkHardened(t, "vault trust container", trust, nil)
	// Everything else is the pod of any enforced sandbox.
	rest := pod.DeepCopy()
	rest.Spec.InitContainers = append(rest.Spec.InitContainers[:1], rest.Spec.InitContainers[2:]...)
	assertPodSpec(t, rest, podExpectations{egress: true, cpu: "250m", memory: "128Mi"})
}
