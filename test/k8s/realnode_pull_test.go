package k8s_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/runtimes"
	sgk8s "github.com/sandgate/sandgate/runtimes/kubernetes"
	"github.com/sandgate/sandgate/test/testenv"
)

// pushToRegistry makes an image of the base image's content under an image ID of its
// own (a commit with a label), pushes it as addr/sandgate/base:tag for each tag with the
// docker CLI, logged in with a config directory of the test's own, and removes it from
// the engine, so only the registry has it. The ID must differ from the base image's:
// the kubelet (KubeletEnsureSecretPulledImages) keys what it pulled with credentials by
// image ID, and would otherwise hold every other test's pods of the base image to
// those credentials too, and try to pull it from docker.io.
func pushToRegistry(t *testing.T, reg *testenv.Registry, user, password string, tags ...string) {
	t.Helper()
	cfgDir := t.TempDir()
	docker := func(stdin string, args ...string) {
		t.Helper()
		var out []byte
		var err error
		// Setup, not the subject: a push that breaks off on a loaded machine is tried
		// again, three times at most.
		for attempt := 0; attempt < 3; attempt++ {
			cmd := exec.Command("docker", args...)
			cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+cfgDir)
			cmd.Stdin = strings.NewReader(stdin)
			if out, err = cmd.CombinedOutput(); err == nil || args[0] != "push" {
				break
			}
		}
		if err != nil {
			t.Fatalf("docker %s: %v\n%s", args[0], err, out)
		}
	}
	docker(password, "login", "--username", user, "--password-stdin", reg.Addr)
	ctr := "sandgate-pull-test-" + randomHex(4)
	own := reg.Addr + "/sandgate/base:own-" + randomHex(4)
	docker("", "create", "--name", ctr, image)
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", ctr).Run() })
	docker("", "commit", "--change", "LABEL sandgate.test="+ctr, ctr, own)
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", own).Run() })
	for _, tag := range tags {
		ref := reg.Addr + "/sandgate/base:" + tag
		docker("", "tag", own, ref)
		t.Cleanup(func() { _ = exec.Command("docker", "rmi", ref).Run() })
		docker("", "push", ref)
		docker("", "rmi", ref)
	}
	docker("", "rmi", own)
}

// TestRealNodeImagePullSecret: the kubelet pulls a sandbox's image from a registry that
// demands credentials (the loopback registry the tests build, which the node's
// containerd reaches on this host's loopback), with the sandbox's own pull secret, and
// the sandbox answers a command. A create with a wrong password fails with the
// runtime's fixed reason for a refused pull, never the registry's or the kubelet's
// text, and leaves neither pod nor secret behind; so does one without credentials or
// with wrong ones for the image the node already pulled (the kubelet asks the registry
// again rather than hand it out).
func TestRealNodeImagePullSecret(t *testing.T) {
	agentImage := requireRealNode(t)
	ns := realNodeNamespace(t)
	const user, password = "puller", "real-node-pull-s3cret"
	reg := testenv.StartRegistry(t, repoRoot, user, password)
	pushToRegistry(t, reg, user, password, "good", "refused")
	g := startRealNodeGateway(t, ns, agentImage)
	ctx := context.Background()

	t.Run("the kubelet pulls with the sandbox's secret", func(t *testing.T) {
		before := reg.ManifestRequests("sandgate/base", "good")
		ref := reg.Addr + "/sandgate/base:good"
		t0 := time.Now()
		id := g.createSandbox(smallSandbox(map[string]any{"image": map[string]any{"uri": ref,
			"auth": map[string]string{"username": user, "password": password}}}))
		t.Logf("create with a pull → Running: %s", time.Since(t0).Round(time.Millisecond))
		if got := reg.ManifestRequests("sandgate/base", "good"); got <= before {
			t.Fatalf("the registry answered no manifest request for :good (%d before the create, %d after): nothing was pulled", before, got)
		}
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, sgk8s.PodName(id), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Spec.NodeName != realNode.name {
			t.Fatalf("pod on %q, want %s", pod.Spec.NodeName, realNode.name)
		}
		for _, st := range pod.Status.ContainerStatuses {
			if st.Name == sgk8s.WorkloadContainer && st.Image != ref {
				t.Errorf("workload runs image %q, want %q", st.Image, ref)
			}
		}
		out, code, err := g.command(id, "echo pulled-$((6*7))")
		if err != nil || code != 0 || out != "pulled-42" {
			t.Fatalf("command: %q exit %d %v", out, code, err)
		}
	})

	t.Run("a wrong password fails with the fixed reason", func(t *testing.T) {
		ref := reg.Addr + "/sandgate/base:refused"
		r := g.do("POST", "/v1/sandboxes", smallSandbox(map[string]any{"image": map[string]any{"uri": ref,
			"auth": map[string]string{"username": user, "password": "not-the-password"}}, "entrypoint": []string{"sleep", "infinity"}}))
		if r.Status != http.StatusBadRequest {
			t.Fatalf("create with a wrong password: %d %s, want 400", r.Status, r.Body)
		}
		body := r.JSON(t)
		msg, _ := body["message"].(string)
		if body["code"] != "SANDBOX::IMAGE_PULL_FAILED" || !strings.HasSuffix(msg, ": "+runtimes.PullReasonUnauthorized) {
			t.Fatalf("create with a wrong password: %s; want SANDBOX::IMAGE_PULL_FAILED ending in %q", r.Body, runtimes.PullReasonUnauthorized)
		}
		// Nothing of what the registry or the kubelet said: no URL, status line or
		// containerd wording.
		for _, leak := range []string{"http://", "/v2/", "401", "failed to", "ErrImagePull", "ImagePullBackOff", "not-the-password"} {
			if strings.Contains(msg, leak) {
				t.Errorf("the message carries %q: %q", leak, msg)
			}
		}
		// The first subtest's sandbox keeps its pod and its secret; the refused create's
		// are gone.
		waitFor(t, 2*time.Minute, func() bool {
			list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(list.Items) == 1
		}, "the pod of the refused create to be removed")
		secrets, err := kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var pullSecrets []string
		for _, s := range secrets.Items {
			if strings.HasPrefix(s.Name, "sandgate-pull-") {
				pullSecrets = append(pullSecrets, s.Name)
			}
		}
		if len(pullSecrets) != 1 {
			t.Errorf("pull secrets in the namespace: %v, want the first sandbox's only", pullSecrets)
		}
	})

	t.Run("the pulled image is not handed to a create without its credentials", func(t *testing.T) {
		ref := reg.Addr + "/sandgate/base:good"
		for _, auth := range []map[string]string{nil, {"username": user, "password": "not-the-password"}} {
			img := map[string]any{"uri": ref}
			if auth != nil {
				img["auth"] = auth
			}
			r := g.do("POST", "/v1/sandboxes", smallSandbox(map[string]any{"image": img, "entrypoint": []string{"sleep", "infinity"}}))
			msg, _ := r.JSON(t)["message"].(string)
			if r.Status != http.StatusBadRequest || !strings.HasSuffix(msg, ": "+runtimes.PullReasonUnauthorized) {
				t.Fatalf("create of the pulled image with auth %v: %d %s, want 400 ending in %q", auth != nil, r.Status, r.Body, runtimes.PullReasonUnauthorized)
			}
		}
	})
}
