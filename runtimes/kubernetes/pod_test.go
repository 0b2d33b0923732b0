package kubernetes

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/egress"
)

func testRuntime() *Runtime {
	opts := Options{AgentImage: "sandgate/agent:test"}
	opts.defaults()
	return &Runtime{opts: opts}
}

// TestPodRoundTrip: what podFor writes, instanceOf reads back (what adoption relies on).
func TestPodRoundTrip(t *testing.T) {
	r := testRuntime()
	exp := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	spec := runtimes.Spec{
		ID: "0f8e2b9c-1111-4222-8333-444455556666", Tenant: "acme corp.", Pool: "warm", Image: "python:3.12",
		Entrypoint: []string{"sh", "-c", "echo $(date) $$HOME"}, Env: map[string]string{"B": "2$", "A": "$(B)"},
		Labels:     map[string]string{"sandgate.io/metadata": `{"team":"a"}`},
		AgentToken: "agent-tok", EgressToken: "egress-tok", ExpiresAt: &exp, CreatedAt: exp.Add(-time.Hour),
		Egress: &runtimes.EgressSpec{Policy: []byte(`{"defaultAction":"deny"}`), PlatformDeny: []string{"169.254.0.0/16"}},
	}
	pod := r.podFor(spec, true, "")
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7", ContainerStatuses: []corev1.ContainerStatus{
		{Name: WorkloadContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
	}}
	inst := instanceOf(pod)
	want := runtimes.Instance{
		ID: spec.ID, Tenant: spec.Tenant, Pool: "warm", Image: "python:3.12", Entrypoint: spec.Entrypoint,
		State: runtimes.StateRunning, Address: "10.0.0.7", AgentToken: "agent-tok", EgressToken: "egress-tok",
		ExpiresAt: &exp, CreatedAt: spec.CreatedAt, Complete: true,
	}
	inst.Labels = nil
	if diff := cmp.Diff(want, inst); diff != "" {
		t.Fatalf("instance (-want +got):\n%s", diff)
	}
	if got := instanceOf(pod).Labels["sandgate.io/metadata"]; got != `{"team":"a"}` {
		t.Errorf("metadata annotation = %q", got)
	}
	// Values reach the process verbatim once the kubelet has expanded them.
	w := pod.Spec.Containers[0]
	if got := Unescape(w.Command[len(w.Command)-1]); got != "echo $(date) $$HOME" {
		t.Errorf("entrypoint after expansion = %q", got)
	}
	if w.Env[0].Name != "A" || Unescape(w.Env[0].Value) != "$(B)" || Unescape(w.Env[1].Value) != "2$" {
		t.Errorf("env = %+v", w.Env)
	}
	if pod.Labels[runtimes.LabelTenant] == spec.Tenant || !strings.HasPrefix(pod.Labels[runtimes.LabelTenant], "h-") {
		t.Errorf("tenant label %q: a name that is no label value must be digested", pod.Labels[runtimes.LabelTenant])
	}
	for _, e := range w.Env {
		if e.Name == EnvEgressToken {
			t.Error("the workload holds the enforcer's token")
		}
	}
}

func TestInstanceStates(t *testing.T) {
	now := metav1.Now()
	running := corev1.ContainerStatus{Name: WorkloadContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	evictedByAPI := []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting"}}
	for _, tt := range []struct {
		name    string
		pod     corev1.Pod
		state   runtimes.State
		message string
		evicted bool
	}{
		{"pending", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, runtimes.StateCreated, "", false},
		{"running", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "1.2.3.4", ContainerStatuses: []corev1.ContainerStatus{running}}}, runtimes.StateRunning, "", false},
		{"running, marked paused", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{annotationPaused: "true"}}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "1.2.3.4", ContainerStatuses: []corev1.ContainerStatus{running}}}, runtimes.StatePaused, "", false},
		{"marked paused, exited", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{annotationPaused: "true"}}, Status: corev1.PodStatus{Phase: corev1.PodFailed}}, runtimes.StateExited, "failed", false},
		{"running without an IP yet", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running}}}, runtimes.StateCreated, "", false},
		{"being deleted", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "1.2.3.4", ContainerStatuses: []corev1.ContainerStatus{running}}}, runtimes.StateExited, "being deleted", false},
		{"evicted by the kubelet", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."}}, runtimes.StateExited, "evicted: The node was low", true},
		{"evicted by the API, not yet deleted", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "1.2.3.4", ContainerStatuses: []corev1.ContainerStatus{running}, Conditions: evictedByAPI}}, runtimes.StateExited, "evicted: EvictionByEvictionAPI", true},
		{"evicted by the API, being deleted", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "1.2.3.4", ContainerStatuses: []corev1.ContainerStatus{running}, Conditions: evictedByAPI}}, runtimes.StateExited, "evicted: EvictionByEvictionAPI", true},
		{"node lost", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "NodeLost"}}, runtimes.StateExited, "NodeLost", false},
		{"out of memory", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: WorkloadContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}}}}, runtimes.StateExited, "code 137 (killed: out of memory)", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inst := instanceOf(&tt.pod)
			if inst.State != tt.state || !strings.Contains(inst.Message, tt.message) || inst.Evicted != tt.evicted {
				t.Fatalf("state %s message %q evicted %t, want %s containing %q, evicted %t", inst.State, inst.Message, inst.Evicted, tt.state, tt.message, tt.evicted)
			}
		})
	}
}

// TestEgressSidecarIsolated: the enforcer runs from the agent image with the runtime's
// environment only; the workload cannot see its processes (no shared PID namespace) nor
// its state volume, and the enforcer keeps its policy in that volume.
func TestEgressSidecarIsolated(t *testing.T) {
	r := testRuntime()
	spec := runtimes.Spec{ID: "0f8e2b9c-1111-4222-8333-444455556666", Tenant: "t", Image: "python:3.12", EgressToken: "egress-tok",
		Egress: &runtimes.EgressSpec{Policy: []byte(`{"defaultAction":"deny"}`)}}
	pod := r.podFor(spec, true, "")
	if pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace {
		t.Fatal("the pod shares one PID namespace between the workload and its enforcer")
	}
	var sidecar *corev1.Container
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == EgressContainer {
			sidecar = &pod.Spec.InitContainers[i]
		}
	}
	if sidecar == nil {
		t.Fatal("no egress sidecar")
	}
	// The enforcer runs from sandgate's agent image, never from the workload's (whose
	// files and environment a tenant controls), and its environment is the runtime's.
	if sidecar.Image != r.opts.AgentImage {
		t.Errorf("enforcer image %q, want the agent image %q", sidecar.Image, r.opts.AgentImage)
	}
	for _, e := range sidecar.Env {
		if e.Name != EnvEgressToken && e.Name != EnvEgressPolicy {
			t.Errorf("enforcer environment has %s beside the runtime's two variables", e.Name)
		}
	}
	if len(sidecar.EnvFrom) != 0 {
		t.Errorf("enforcer environment comes from %v", sidecar.EnvFrom)
	}
	if !strings.Contains(strings.Join(sidecar.Command, " "), "--state-file "+egressStateDir+"/") {
		t.Errorf("enforcer command %v keeps no state file", sidecar.Command)
	}
	if len(sidecar.VolumeMounts) != 1 || sidecar.VolumeMounts[0].Name != EgressStateVolume {
		t.Errorf("sidecar mounts %v, want the state volume", sidecar.VolumeMounts)
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.Name == EgressStateVolume {
			t.Error("the workload mounts the enforcer's state volume")
		}
	}
}

// TestSandboxDNSPod: with the operator's sandbox DNS servers, the pod's only
// nameservers are those (never the node's resolv.conf) and its enforcer is told them;
// without, the pod resolves as the cluster says.
func TestSandboxDNSPod(t *testing.T) {
	spec := runtimes.Spec{ID: "0f8e2b9c-1111-4222-8333-444455556666", Tenant: "t", Image: "python:3.12", EgressToken: "egress-tok",
		Egress: &runtimes.EgressSpec{Policy: []byte(`{"defaultAction":"deny"}`)}}
	sidecarEnv := func(pod *corev1.Pod) map[string]string {
		env := map[string]string{}
		for _, c := range pod.Spec.InitContainers {
			if c.Name == EgressContainer {
				for _, e := range c.Env {
					env[e.Name] = e.Value
				}
			}
		}
		return env
	}

	r := testRuntime()
	r.opts.SandboxDNS = []netip.Addr{netip.MustParseAddr("192.0.2.53"), netip.MustParseAddr("198.51.100.53")}
	pod := r.podFor(spec, true, "")
	if pod.Spec.DNSPolicy != corev1.DNSNone {
		t.Errorf("dnsPolicy %q, want None", pod.Spec.DNSPolicy)
	}
	if pod.Spec.DNSConfig == nil || !slices.Equal(pod.Spec.DNSConfig.Nameservers, []string{"192.0.2.53", "198.51.100.53"}) {
		t.Errorf("dnsConfig %+v, want the operator's two nameservers", pod.Spec.DNSConfig)
	}
	if got := sidecarEnv(pod)[egress.EnvDNSServers]; got != "192.0.2.53,198.51.100.53" {
		t.Errorf("enforcer's %s = %q", egress.EnvDNSServers, got)
	}

	pod = testRuntime().podFor(spec, true, "")
	if pod.Spec.DNSPolicy != "" || pod.Spec.DNSConfig != nil {
		t.Errorf("without sandbox DNS servers: dnsPolicy %q, dnsConfig %+v, want the cluster's default", pod.Spec.DNSPolicy, pod.Spec.DNSConfig)
	}
	if _, ok := sidecarEnv(pod)[egress.EnvDNSServers]; ok {
		t.Errorf("without sandbox DNS servers the enforcer is told %s", egress.EnvDNSServers)
	}
}

// TestCredentialProxyPod: with the credential proxy, the CA key is in the enforcer
// sidecar only; the workload gets the certificate through the trust init container
// (which runs the workload's image) and its trust variables, never the key.
func TestCredentialProxyPod(t *testing.T) {
	r := testRuntime()
	r.opts.VaultUpstreamCA = []byte("-----BEGIN CERTIFICATE-----\nup\n-----END CERTIFICATE-----\n")
	spec := runtimes.Spec{ID: "0f8e2b9c-1111-4222-8333-444455556666", Tenant: "t", Image: "python:3.12",
		Entrypoint: []string{"sleep", "1"}, AgentToken: "a", EgressToken: "e",
		Egress: &runtimes.EgressSpec{Policy: []byte(`{"defaultAction":"deny"}`), CredentialProxy: true}}
	pod := r.podFor(spec, true, "")
	if err := r.withCredentialProxy(pod, spec); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range pod.Spec.InitContainers {
		names = append(names, c.Name)
	}
	if diff := cmp.Diff([]string{InstallContainer, VaultTrustContainer, EgressContainer}, names); diff != "" {
		t.Fatalf("init containers (-want +got):\n%s", diff)
	}
	envOf := func(c corev1.Container) map[string]string {
		m := map[string]string{}
		for _, e := range c.Env {
			m[e.Name] = e.Value
		}
		return m
	}
	sidecar, trust, workload := pod.Spec.InitContainers[2], pod.Spec.InitContainers[1], pod.Spec.Containers[0]
	if se := envOf(sidecar); !strings.Contains(se[EnvVaultCAKey], "PRIVATE KEY") || !strings.Contains(se[EnvVaultCACert], "CERTIFICATE") || se[EnvVaultUpstreamCA] == "" ||
		sidecar.Command[len(sidecar.Command)-1] != "--credential-proxy" {
		t.Fatalf("sidecar: command %v env %v", sidecar.Command, se)
	}
	for _, c := range append([]corev1.Container{trust, workload}, pod.Spec.InitContainers[0]) {
		for _, e := range c.Env {
			if e.Name == EnvVaultCAKey || strings.Contains(e.Value, "PRIVATE KEY") {
				t.Fatalf("container %s holds the CA key", c.Name)
			}
		}
	}
	if trust.Image != spec.Image || envOf(trust)[EnvVaultCACert] != envOf(sidecar)[EnvVaultCACert] || trust.Command[1] != "vault-trust" {
		t.Fatalf("trust container: %+v", trust)
	}
	we := envOf(workload)
	if we["SSL_CERT_FILE"] != vaultBundlePath || we["REQUESTS_CA_BUNDLE"] != vaultBundlePath || we["NODE_EXTRA_CA_CERTS"] != vaultCAPath {
		t.Fatalf("workload trust env: %v", we)
	}
	last := workload.VolumeMounts[len(workload.VolumeMounts)-1]
	if last.MountPath != "/etc/ssl/certs/ca-certificates.crt" || last.SubPath != "vault/ca-bundle.pem" || !last.ReadOnly {
		t.Fatalf("system bundle mount: %+v", last)
	}
	if pod.Annotations[annotationCredentialProxy] != "enabled" || pod.Spec.ShareProcessNamespace != nil {
		t.Fatalf("annotations %v, shareProcessNamespace %v", pod.Annotations, pod.Spec.ShareProcessNamespace)
	}
}

// TestTooManySandboxDNS: a pod takes at most three nameservers, so a runtime given more
// refuses to start rather than have the API server refuse every pod.
func TestTooManySandboxDNS(t *testing.T) {
	var servers []netip.Addr
	for _, s := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"} {
		servers = append(servers, netip.MustParseAddr(s))
	}
	_, err := newWithClient(t.Context(), nil, Options{SandboxDNS: servers})
	if err == nil || !strings.Contains(err.Error(), "at most 3") {
		t.Fatalf("runtime with four sandbox DNS servers: %v, want refused", err)
	}
}

// TestStartFailurePull: a failed pull of the sandbox's image is a PullError with one of
// the fixed reasons, not the kubelet's text; a failed pull of the agent image is not the
// caller's and is no PullError.
func TestStartFailurePull(t *testing.T) {
	const sandboxImage, agentImage = "127.0.0.1:5000/team/app:1", "sandgate/agent:test"
	pod := func(name, image, reason, message string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: WorkloadContainer, Image: sandboxImage}}}}
		st := corev1.ContainerStatus{Name: name, Image: image, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}
		if name == InstallContainer {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{st}
		} else {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{st}
		}
		return p
	}
	tests := []struct {
		name       string
		pod        *corev1.Pod
		wantReason string // empty: no PullError
		denied     bool
	}{
		{"wrong credentials", pod(WorkloadContainer, sandboxImage, "ErrImagePull",
			`failed to pull and unpack image "127.0.0.1:5000/team/app:1": failed to resolve reference: unexpected status from HEAD request to http://127.0.0.1:5000/v2/team/app/manifests/1: 401 Unauthorized`),
			runtimes.PullReasonUnauthorized, true},
		{"back-off after a missing tag", pod(WorkloadContainer, sandboxImage, "ImagePullBackOff",
			`Back-off pulling image "127.0.0.1:5000/team/app:1": ErrImagePull: 127.0.0.1:5000/team/app:1: not found`),
			runtimes.PullReasonNotFound, true},
		{"unreachable", pod(WorkloadContainer, sandboxImage, "ErrImagePull", `dial tcp 127.0.0.1:5000: connect: connection refused`),
			runtimes.PullReasonUnreachable, false},
		{"invalid name", pod(WorkloadContainer, sandboxImage, "InvalidImageName", `Failed to apply default image tag "x": couldn't parse`),
			runtimes.PullReasonInvalidName, true},
		{"the agent image", pod(InstallContainer, agentImage, "ErrImagePull", "401 Unauthorized"), "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := startFailure(tt.pod)
			if err == nil {
				t.Fatal("startFailure = nil, want an error")
			}
			var pe *runtimes.PullError
			if !errors.As(err, &pe) {
				if tt.wantReason != "" {
					t.Fatalf("startFailure = %v, want a PullError", err)
				}
				return
			}
			if tt.wantReason == "" || pe.Reason != tt.wantReason || pe.Denied != tt.denied || pe.Image != sandboxImage {
				t.Fatalf("PullError %+v, want reason %q denied %t for %s", pe, tt.wantReason, tt.denied, sandboxImage)
			}
		})
	}
}

// TestEphemeralStorageBound: the operator's bound on ephemeral storage is the
// workload's limit and no request (the scheduler reserves no disk; the kubelet evicts
// a pod past the bound); without one the workload has neither; a bound that is no
// quantity stops the runtime from starting.
func TestEphemeralStorageBound(t *testing.T) {
	spec := runtimes.Spec{ID: "0f8e2b9c-1111-4222-8333-444455556666", Tenant: "t", Image: "python:3.12"}
	workloadOf := func(r *Runtime) corev1.Container {
		for _, c := range r.podFor(spec, false, "").Spec.Containers {
			if c.Name == WorkloadContainer {
				return c
			}
		}
		t.Fatal("no workload container")
		return corev1.Container{}
	}
	r := testRuntime()
	q := resource.MustParse("2Gi")
	r.ephemeralStorage = &q
	res := workloadOf(r).Resources
	if got := res.Limits[corev1.ResourceEphemeralStorage]; got.Cmp(q) != 0 {
		t.Errorf("ephemeral-storage limit %v, want 2Gi", got.String())
	}
	if got, ok := res.Requests[corev1.ResourceEphemeralStorage]; !ok || !got.IsZero() {
		t.Errorf("ephemeral-storage request %v (set %v), want an explicit 0 (unset would default to the limit)", got.String(), ok)
	}
	if got := res.Requests[corev1.ResourceMemory]; got.Cmp(res.Limits[corev1.ResourceMemory]) != 0 {
		t.Errorf("memory request %v, want the limit %v", got.String(), res.Limits.Memory().String())
	}
	res = workloadOf(testRuntime()).Resources
	if _, ok := res.Limits[corev1.ResourceEphemeralStorage]; ok {
		t.Errorf("ephemeral-storage limit without a bound: %v", res.Limits)
	}
	for _, bad := range []string{"ten gigs", "-1Gi"} {
		if _, err := newWithClient(t.Context(), nil, Options{EphemeralStorage: bad}); err == nil || !strings.Contains(err.Error(), "ephemeral storage") {
			t.Errorf("ephemeral storage %q: %v, want refused", bad, err)
		}
	}
}
