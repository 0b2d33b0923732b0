package k8s_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRealNodeVolumesPVC mounts one PersistentVolumeClaim in two sandboxes on the real
// node. The claim binds to a hostPath PersistentVolume of a storage class of the test's
// own, a directory the test made on this host (the node's host); no provisioner runs.
// What the first sandbox writes under the claim's subPath lands in that directory and
// the second sandbox, which mounts the whole claim, reads it; what the second writes,
// the first reads while both run.
func TestRealNodeVolumesPVC(t *testing.T) {
	agentImage := requireRealNode(t)
	ns := realNodeNamespace(t)
	ctx := context.Background()

	dir := t.TempDir()
	class := "sg-hostpath-" + randomHex(3)
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "sg-realnode-" + randomHex(4)},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              class,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}
	if _, err := kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})

	g := startRealNodeGateway(t, ns, agentImage)
	claim := map[string]any{"claimName": "shared", "storageClass": class, "storage": "1Gi", "accessModes": []string{"ReadWriteOnce"}}
	writer := g.createSandbox(smallSandbox(map[string]any{"volumes": []map[string]any{{"name": "data", "mountPath": "/data", "subPath": "work", "pvc": claim}}}))
	token := "written-by-the-first-sandbox-" + randomHex(6)
	if out, code, err := g.command(writer, "echo "+token+" > /data/note.txt && cat /data/note.txt"); err != nil || code != 0 || out != token {
		t.Fatalf("write in the first sandbox: %q exit %d %v", out, code, err)
	}
	onHost, err := os.ReadFile(filepath.Join(dir, "work", "note.txt"))
	if err != nil || strings.TrimSpace(string(onHost)) != token {
		t.Fatalf("the PersistentVolume's directory holds %q (%v), want the first sandbox's %q under work/", onHost, err, token)
	}

	reader := g.createSandbox(smallSandbox(map[string]any{"volumes": []map[string]any{{"name": "data", "mountPath": "/vol", "pvc": claim}}}))
	if out, code, err := g.command(reader, "cat /vol/work/note.txt"); err != nil || code != 0 || out != token {
		t.Fatalf("read in the second sandbox: %q exit %d %v, want %q", out, code, err, token)
	}
	reply := "written-by-the-second-sandbox-" + randomHex(6)
	if _, code, err := g.command(reader, "echo "+reply+" > /vol/work/reply.txt"); err != nil || code != 0 {
		t.Fatalf("write in the second sandbox: exit %d %v", code, err)
	}
	if out, code, err := g.command(writer, "cat /data/reply.txt"); err != nil || code != 0 || out != reply {
		t.Fatalf("read back in the first sandbox: %q exit %d %v, want %q", out, code, err, reply)
	}
}
