package kubernetes

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/runtimes"
)

// annotationDeleteClaims lists, on a sandbox's pod, the claims its create made with
// deleteOnSandboxTermination: Delete removes them (read from the informer's copy, so a
// sandbox without volumes costs no API call).
const annotationDeleteClaims = "sandgate.io/delete-claims"

// defaultClaimBytes is the size of a claim created without pvc.storage.
const defaultClaimBytes = 1 << 30

// ensureClaims makes sure every pvc volume of spec has its PersistentVolumeClaim in the
// sandbox namespace, creating the missing ones it may. It returns the claims it created,
// which the caller removes if the create fails. Host volumes are refused: the gateway
// resolves host paths on its own machine, which is not the node the pod lands on.
func (r *Runtime) ensureClaims(ctx context.Context, spec runtimes.Spec) ([]string, error) {
	var created []string
	fail := func(err error) ([]string, error) {
		r.deleteClaims(context.WithoutCancel(ctx), created)
		return nil, err
	}
	for _, v := range spec.Volumes {
		if v.HostPath != "" {
			return fail(fmt.Errorf("volume %q: host volumes are not available on Kubernetes (paths are resolved on the gateway's host, not the node's); use a pvc volume: %w", v.Name, runtimes.ErrVolumeUnsupported))
		}
		got, err := r.client.CoreV1().PersistentVolumeClaims(r.opts.Namespace).Get(ctx, v.Claim, metav1.GetOptions{})
		if err == nil {
			if owner := got.Annotations[annotationTenant]; owner != "" && owner != spec.Tenant {
				return fail(fmt.Errorf("volume %q: %w", v.Name, runtimes.ErrVolumeForeign))
			}
			continue
		}
		if !apierrors.IsNotFound(err) {
			return fail(fmt.Errorf("get claim for volume %q: %w", v.Name, err))
		}
		if !v.CreateIfNotExists {
			return fail(fmt.Errorf("volume %q (claim does not exist and createIfNotExists is false): %w", v.Name, runtimes.ErrVolumeNotFound))
		}
		if _, err := r.client.CoreV1().PersistentVolumeClaims(r.opts.Namespace).Create(ctx, claimFor(spec, v), metav1.CreateOptions{}); err != nil {
			return fail(fmt.Errorf("create claim for volume %q: %w", v.Name, err))
		}
		created = append(created, v.Claim)
	}
	return created, nil
}

// claimFor is the PersistentVolumeClaim of a volume a create makes.
func claimFor(spec runtimes.Spec, v runtimes.Volume) *corev1.PersistentVolumeClaim {
	size := v.StorageBytes
	if size <= 0 {
		size = defaultClaimBytes
	}
	modes := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	if len(v.AccessModes) > 0 {
		modes = modes[:0]
		for _, m := range v.AccessModes {
			modes = append(modes, corev1.PersistentVolumeAccessMode(m))
		}
	}
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: v.Claim,
			Labels: map[string]string{
				runtimes.LabelTenant: labelValue(spec.Tenant),
				labelManagedBy:       "sandgate",
			},
			Annotations: map[string]string{
				annotationTenant:         spec.Tenant,
				"sandgate.io/created-by": spec.ID,
			},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: modes,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI),
			}},
		},
	}
	if v.StorageClass != "" {
		sc := v.StorageClass
		c.Spec.StorageClassName = &sc
	}
	return c
}

// podVolumes are the pod's volumes and the workload's mounts for spec's pvc volumes;
// deleteWith lists the claims to remove with the sandbox (made by this create).
func podVolumes(spec runtimes.Spec, created []string) (vols []corev1.Volume, mounts []corev1.VolumeMount, deleteWith []string) {
	made := map[string]bool{}
	for _, c := range created {
		made[c] = true
	}
	for i, v := range spec.Volumes {
		if v.Claim == "" {
			continue
		}
		name := "volume-" + strconv.Itoa(i)
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.Claim, ReadOnly: v.ReadOnly},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: v.MountPath, SubPath: v.SubPath, ReadOnly: v.ReadOnly})
		if v.DeleteOnTermination && made[v.Claim] {
			deleteWith = append(deleteWith, v.Claim)
		}
	}
	return vols, mounts, deleteWith
}

// deleteClaims removes claims, best effort (a claim a pod still uses is removed by the
// cluster once the pod is gone: the kubernetes.io/pvc-protection finalizer).
func (r *Runtime) deleteClaims(ctx context.Context, names []string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, name := range names {
		err := r.client.CoreV1().PersistentVolumeClaims(r.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			r.log.Warn("delete volume claim", "claim", name, "err", err)
		}
	}
}

// claimsToDelete reads a pod's annotationDeleteClaims.
func claimsToDelete(pod *corev1.Pod) []string {
	v := pod.Annotations[annotationDeleteClaims]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// addVolumes mounts spec's pvc volumes into the workload of pod and notes the claims to
// remove with it.
func addVolumes(pod *corev1.Pod, spec runtimes.Spec, created []string) {
	vols, mounts, deleteWith := podVolumes(spec, created)
	pod.Spec.Volumes = append(pod.Spec.Volumes, vols...)
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == WorkloadContainer {
			pod.Spec.Containers[i].VolumeMounts = append(pod.Spec.Containers[i].VolumeMounts, mounts...)
		}
	}
	if len(deleteWith) > 0 {
		pod.Annotations[annotationDeleteClaims] = strings.Join(deleteWith, ",")
	}
}
