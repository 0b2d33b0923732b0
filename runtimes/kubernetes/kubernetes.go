// Package kubernetes runs sandboxes as Pods of a Kubernetes cluster, in one namespace.
//
// Each sandbox is one pod labelled sandgate.io/id, sandgate.io/tenant and sandgate.io/pool
// (exact values and the rest of what adoption needs sit in sandgate.io/* annotations).
// An init container copies the static sandbox-agent from the sandgate/agent image into an
// emptyDir, and the workload container runs it as PID 1 in front of the user's
// entrypoint, so any image works. The egress enforcer, when asked for, is a native
// sidecar holding NET_ADMIN whose startup probe keeps the workload from starting before
// its rules are in place. The gateway reaches the agent at the pod IP.
//
// What the runtime knows about pods comes from one shared informer (the namespace, label
// selector sandgate.io/id): Inspect and List read its cache, never the API server, so
// reconciliation, pool health checks and claims make no API call at all. The only API
// writes are a pod create per sandbox and a pod delete per removal, both under
// client-go's rate limiter (Options.QPS, Options.Burst).
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
)

// Options configure the Kubernetes runtime.
type Options struct {
	// Kubeconfig is the path of a kubeconfig file; empty uses the in-cluster config
	// (the gateway's service account).
	Kubeconfig string
	// Namespace holds every sandbox pod (default "sandgate-sandboxes"). One runtime owns
	// one namespace: gateways of other deployments never see each other's pods.
	Namespace string
	// AgentImage holds /sandbox-agent (default "sandgate/agent:latest"; images/agent.sh
	// builds it).
	AgentImage string
	// AgentImagePullPolicy and ImagePullPolicy apply to the agent image and to the
	// sandbox images (default IfNotPresent).
	AgentImagePullPolicy corev1.PullPolicy
	ImagePullPolicy      corev1.PullPolicy
	// GVisorRuntimeClass is the RuntimeClass of sandboxes whose spec asks for gVisor
	// ("runsc"; default "gvisor").
	GVisorRuntimeClass string
	// OCIRuntime is the runtime of sandboxes whose spec names none ("runc", "runsc").
	OCIRuntime string
	// PriorityClassName, when set, is given to every sandbox pod.
	PriorityClassName string
	// QPS and Burst bound the requests per second to the API server (default 50 and 100),
	// so that filling a large pool does not flood it.
	QPS   float32
	Burst int
	// DefaultCPUMillis and DefaultMemoryBytes apply when a spec has none (0: 1 CPU, 1 GiB).
	DefaultCPUMillis   int64
	DefaultMemoryBytes int64
	// ReadOnlyRootfs makes every workload's root filesystem read-only, with in-memory
	// emptyDirs at WritablePaths (nil: /workspace and /tmp) of WritableBytes each
	// (0: 256 MiB).
	ReadOnlyRootfs bool
	WritablePaths  []string
	WritableBytes  int64
	// EphemeralStorage bounds each workload's writable layer and logs (a Kubernetes
	// quantity, e.g. "10Gi"; empty or "0": no bound). The kubelet evicts a pod past it,
	// so one sandbox cannot fill its node's disk. It is a limit only: the pod requests
	// no ephemeral storage of the scheduler.
	EphemeralStorage string
	// NoEgress turns egress enforcement off: no sandbox gets an enforcer sidecar.
	NoEgress bool
	// SandboxDNS are the DNS servers of every sandbox pod (SANDGATE_SANDBOX_DNS: IPv4,
	// not loopback, at most MaxSandboxDNS). With them each pod gets dnsPolicy None and
	// these as its only nameservers, and its enforcer closes them on every port to all
	// but its own proxies; without them the pod resolves as the cluster's dnsPolicy
	// default (ClusterFirst) says.
	SandboxDNS []netip.Addr
	// VaultUpstreamCA is extra PEM roots the credential vault trusts for upstream TLS
	// (SANDGATE_VAULT_UPSTREAM_CA names its file).
	VaultUpstreamCA []byte
	// StartTimeout bounds Create's wait for a pod to run (scheduling and image pulls
	// included; default 2 minutes).
	StartTimeout time.Duration
	// DeleteGracePeriod is the pod's termination grace period (default 1s: a sandbox has
	// nothing to flush that its owner has not already asked for).
	DeleteGracePeriod time.Duration
	// Agents calls the enforcers while their sandboxes start (nil: a client of its own).
	Agents *agentclient.Client
	// UserAgent names the client in the API server's logs (default "sandgate").
	UserAgent string
	Logger    *slog.Logger
}

func (o *Options) defaults() {
	if o.Namespace == "" {
		o.Namespace = "sandgate-sandboxes"
	}
	if o.AgentImage == "" {
		o.AgentImage = "sandgate/agent:latest"
	}
	if o.AgentImagePullPolicy == "" {
		o.AgentImagePullPolicy = corev1.PullIfNotPresent
	}
	if o.ImagePullPolicy == "" {
		o.ImagePullPolicy = corev1.PullIfNotPresent
	}
	if o.GVisorRuntimeClass == "" {
		o.GVisorRuntimeClass = "gvisor"
	}
	if o.QPS == 0 {
		o.QPS = 50
	}
	if o.Burst == 0 {
		o.Burst = 100
	}
	if o.DefaultCPUMillis == 0 {
		o.DefaultCPUMillis = 1000
	}
	if o.DefaultMemoryBytes == 0 {
		o.DefaultMemoryBytes = 1 << 30
	}
	if o.WritableBytes <= 0 {
		o.WritableBytes = 256 << 20
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if o.DeleteGracePeriod == 0 {
		o.DeleteGracePeriod = time.Second
	}
	if o.UserAgent == "" {
		o.UserAgent = "sandgate"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Agents == nil {
		o.Agents = agentclient.New()
	}
}

// Runtime is the Kubernetes implementation of runtimes.Runtime.
type Runtime struct {
	opts   Options
	log    *slog.Logger
	agents *agentclient.Client
	// ephemeralStorage is Options.EphemeralStorage parsed (nil: no bound).
	ephemeralStorage *resource.Quantity
	client           kubernetes.Interface
	pods             listerscorev1.PodNamespaceLister
	synced           cache.InformerSynced
	stop             chan struct{}
	// factory owns the informer; Close shuts it down.
	factory informers.SharedInformerFactory

	// waiters are the Creates waiting for their pod to change, by sandbox id.
	mu      sync.Mutex
	waiters map[string][]chan struct{}
	// deaths reports sandboxes that died to WatchDeaths (deaths.go); under mu.
	deaths deathWatch
}

// New connects to the API server, starts the pod informer and waits for its first list.
func New(ctx context.Context, opts Options) (*Runtime, error) {
	opts.defaults()
	cfg, err := restConfig(opts.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	cfg.UserAgent = opts.UserAgent
	// Protobuf is smaller and cheaper to decode than JSON for pods.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return newWithClient(ctx, client, opts)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster Kubernetes config (set SANDGATE_KUBECONFIG outside a cluster): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

func newWithClient(ctx context.Context, client kubernetes.Interface, opts Options) (*Runtime, error) {
	if len(opts.SandboxDNS) > MaxSandboxDNS {
		return nil, fmt.Errorf("sandbox DNS servers: %d given, a pod takes at most %d", len(opts.SandboxDNS), MaxSandboxDNS)
	}
	r := &Runtime{opts: opts, log: opts.Logger, agents: opts.Agents, client: client, stop: make(chan struct{}), waiters: map[string][]chan struct{}{}}
	if opts.EphemeralStorage != "" {
		q, err := resource.ParseQuantity(opts.EphemeralStorage)
		if err != nil || q.Sign() < 0 {
			return nil, fmt.Errorf("ephemeral storage %q: want a Kubernetes quantity such as 10Gi, or 0 for no bound", opts.EphemeralStorage)
		}
		if !q.IsZero() {
			r.ephemeralStorage = &q
		}
	}
	r.factory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = runtimes.LabelID }))
	podInformer := r.factory.Core().V1().Pods()
	inf := podInformer.Informer()
	// Managed fields are most of a pod's bytes and nothing here reads them.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if pod, ok := obj.(*corev1.Pod); ok {
			pod.ManagedFields = nil
		}
		return obj, nil
	})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.podChanged(obj); r.noteDeath(obj, false) },
		UpdateFunc: func(_, obj any) { r.podChanged(obj); r.noteDeath(obj, false) },
		DeleteFunc: func(obj any) { r.podChanged(obj); r.noteDeath(obj, true) },
	}); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	r.pods = podInformer.Lister().Pods(opts.Namespace)
	r.synced = inf.HasSynced
	r.factory.Start(r.stop)
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), r.synced) {
		r.Close()
		return nil, fmt.Errorf("list pods in namespace %s: the API server did not answer within 30s (is the namespace there, and may this identity list and watch its pods?): %w", opts.Namespace, runtimes.ErrUnavailable)
	}
	return r, nil
}

// Name implements runtimes.Runtime.
func (r *Runtime) Name() string { return "kubernetes" }

// Namespace is where this runtime's pods live.
func (r *Runtime) Namespace() string { return r.opts.Namespace }

// Close implements runtimes.Runtime: it stops the informer.
func (r *Runtime) Close() error {
	select {
	case <-r.stop:
	default:
		close(r.stop)
		r.factory.Shutdown()
	}
	return nil
}

// EnforcesEgress reports whether sandboxes created with an EgressSpec get an enforcer.
func (r *Runtime) EnforcesEgress() bool { return !r.opts.NoEgress }

// podChanged wakes the Creates waiting for this pod.
func (r *Runtime) podChanged(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	id := pod.Labels[runtimes.LabelID]
	r.mu.Lock()
	for _, ch := range r.waiters[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	r.mu.Unlock()
}

// watch registers a wake-up channel for changes of one sandbox's pod.
func (r *Runtime) watch(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	r.waiters[id] = append(r.waiters[id], ch)
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		list := r.waiters[id]
		for i, c := range list {
			if c == ch {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(r.waiters, id)
		} else {
			r.waiters[id] = list
		}
	}
}

// Create implements runtimes.Runtime: it creates the pod and returns once the informer
// shows its workload container running with a pod IP and, with egress, once the
// enforcer's signed report of its policy in force is the policy it was given
// (checkPolicyInForce). A pod that fails either is deleted, with its pull secret.
func (r *Runtime) Create(ctx context.Context, spec runtimes.Spec) (runtimes.Instance, error) {
	withEgress := spec.Egress != nil && !r.opts.NoEgress
	ociRuntime := spec.Runtime
	if ociRuntime == "" {
		ociRuntime = r.opts.OCIRuntime
	}
	runtimeClass := ""
	if strings.HasPrefix(ociRuntime, "runsc") {
		if withEgress {
			// gVisor's network stack has no nftables, so the enforcer could not install
			// its rules; refuse rather than run the sandbox unenforced.
			return runtimes.Instance{}, fmt.Errorf("egress enforcement is not available under gVisor (runtime class %s); use runc for sandboxes with an egress policy: %w", r.opts.GVisorRuntimeClass, errors.ErrUnsupported)
		}
		runtimeClass = r.opts.GVisorRuntimeClass
	}
	claims, err := r.ensureClaims(ctx, spec)
	if err != nil {
		return runtimes.Instance{}, err
	}
	pod := r.podFor(spec, withEgress, runtimeClass)
	if withEgress && spec.Egress.CredentialProxy {
		if err := r.withCredentialProxy(pod, spec); err != nil {
			return runtimes.Instance{}, err
		}
	}
	addVolumes(pod, spec, claims)

	changed, unwatch := r.watch(spec.ID)
	defer unwatch()
	created, err := r.client.CoreV1().Pods(r.opts.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		r.deleteClaims(context.WithoutCancel(ctx), claims)
		if apierrors.IsAlreadyExists(err) {
			return runtimes.Instance{}, fmt.Errorf("create pod %s: a pod of that name exists already: %w", pod.Name, err)
		}
		return runtimes.Instance{}, fmt.Errorf("create pod %s: %w", pod.Name, err)
	}
	if spec.ImageAuth != nil {
		err = r.createPullSecret(ctx, spec, created)
	}
	var inst runtimes.Instance
	if err == nil {
		inst, err = r.waitStarted(ctx, spec.ID, changed)
	}
	if err == nil && withEgress && checksEnforcerAt(inst.Address) {
		err = r.checkPolicyInForce(ctx, spec, inst.Address)
	}
	if err != nil {
		delCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := r.Delete(delCtx, spec.ID); derr != nil {
			r.log.Warn("remove a pod that did not start", "id", spec.ID, "err", derr)
		}
		r.deleteClaims(delCtx, claims)
		return runtimes.Instance{}, err
	}
	return inst, nil
}

// waitStarted waits, on informer events, until the sandbox's pod runs, fails, or the
// start timeout passes.
func (r *Runtime) waitStarted(ctx context.Context, id string, changed <-chan struct{}) (runtimes.Instance, error) {
	timeout := time.NewTimer(r.opts.StartTimeout)
	defer timeout.Stop()
	for {
		pod, err := r.pods.Get(PodName(id))
		if err == nil {
			inst := instanceOf(pod)
			switch inst.State {
			case runtimes.StateRunning:
				return inst, nil
			case runtimes.StateExited:
				return runtimes.Instance{}, fmt.Errorf("pod %s stopped before it ran: %s", pod.Name, inst.Message)
			}
			if err := startFailure(pod); err != nil {
				return runtimes.Instance{}, fmt.Errorf("pod %s cannot start: %w", pod.Name, err)
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return runtimes.Instance{}, fmt.Errorf("pod %s did not start: %w", PodName(id), ctx.Err())
		case <-timeout.C:
			return runtimes.Instance{}, fmt.Errorf("pod %s did not run within %s%s", PodName(id), r.opts.StartTimeout, r.pendingReason(id))
		}
	}
}

// pendingReason describes why a pod is still pending, from its conditions and statuses.
func (r *Runtime) pendingReason(id string) string {
	pod, err := r.pods.Get(PodName(id))
	if err != nil {
		return ""
	}
	for _, c := range pod.Status.Conditions {
		if c.Status == corev1.ConditionFalse && c.Message != "" {
			return fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
		}
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return fmt.Sprintf(" (container %s: %s %s)", cs.Name, w.Reason, w.Message)
		}
	}
	return ""
}

// Inspect implements runtimes.Runtime from the informer's cache; a pod the cluster
// evicted and removed is answered from its last view for evictionMemory.
func (r *Runtime) Inspect(ctx context.Context, id string) (runtimes.Instance, error) {
	pod, err := r.pods.Get(PodName(id))
	if apierrors.IsNotFound(err) {
		r.mu.Lock()
		inst, evicted := r.deaths.evictedView(id, time.Now())
		r.mu.Unlock()
		if evicted {
			return inst, nil
		}
		return runtimes.Instance{}, fmt.Errorf("sandbox %s: %w", id, runtimes.ErrNotFound)
	}
	if err != nil {
		return runtimes.Instance{}, fmt.Errorf("pod %s: %w", PodName(id), err)
	}
	return instanceOf(pod), nil
}

// List implements runtimes.Runtime from the informer's cache. Pods being deleted are
// left out: they are on their way out and must not be adopted.
func (r *Runtime) List(ctx context.Context) ([]runtimes.Instance, error) {
	if !r.synced() {
		return nil, fmt.Errorf("pod cache not synced: %w", runtimes.ErrUnavailable)
	}
	pods, err := r.pods.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	out := make([]runtimes.Instance, 0, len(pods))
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || pod.Labels[runtimes.LabelID] == "" {
			continue
		}
		out = append(out, instanceOf(pod))
	}
	return out, nil
}

// Delete implements runtimes.Runtime. The pod is gone from List at once; the kubelet
// stops it within DeleteGracePeriod.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	grace := int64(r.opts.DeleteGracePeriod / time.Second)
	// Only a pod made with image.auth has a pull secret (the informer's copy says so,
	// without another API call for every other sandbox).
	withSecret := false
	var claims []string
	if pod, err := r.pods.Get(PodName(id)); err == nil {
		withSecret = len(pod.Spec.ImagePullSecrets) > 0
		claims = claimsToDelete(pod)
	}
	err := r.client.CoreV1().Pods(r.opts.Namespace).Delete(ctx, PodName(id), metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", PodName(id), err)
	}
	r.deleteClaims(ctx, claims)
	r.mu.Lock()
	delete(r.deaths.evicted, id)
	r.mu.Unlock()
	// The garbage collector would remove it with the pod; removing it now does not leave
	// credentials behind for the grace period (or on a cluster without a collector).
	if withSecret {
		return r.deletePullSecret(ctx, id)
	}
	return nil
}

// Logs implements runtimes.Runtime: the tail of the workload container's log.
func (r *Runtime) Logs(ctx context.Context, id string, lines int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tail := int64(lines)
	limit := int64(64 << 10)
	rc, err := r.client.CoreV1().Pods(r.opts.Namespace).GetLogs(PodName(id), &corev1.PodLogOptions{
		Container: WorkloadContainer, TailLines: &tail, LimitBytes: &limit,
	}).Stream(ctx)
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("sandbox %s: %w", id, runtimes.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("logs of pod %s: %w", PodName(id), err)
	}
	defer rc.Close()
	data, _ := io.ReadAll(io.LimitReader(rc, limit))
	return strings.TrimSpace(string(data)), nil
}

var _ runtimes.Runtime = (*Runtime)(nil)
