package kubernetes

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/runtimes"
)

// PullSecretName is the image pull secret of a sandbox whose create carried image.auth:
// one per sandbox, owned by its pod, so that it goes when the pod goes.
func PullSecretName(id string) string { return "sandgate-pull-" + id }

// dockerConfigJSON is the .dockerconfigjson of a kubernetes.io/dockerconfigjson secret
// holding one registry's credentials for image.
func dockerConfigJSON(image string, auth *runtimes.ImageAuth) ([]byte, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", image, err)
	}
	server := reference.Domain(named)
	if server == "docker.io" {
		// The kubelet looks Docker Hub up under its historical key.
		server = "https://index.docker.io/v1/"
	}
	type entry struct {
		Username string `json:"username"`
		Password string `json:"password"`
		Auth     string `json:"auth"`
	}
	return json.Marshal(map[string]map[string]entry{"auths": {server: {
		Username: auth.Username, Password: auth.Password,
		Auth: base64.StdEncoding.EncodeToString([]byte(auth.Username + ":" + auth.Password)),
	}}})
}

// createPullSecret stores spec's registry credentials as the pod's image pull secret,
// owned by the pod (the garbage collector removes it with the pod; Delete removes it
// too). The gateway may create and delete secrets, never read or list them.
func (r *Runtime) createPullSecret(ctx context.Context, spec runtimes.Spec, pod *corev1.Pod) error {
	data, err := dockerConfigJSON(spec.Image, spec.ImageAuth)
	if err != nil {
		return err
	}
	yes := true
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      PullSecretName(spec.ID),
			Namespace: r.opts.Namespace,
			Labels:    map[string]string{runtimes.LabelID: spec.ID, labelManagedBy: "sandgate"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				BlockOwnerDeletion: &yes,
			}},
		},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: data},
	}
	if _, err := r.client.CoreV1().Secrets(r.opts.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create image pull secret %s: %w", secret.Name, err)
	}
	return nil
}

// deletePullSecret removes a sandbox's pull secret; none is fine.
func (r *Runtime) deletePullSecret(ctx context.Context, id string) error {
	err := r.client.CoreV1().Secrets(r.opts.Namespace).Delete(ctx, PullSecretName(id), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete image pull secret %s: %w", PullSecretName(id), err)
	}
	return nil
}
