package k8s_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sgk8s "github.com/sandgate/sandgate/runtimes/kubernetes"
)

// TestImagePullSecret: a create with image.auth gives its pod a pull secret of its own
// (kubernetes.io/dockerconfigjson for the image's registry, owned by the pod), which is
// removed when the sandbox is deleted, and by the garbage collector when the pod goes by
// other means. The credentials appear nowhere else.
func TestImagePullSecret(t *testing.T) {
	ns := newNamespace(t)
	g := startGateway(t, ns)
	const password = "k8s-pull-s3cret"
	ctx := context.Background()
	create := func() (string, *corev1.Pod) {
		t.Helper()
		id := g.createSandbox(map[string]any{"image": map[string]any{"uri": image, "auth": map[string]string{"username": "puller", "password": password}}})
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, sgk8s.PodName(id), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the sandbox's pod: %v", err)
		}
		return id, pod
	}
	secretGone := func(id string) bool {
		_, err := kube.CoreV1().Secrets(ns).Get(ctx, sgk8s.PullSecretName(id), metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}

	id, pod := create()
	if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != sgk8s.PullSecretName(id) {
		t.Fatalf("pod imagePullSecrets %v, want [%s]", pod.Spec.ImagePullSecrets, sgk8s.PullSecretName(id))
	}
	secret, err := kube.CoreV1().Secrets(ns).Get(ctx, sgk8s.PullSecretName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pull secret: %v", err)
	}
	if secret.Type != corev1.SecretTypeDockerConfigJson || len(secret.OwnerReferences) != 1 || secret.OwnerReferences[0].UID != pod.UID {
		t.Fatalf("pull secret type %s owners %v; want dockerconfigjson owned by pod %s", secret.Type, secret.OwnerReferences, pod.UID)
	}
	var cfg struct {
		Auths map[string]struct{ Username, Password string } `json:"auths"`
	}
	if err := json.Unmarshal(secret.Data[corev1.DockerConfigJsonKey], &cfg); err != nil {
		t.Fatalf("secret data: %v", err)
	}
	registry := "https://index.docker.io/v1/"
	if i := strings.Index(image, "/"); i > 0 && strings.ContainsAny(image[:i], ".:") {
		registry = image[:i]
	}
	if a := cfg.Auths[registry]; a.Username != "puller" || a.Password != password {
		t.Fatalf("secret auths %v, want puller's credentials for %s", cfg.Auths, registry)
	}
	raw, _ := json.Marshal(pod)
	view := g.do("GET", "/v1/sandboxes/"+id, nil)
	if strings.Contains(string(raw), password) || strings.Contains(string(view.Body), password) || strings.Contains(g.proc.Logs(), password) {
		t.Fatal("the password appears in the pod, the API view or the gateway's log")
	}

	t.Run("deleting the sandbox removes its pull secret", func(t *testing.T) {
		if r := g.do("DELETE", "/v1/sandboxes/"+id, nil); r.Status != 204 {
			t.Fatalf("delete: %d %s", r.Status, r.Body)
		}
		waitFor(t, time.Minute, func() bool { return secretGone(id) }, "the pull secret to go with the sandbox")
	})

	t.Run("the garbage collector removes it with the pod", func(t *testing.T) {
		id, _ := create()
		zero := int64(0)
		if err := kube.CoreV1().Pods(ns).Delete(ctx, sgk8s.PodName(id), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Minute, func() bool { return secretGone(id) }, "the garbage collector to remove the pull secret of a deleted pod")
	})

	t.Run("a create without auth has no pull secret", func(t *testing.T) {
		id := g.createSandbox(map[string]any{})
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, sgk8s.PodName(id), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pod.Spec.ImagePullSecrets) != 0 || !secretGone(id) {
			t.Fatalf("a create without image.auth got pull secrets %v", pod.Spec.ImagePullSecrets)
		}
	})
}
