package k8s_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sgk8s "github.com/sandgate/sandgate/runtimes/kubernetes"
)

// TestVolumesPVC: a sandbox with a pvc volume gets a PersistentVolumeClaim in the
// sandbox namespace (created when asked, with the storage class, size and access modes
// asked for, its name namespaced per tenant) and a Pod spec mounting it; a missing claim
// that may not be created is refused with no pod made; deleteOnSandboxTermination
// removes the claim with the sandbox; snapshots answer SNAPSHOT::UNSUPPORTED.
func TestVolumesPVC(t *testing.T) {
	ns := newNamespace(t)
	g := startGateway(t, ns)
	ctx := context.Background()
	class := "sg-manual-" + randomHex(3)
	// No provisioner runs here: a PersistentVolume of the class lets the claim bind, so
	// that the scheduler places the pod.
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "sg-test-" + randomHex(4)},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:       class,
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/sandgate-k8s-pv"}},
		},
	}
	if _, err := kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})

	id := g.createSandbox(map[string]any{"volumes": []map[string]any{{
		"name": "data", "mountPath": "/data", "subPath": "work",
		"pvc": map[string]any{"claimName": "data", "storageClass": class, "storage": "2Gi", "accessModes": []string{"ReadWriteOnce"}, "deleteOnSandboxTermination": true},
	}}})
	pod, err := kube.CoreV1().Pods(ns).Get(ctx, sgk8s.PodName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var claim, volName string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claim, volName = v.PersistentVolumeClaim.ClaimName, v.Name
		}
	}
	if !strings.HasPrefix(claim, "sgv-") || !strings.HasSuffix(claim, "-data") {
		t.Fatalf("pod volumes %+v: want a claim named sgv-<tenant digest>-data", pod.Spec.Volumes)
	}
	mounted := false
	for _, c := range pod.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.Name == volName {
				mounted = c.Name == sgk8s.WorkloadContainer && m.MountPath == "/data" && m.SubPath == "work" && !m.ReadOnly
			}
		}
	}
	if !mounted {
		t.Fatalf("the workload does not mount %s at /data (subPath work): %+v", volName, pod.Spec.Containers)
	}
	pvc, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the claim: %v", err)
	}
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != class || pvc.Spec.Resources.Requests.Storage().String() != "2Gi" ||
		len(pvc.Spec.AccessModes) != 1 || pvc.Spec.AccessModes[0] != corev1.ReadWriteOnce || pvc.Annotations["sandgate.io/tenant"] != "default" {
		t.Fatalf("claim spec %+v annotations %v", pvc.Spec, pvc.Annotations)
	}

	t.Run("a missing claim that may not be made is refused, no pod", func(t *testing.T) {
		before := len(pods(t, ns))
		r := g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": image}, "entrypoint": []string{"sleep", "infinity"},
			"volumes": []map[string]any{{"name": "v", "mountPath": "/v", "pvc": map[string]any{"claimName": "never-made", "createIfNotExists": false}}}})
		if r.Status != 404 || r.JSON(t)["code"] != "VOLUME::NOT_FOUND" {
			t.Fatalf("status %d %s, want 404 VOLUME::NOT_FOUND", r.Status, r.Body)
		}
		if n := len(pods(t, ns)); n != before {
			t.Fatalf("pods %d → %d", before, n)
		}
	})

	t.Run("snapshots answer their clear code", func(t *testing.T) {
		r := g.do("POST", "/v1/sandboxes/"+id+"/snapshots", nil)
		if r.Status != 400 || r.JSON(t)["code"] != "SNAPSHOT::UNSUPPORTED" {
			t.Fatalf("snapshot: %d %s, want 400 SNAPSHOT::UNSUPPORTED", r.Status, r.Body)
		}
		r = g.do("POST", "/v1/sandboxes", map[string]any{"snapshotId": "6f1c0c5e-4b7e-4c1e-9a39-2f4c1d7e0a11"})
		if r.Status != 400 || r.JSON(t)["code"] != "SNAPSHOT::UNSUPPORTED" {
			t.Fatalf("create from snapshot: %d %s, want 400 SNAPSHOT::UNSUPPORTED", r.Status, r.Body)
		}
	})

	t.Run("deleteOnSandboxTermination removes the claim with the sandbox", func(t *testing.T) {
		if r := g.do("DELETE", "/v1/sandboxes/"+id, nil); r.Status != 204 {
			t.Fatalf("delete: %d %s", r.Status, r.Body)
		}
		waitFor(t, 2*time.Minute, func() bool {
			_, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, "the claim to go with its sandbox")
	})
}
