package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
	"github.com/sandgate/sandgate/sandbox-agent/egress"
)

// Names inside every sandbox pod.
const (
	// WorkloadContainer runs the agent as PID 1 in front of the user's entrypoint.
	WorkloadContainer = "sandbox"
	// InstallContainer copies the agent from the agent image into the agent volume.
	InstallContainer = "install-agent"
	// EgressContainer is the enforcer, a native sidecar (init container, restartPolicy Always).
	EgressContainer = "egress"
	// EgressStateVolume is the emptyDir the enforcer keeps its policy in (sidecar only).
	EgressStateVolume = "sandgate-egress-state"
	// AgentVolume is the emptyDir the agent is copied into.
	AgentVolume = "sandgate-agent"

	agentDir       = "/.sandgate"
	agentPath      = agentDir + "/sandbox-agent"
	imageAgentPath = "/sandbox-agent" // where the agent image holds the binary
)

// Environment variables the agent and the enforcer read.
const (
	EnvAgentToken   = agentproto.EnvAgentToken
	EnvEgressToken  = agentproto.EnvEgressToken
	EnvEgressPolicy = agentproto.EnvEgressPolicy
)

// Annotations carrying what labels cannot (free-form values) so that adoption can
// rebuild a record from the pod alone.
const (
	annotationTenant = runtimes.LabelTenant // exact tenant; the label may be a hash of it
	annotationEntry  = "sandgate.io/entrypoint"
	annotationEgress = "sandgate.io/egress"
	labelManagedBy   = "app.kubernetes.io/managed-by"
)

// keptCapabilities are the workload's capabilities, the same set the Docker runtime
// keeps: enough for a package manager and a uid/gid switch by the agent or the user's
// programs, nothing that touches the kernel, the network stack or the clock. NET_ADMIN
// and NET_RAW stay with the enforcer sidecar.
var keptCapabilities = []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "NET_BIND_SERVICE", "SETPCAP", "SYS_CHROOT", "AUDIT_WRITE", "MKNOD", "SETFCAP"}

// PodName is the name of a sandbox's pod.
func PodName(id string) string { return "sandgate-" + id }

// labelValue returns v when Kubernetes accepts it as a label value, else a stable
// digest of it (tenant names may hold spaces); the exact value goes to an annotation.
func labelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "h-" + hex.EncodeToString(sum[:12])
}

// escapeExpansion protects a value from the kubelet's $(VAR) expansion of command, args
// and env values: "$$" reads back as "$", so doubling every "$" keeps values verbatim.
func escapeExpansion(s string) string { return strings.ReplaceAll(s, "$", "$$") }

func escapeAll(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = escapeExpansion(s)
	}
	return out
}

// Unescape undoes escapeExpansion (for readers of the pod object, such as tests that
// play the kubelet).
func Unescape(s string) string { return strings.ReplaceAll(s, "$$", "$") }

// podFor builds the pod of a sandbox.
func (r *Runtime) podFor(spec runtimes.Spec, withEgress bool, runtimeClass string) *corev1.Pod {
	labels := map[string]string{
		runtimes.LabelID:        spec.ID,
		runtimes.LabelAgentAuth: "signed",
		// The tenant label is for selectors and operators; the annotation is exact.
		runtimes.LabelTenant: labelValue(spec.Tenant),
		labelManagedBy:       "sandgate",
	}
	if spec.Pool != "" {
		labels[runtimes.LabelPool] = labelValue(spec.Pool)
	}
	annotations := map[string]string{}
	for k, v := range spec.Labels {
		annotations[k] = v
	}
	annotations[annotationTenant] = spec.Tenant
	annotations[runtimes.LabelCreatedAt] = spec.CreatedAt.UTC().Format(time.RFC3339Nano)
	if spec.Pool != "" {
		annotations[runtimes.LabelPool] = spec.Pool
	}
	if spec.ExpiresAt != nil {
		annotations[runtimes.LabelExpiresAt] = spec.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	if ep, err := json.Marshal(spec.Entrypoint); err == nil {
		annotations[annotationEntry] = string(ep)
	}
	if withEgress {
		annotations[annotationEgress] = "enforced"
	}

	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]corev1.EnvVar, 0, len(keys)+2)
	for _, k := range keys {
		env = append(env, corev1.EnvVar{Name: k, Value: escapeExpansion(spec.Env[k])})
	}
	env = append(env, corev1.EnvVar{Name: EnvAgentToken, Value: spec.AgentToken})
	if spec.EgressToken != "" && !withEgress {
		env = append(env, corev1.EnvVar{Name: EnvEgressToken, Value: spec.EgressToken})
	}

	cpu, mem := spec.CPUMillis, spec.MemoryBytes
	if cpu == 0 {
		cpu = r.opts.DefaultCPUMillis
	}
	if mem == 0 {
		mem = r.opts.DefaultMemoryBytes
	}
	limits := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(cpu, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(mem, resource.BinarySI),
	}

	no, yes := false, true
	workload := corev1.Container{
		Name:         WorkloadContainer,
		Image:        spec.Image,
		Command:      append([]string{agentPath, "init", "--"}, escapeAll(spec.Entrypoint)...),
		Env:          env,
		Ports:        []corev1.ContainerPort{{Name: "agent", ContainerPort: runtimes.AgentPort, Protocol: corev1.ProtocolTCP}},
		Resources:    r.workloadResources(limits),
		VolumeMounts: []corev1.VolumeMount{{Name: AgentVolume, MountPath: agentDir, ReadOnly: true}},
		SecurityContext: &corev1.SecurityContext{
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: keptCapabilities},
			AllowPrivilegeEscalation: &no,
			Privileged:               &no,
		},
		ImagePullPolicy:          r.opts.ImagePullPolicy,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	volumes := []corev1.Volume{{
		Name: AgentVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			SizeLimit: resource.NewQuantity(64<<20, resource.BinarySI),
		}},
	}}
	if r.opts.ReadOnlyRootfs {
		workload.SecurityContext.ReadOnlyRootFilesystem = &yes
		for i, p := range r.writablePaths() {
			name := "scratch-" + strconv.Itoa(i)
			volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
				Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(r.opts.WritableBytes, resource.BinarySI),
			}}})
			workload.VolumeMounts = append(workload.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: p})
		}
	}

	initContainers := []corev1.Container{{
		Name:                     InstallContainer,
		Image:                    r.opts.AgentImage,
		Command:                  []string{imageAgentPath, "install", agentPath},
		Resources:                helperResources("100m", "64Mi"),
		VolumeMounts:             []corev1.VolumeMount{{Name: AgentVolume, MountPath: agentDir}},
		SecurityContext:          oneShotHelperSecurity(),
		ImagePullPolicy:          r.opts.AgentImagePullPolicy,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}}
	if withEgress {
		initContainers = append(initContainers, r.egressSidecar(spec))
		// The enforcer's state (the policy in force) lives in a volume only the sidecar
		// mounts: it survives the sidecar's restarts, and the workload cannot read it.
		volumes = append(volumes, corev1.Volume{Name: EgressStateVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(4<<20, resource.BinarySI),
		}}})
	}

	grace := int64(r.opts.DeleteGracePeriod / time.Second)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        PodName(spec.ID),
			Namespace:   r.opts.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			Hostname:                      "sandbox-" + shortID(spec.ID),
			TerminationGracePeriodSeconds: &grace,
			InitContainers:                initContainers,
			Containers:                    []corev1.Container{workload},
			Volumes:                       volumes,
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}
	if runtimeClass != "" {
		pod.Spec.RuntimeClassName = &runtimeClass
	}
	if spec.ImageAuth != nil {
		// The kubelet pulls with these credentials; the secret itself is made right
		// after the pod (it is owned by it), and the kubelet retries until it is there.
		pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: PullSecretName(spec.ID)}}
	}
	if r.opts.PriorityClassName != "" {
		pod.Spec.PriorityClassName = r.opts.PriorityClassName
	}
	if len(r.opts.SandboxDNS) > 0 {
		pod.Spec.DNSPolicy = corev1.DNSNone
		pod.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: r.sandboxDNS()}
	}
	return pod
}

// MaxSandboxDNS is the most nameservers Kubernetes accepts in a pod's dnsConfig.
const MaxSandboxDNS = 3

// sandboxDNS lists the operator's sandbox DNS servers as the pod spec and the enforcer
// take them.
func (r *Runtime) sandboxDNS() []string {
	list := make([]string, len(r.opts.SandboxDNS))
	for i, a := range r.opts.SandboxDNS {
		list[i] = a.String()
	}
	return list
}

// egressSidecar is the enforcer: a native sidecar that starts before the workload and,
// through its startup probe, holds the workload back until the rules are installed, so
// no user process ever runs unenforced. The pod never sets shareProcessNamespace, so the
// workload cannot see or signal it; the gateway signs its requests to 18080 (package
// egressauth) exactly as on Docker; its policy is kept in EgressStateVolume across its
// restarts. It alone holds NET_ADMIN (nftables, SO_MARK) and
// NET_BIND_SERVICE (the DNS proxy on port 53); it runs as root because capabilities of
// a non-root container are not effective without ambient capabilities.
func (r *Runtime) egressSidecar(spec runtimes.Spec) corev1.Container {
	args := []string{imageAgentPath, "egress", "--log-level", "info", "--state-file", egressStateDir + "/policy.json"}
	if len(spec.Egress.PlatformDeny) > 0 {
		args = append(args, "--platform-deny", strings.Join(spec.Egress.PlatformDeny, ","))
	}
	policy := sidecarPolicy(spec)
	env := []corev1.EnvVar{
		{Name: EnvEgressToken, Value: spec.EgressToken},
		{Name: EnvEgressPolicy, Value: escapeExpansion(string(policy))},
	}
	if len(r.opts.SandboxDNS) > 0 {
		// The enforcer asks the first nameserver of the pod's resolv.conf; naming them
		// all sends the workload's queries to any of them through a proxy of the same
		// policy that tries each in turn, and closes every one of them on its other ports.
		env = append(env, corev1.EnvVar{Name: egress.EnvDNSServers, Value: strings.Join(r.sandboxDNS(), ",")})
	}
	always := corev1.ContainerRestartPolicyAlways
	no, yes := false, true
	root := int64(0)
	return corev1.Container{
		Name:          EgressContainer,
		Image:         r.opts.AgentImage,
		Command:       escapeAll(args),
		RestartPolicy: &always,
		Env:           env,
		Ports:         []corev1.ContainerPort{{Name: "egress-api", ContainerPort: runtimes.EgressPort, Protocol: corev1.ProtocolTCP}},
		StartupProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromInt32(runtimes.EgressPort),
			}},
			PeriodSeconds:    1,
			FailureThreshold: 60,
		},
		Resources: helperResources("100m", "128Mi"),
		SecurityContext: &corev1.SecurityContext{
			Capabilities: &corev1.Capabilities{
				Drop: []corev1.Capability{"ALL"},
				Add:  []corev1.Capability{"NET_ADMIN", "NET_BIND_SERVICE"},
			},
			AllowPrivilegeEscalation: &no,
			Privileged:               &no,
			RunAsUser:                &root,
			RunAsNonRoot:             &no,
			ReadOnlyRootFilesystem:   &yes,
		},
		VolumeMounts:             []corev1.VolumeMount{{Name: EgressStateVolume, MountPath: egressStateDir}},
		ImagePullPolicy:          r.opts.AgentImagePullPolicy,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// sidecarPolicy is the policy the enforcer of spec starts with: spec's, or deny all.
func sidecarPolicy(spec runtimes.Spec) []byte {
	if len(spec.Egress.Policy) == 0 {
		return []byte(`{"defaultAction":"deny"}`)
	}
	return spec.Egress.Policy
}

// egressStateDir is where the enforcer's state volume is mounted in its sidecar.
const egressStateDir = "/var/lib/sandgate-egress"

// oneShotHelperSecurity is the security context of the pod's one-shot init containers
// (the agent's install, the vault's trust): nobody, no capability, no way up, a
// read-only root.
func oneShotHelperSecurity() *corev1.SecurityContext {
	no, yes := false, true
	nobody := int64(65534)
	return &corev1.SecurityContext{
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		AllowPrivilegeEscalation: &no,
		Privileged:               &no,
		RunAsUser:                &nobody,
		RunAsGroup:               &nobody,
		RunAsNonRoot:             &yes,
		ReadOnlyRootFilesystem:   &yes,
	}
}

// workloadResources is the workload's limits, requested as they are (the sandbox is
// scheduled with room for what it was admitted for), and the operator's bound on its
// ephemeral storage, which it does not request: the scheduler reserves no disk, the
// kubelet evicts the pod past the bound.
func (r *Runtime) workloadResources(limits corev1.ResourceList) corev1.ResourceRequirements {
	requests := limits.DeepCopy()
	if r.ephemeralStorage != nil {
		limits[corev1.ResourceEphemeralStorage] = r.ephemeralStorage.DeepCopy()
		requests[corev1.ResourceEphemeralStorage] = resource.MustParse("0")
	}
	return corev1.ResourceRequirements{Limits: limits, Requests: requests}
}

// helperResources bounds a helper container (installer, enforcer). They idle nearly
// always, so they request a tenth of their limit: a node's capacity goes to workloads.
func helperResources(cpu, memory string) corev1.ResourceRequirements {
	limitCPU, limitMem := resource.MustParse(cpu), resource.MustParse(memory)
	return corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceCPU: limitCPU, corev1.ResourceMemory: limitMem},
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(max(limitCPU.MilliValue()/10, 1), resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(limitMem.Value()/4, resource.BinarySI),
		},
	}
}

func (r *Runtime) writablePaths() []string {
	if r.opts.WritablePaths == nil {
		return []string{"/workspace", "/tmp"}
	}
	return r.opts.WritablePaths
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// instanceOf is the runtime's view of a sandbox pod.
func instanceOf(pod *corev1.Pod) runtimes.Instance {
	inst := runtimes.Instance{State: runtimes.StateCreated, Address: pod.Status.PodIP}
	labels := make(map[string]string, len(pod.Labels)+len(pod.Annotations))
	for k, v := range pod.Labels {
		labels[k] = v
	}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, "sandgate.io/") {
			labels[k] = v // exact values win over label-safe ones
		}
	}
	inst.Labels = labels
	inst.ID = labels[runtimes.LabelID]
	inst.Tenant = labels[runtimes.LabelTenant]
	inst.Pool = labels[runtimes.LabelPool]
	if t, err := time.Parse(time.RFC3339Nano, labels[runtimes.LabelCreatedAt]); err == nil {
		inst.CreatedAt = t
	} else {
		inst.CreatedAt = pod.CreationTimestamp.Time
	}
	if t, err := time.Parse(time.RFC3339Nano, labels[runtimes.LabelExpiresAt]); err == nil {
		inst.ExpiresAt = &t
	}
	if ep := labels[annotationEntry]; ep != "" {
		_ = json.Unmarshal([]byte(ep), &inst.Entrypoint)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name != WorkloadContainer {
			continue
		}
		inst.Image = c.Image
		for _, e := range c.Env {
			switch e.Name {
			case EnvAgentToken:
				inst.AgentToken = e.Value
			case EnvEgressToken:
				inst.EgressToken = e.Value
			}
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name != EgressContainer {
			continue
		}
		for _, e := range c.Env {
			if e.Name == EnvEgressToken {
				inst.EgressToken = e.Value
			}
		}
	}

	var workload *corev1.ContainerStatus
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == WorkloadContainer {
			workload = &pod.Status.ContainerStatuses[i]
		}
	}
	switch {
	case evictionOf(pod) != "":
		// Before the deletion case: an eviction by the API deletes the pod, and its
		// being deleted is then the cluster's doing, not the gateway's.
		inst.State = runtimes.StateExited
		inst.ExitCode = -1
		inst.Evicted = true
		inst.Message = "the pod was evicted: " + evictionOf(pod)
	case pod.DeletionTimestamp != nil:
		inst.State = runtimes.StateExited
		inst.Message = "the pod is being deleted"
	case workload != nil && workload.State.Terminated != nil:
		t := workload.State.Terminated
		inst.State = runtimes.StateExited
		inst.ExitCode = int(t.ExitCode)
		inst.Message = fmt.Sprintf("main process exited with code %d", t.ExitCode)
		if t.Reason == "OOMKilled" {
			inst.OOMKilled = true
			inst.Message += " (killed: out of memory)"
		} else if t.Reason != "" && t.Reason != "Completed" && t.Reason != "Error" {
			inst.Message += ": " + t.Reason
		}
	case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
		inst.State = runtimes.StateExited
		inst.ExitCode = -1
		inst.Message = "the pod " + strings.ToLower(string(pod.Status.Phase))
		if pod.Status.Reason != "" {
			inst.Message += ": " + pod.Status.Reason
		}
		if pod.Status.Message != "" {
			inst.Message += ": " + pod.Status.Message
		}
	case pod.Status.Phase == corev1.PodRunning && workload != nil && workload.State.Running != nil && pod.Status.PodIP != "":
		inst.State = runtimes.StateRunning
		if pod.Annotations[annotationPaused] == "true" {
			inst.State = runtimes.StatePaused
		}
		// The kubelet starts the workload (with its entrypoint) only after the enforcer,
		// a native sidecar, passed its startup probe: a running workload is complete.
		inst.Complete = true
	}
	return inst
}

// evictionOf says how the cluster evicted pod, or "" when it did not: the kubelet under
// node pressure fails it with reason Evicted; the Eviction API (a drain), the
// scheduler's preemption, the taint manager and the kubelet mark it with a
// DisruptionTarget condition before they delete or stop it. The gateway's own deletes
// carry no such condition.
func evictionOf(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			if msg := strings.TrimSpace(c.Message); msg != "" {
				return c.Reason + ": " + msg
			}
			return c.Reason
		}
	}
	if pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == "Evicted" {
		if msg := strings.TrimSpace(pod.Status.Message); msg != "" {
			return msg
		}
		return pod.Status.Reason
	}
	return ""
}

// startFailure explains why a pod that is not running yet will not start by itself,
// or returns nil while it still may. A pull of the sandbox's image that failed is a
// runtimes.PullError with one of the fixed reasons (the kubelet's message quotes the
// registry, so it stays in the error's text for the log only); a failed pull of another
// image (the agent's) is the platform's fault and no PullError.
func startFailure(pod *corev1.Pod) error {
	var sandboxImage string
	for _, c := range pod.Spec.Containers {
		if c.Name == WorkloadContainer {
			sandboxImage = c.Image
		}
	}
	statuses := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for _, cs := range statuses {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "InvalidImageName":
			if cs.Image != sandboxImage {
				return fmt.Errorf("container %s: %s: %s", cs.Name, w.Reason, w.Message)
			}
			reason, denied := runtimes.PullReason(0, w.Message)
			if w.Reason == "InvalidImageName" {
				reason, denied = runtimes.PullReasonInvalidName, true
			}
			return fmt.Errorf("container %s: %s: %s: %w", cs.Name, w.Reason, w.Message,
				&runtimes.PullError{Image: sandboxImage, Reason: reason, Denied: denied})
		case "ErrImageNeverPull":
			return fmt.Errorf("container %s: %s: %s: %w", cs.Name, w.Reason, w.Message, runtimes.ErrImageNotFound)
		case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
			return fmt.Errorf("container %s: %s: %s", cs.Name, w.Reason, w.Message)
		}
	}
	return nil
}
