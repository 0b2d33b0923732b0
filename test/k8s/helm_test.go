package k8s_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	sgk8s "github.com/sandgate/sandgate/runtimes/kubernetes"
	"github.com/sandgate/sandgate/test/testenv"
)

// helm runs the Helm scripts/helm.sh builds (and caches) against the test cluster, with
// config, cache and data dirs of the test's own.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot, "scripts", "helm.sh"), "build").Output()
	if err != nil {
		t.Fatalf("scripts/helm.sh build: %v", err)
	}
	home := t.TempDir()
	cmd := exec.Command(strings.TrimSpace(string(out)), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig,
		"HELM_CONFIG_HOME="+home+"/config", "HELM_CACHE_HOME="+home+"/cache", "HELM_DATA_HOME="+home+"/data")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// kubeconfigAs writes a copy of the admin kubeconfig that acts as user (impersonation),
// so whatever uses it has exactly that user's RBAC.
func kubeconfigAs(t *testing.T, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// gatewayImage builds sandgate/gateway from images/gateway.Dockerfile around a static
// build of the sandgate under test, once per run, and removes it when the run ends.
var gatewayImageBuild struct {
	once  sync.Once
	image string
	err   error
}

func gatewayImage(t *testing.T) string {
	t.Helper()
	gatewayImageBuild.once.Do(func() {
		// The binary under test: `make build` (and the harness's own build) links it
		// statically, as a FROM-scratch image needs; images/gateway.sh refuses one that
		// is not.
		bin := filepath.Join(binDir, "sandgate")
		tag := "k8s-test-" + randomHex(6)
		if out, err := exec.Command(filepath.Join(repoRoot, "images", "gateway.sh"), tag, bin).CombinedOutput(); err != nil {
			gatewayImageBuild.err = fmt.Errorf("images/gateway.sh: %v\n%s", err, out)
			return
		}
		gatewayImageBuild.image = "sandgate/gateway:" + tag
	})
	if gatewayImageBuild.err != nil {
		t.Fatal(gatewayImageBuild.err)
	}
	return gatewayImageBuild.image
}

func removeGatewayImage() {
	if gatewayImageBuild.image != "" {
		_ = exec.Command("docker", "rmi", "-f", gatewayImageBuild.image).Run()
	}
}

// startGatewayContainer runs image in Docker as the kubelet would run the pod's
// container: its user, a read-only root with an empty /var/lib/sandgate (the pod's
// emptyDir), env, and kubeconfigPath standing in for the in-cluster credentials. It
// shares the host's network namespace, the only way to reach the loopback API server,
// Redis and pod addresses of the test cluster.
func startGatewayContainer(t *testing.T, image string, env []string, kubeconfigPath string) string {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := os.Chmod(kubeconfigPath, 0o644); err != nil {
		t.Fatal(err)
	}
	name := "sandgate-helm-test-" + randomHex(4)
	args := []string{"run", "-d", "--name", name, "--network", "host", "--read-only",
		"--user", "65532:65532", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--tmpfs", "/var/lib/sandgate:uid=65532,gid=65532,mode=0700",
		"-v", kubeconfigPath + ":/etc/sandgate/kubeconfig:ro",
		"-e", "SANDGATE_LISTEN=" + addr, "-e", "SANDGATE_KUBECONFIG=/etc/sandgate/kubeconfig"}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	// The image's own entrypoint and command, as the pod gives only args ["run"].
	args = append(args, image, "run")
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("docker", "logs", "--tail", "60", name).CombinedOutput()
			t.Logf("gateway container logs:\n%s", out)
		}
		_ = exec.Command("docker", "rm", "-f", name).Run()
	})
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/v1/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		if out, _ := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", name).Output(); strings.TrimSpace(string(out)) != "true" {
			t.Fatalf("the gateway container stopped before serving")
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway container did not serve /v1/health within a minute")
		}
	}
}

// TestHelmChartInstall installs deploy/helm/sandgate with `helm install` onto the test
// control plane, then runs the gateway the way its Deployment's pod would: the gateway
// image (images/gateway.Dockerfile) under the pod's user with a read-only root, the
// pod's own environment (Secret references resolved from the API server, as the kubelet
// does) and the pod's service account (impersonated), so the sandbox lifecycle runs on
// the chart's RBAC and nothing more.
func TestHelmChartInstall(t *testing.T) {
	ctx := context.Background()
	release := "sg" + randomHex(4)
	ns := newNamespace(t)
	sandboxNS := "sgb-" + randomHex(4)
	t.Cleanup(func() { deleteNamespace(t, sandboxNS) })
	apiKey := "k-" + randomHex(12)
	for name, data := range map[string]map[string]string{
		"redis":                       {"url": redisURL},
		release + "-sandgate-gateway": {"api-key": apiKey},
	} {
		if _, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	helm(t, "install", release, filepath.Join(repoRoot, "deploy", "helm", "sandgate"), "--namespace", ns,
		"--set", "sandboxNamespace.name="+sandboxNS,
		"--set", "redis.bundled=false", "--set", "redis.existingSecret=redis",
		"--set", "replicas=1",
		"--set", "settings.SANDGATE_REDIS_PREFIX=helm"+randomHex(4)+":",
		"--set", "settings.SANDGATE_MIN_TIMEOUT=1s",
		"--set", "settings.SANDGATE_SYNC_INTERVAL=500ms")
	t.Cleanup(func() { helm(t, "uninstall", release, "--namespace", ns) })

	// The objects are there, in the namespaces the chart promises.
	sandboxNamespace, err := kube.CoreV1().Namespaces().Get(ctx, sandboxNS, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the sandbox namespace: %v", err)
	}
	if sandboxNamespace.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("sandbox namespace labels %v", sandboxNamespace.Labels)
	}
	name := release + "-sandgate-gateway"
	for what, get := range map[string]func() error{
		"ServiceAccount": func() error {
			_, err := kube.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
			return err
		},
		"Service": func() error { _, err := kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); return err },
		"PodDisruptionBudget": func() error {
			_, err := kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
			return err
		},
		"Role": func() error { _, err := kube.RbacV1().Roles(sandboxNS).Get(ctx, name, metav1.GetOptions{}); return err },
		"RoleBinding": func() error {
			_, err := kube.RbacV1().RoleBindings(sandboxNS).Get(ctx, name, metav1.GetOptions{})
			return err
		},
		"NetworkPolicy": func() error {
			_, err := kube.NetworkingV1().NetworkPolicies(sandboxNS).Get(ctx, "sandbox-isolation", metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}

	// The Deployment's pod, made by the controller-manager and scheduled on a kwok node.
	var pod corev1.Pod
	waitFor(t, time.Minute, func() bool {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/name=sandgate-gateway"})
		if err != nil || len(list.Items) != 1 || list.Items[0].Spec.NodeName == "" {
			return false
		}
		pod = list.Items[0]
		return true
	}, "the gateway Deployment's pod")
	var dep *appsv1.Deployment
	if dep, err = kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if pod.Spec.ServiceAccountName != name || dep.Spec.Template.Spec.ServiceAccountName != name {
		t.Errorf("pod runs as service account %q, want %q", pod.Spec.ServiceAccountName, name)
	}
	container := pod.Spec.Containers[0]
	if container.Image != "sandgate/gateway:0.1.0" || !slices.Equal(container.Args, []string{"run"}) {
		t.Errorf("gateway container image %s args %v", container.Image, container.Args)
	}
	if envOf(container, "SANDGATE_RUNTIME") != "kubernetes" || envOf(container, "SANDGATE_NAMESPACE") != sandboxNS || envOf(container, "SANDGATE_KUBECONFIG") != "" {
		t.Errorf("runtime settings: SANDGATE_RUNTIME=%q SANDGATE_NAMESPACE=%q SANDGATE_KUBECONFIG=%q", envOf(container, "SANDGATE_RUNTIME"), envOf(container, "SANDGATE_NAMESPACE"), envOf(container, "SANDGATE_KUBECONFIG"))
	}

	// The pod's environment as the kubelet would give it.
	var env []string
	for _, e := range container.Env {
		value := e.Value
		if ref := e.ValueFrom; ref != nil {
			if ref.SecretKeyRef == nil {
				t.Fatalf("env %s: only Secret references are expected, got %+v", e.Name, ref)
			}
			secret, err := kube.CoreV1().Secrets(ns).Get(ctx, ref.SecretKeyRef.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("env %s: %v", e.Name, err)
			}
			value = string(secret.Data[ref.SecretKeyRef.Key])
		}
		env = append(env, e.Name+"="+value)
	}
	saUser := "system:serviceaccount:" + ns + ":" + name
	client := &http.Client{Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	g := &gateway{t: t, APIKey: apiKey, Namespace: sandboxNS, client: client}
	g.Addr = startGatewayContainer(t, gatewayImage(t), env, kubeconfigAs(t, saUser))

	// The lifecycle on the chart's RBAC: create (a Pod), a command through its agent,
	// logs, delete.
	id := g.createSandbox(map[string]any{"timeout": 600})
	if out, code, err := g.command(id, "echo from-helm"); err != nil || code != 0 || out != "from-helm" {
		t.Fatalf("command: %q exit %d, %v", out, code, err)
	}
	if r := g.do("DELETE", "/v1/sandboxes/"+id, nil); r.Status != 204 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	waitFor(t, time.Minute, func() bool {
		_, err := kube.CoreV1().Pods(sandboxNS).Get(ctx, sgk8s.PodName(id), metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, "the sandbox pod to go")

	// And the service account can do no more than that: not read Secrets or touch pods in
	// its own namespace, not list nodes.
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigAs(t, saUser))
	if err != nil {
		t.Fatal(err)
	}
	asGateway, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for what, try := range map[string]func() error{
		"get a Secret of the sandbox namespace": func() error {
			_, err := asGateway.CoreV1().Secrets(sandboxNS).List(ctx, metav1.ListOptions{})
			return err
		},
		"list pods of its own namespace": func() error {
			_, err := asGateway.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			return err
		},
		"list nodes": func() error { _, err := asGateway.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err },
		"list config maps of the sandbox namespace": func() error {
			_, err := asGateway.CoreV1().ConfigMaps(sandboxNS).List(ctx, metav1.ListOptions{})
			return err
		},
	} {
		if err := try(); !apierrors.IsForbidden(err) {
			t.Errorf("the gateway's service account may %s (err %v), want Forbidden", what, err)
		}
	}
}
