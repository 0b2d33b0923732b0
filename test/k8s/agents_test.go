package k8s_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sandgate/sandgate/runtimes"
	sgk8s "github.com/sandgate/sandgate/runtimes/kubernetes"
)

// agentRunner stands in for the container runtime of the kwok nodes (the real node's
// pods are its kubelet's): for every sandbox pod kwok reports Running it starts a real
// sandbox-agent bound to the pod's loopback IP, with the workload container's command and
// environment, and it stops that process when the pod is deleted or fails. It watches
// every namespace through an informer, as a kubelet watches its pods.
type agentRunner struct {
	binary string
	dir    string

	mu    sync.Mutex
	procs map[types.UID]*agentProcess
	// started counts agent processes started, for tests that check nothing was restarted.
	started atomic.Int64
	stop    chan struct{}
	factory informers.SharedInformerFactory
}

type agentProcess struct {
	pod  string
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

func startAgentRunner(kube kubernetes.Interface, binary, dir string) (*agentRunner, error) {
	a := &agentRunner{binary: binary, dir: dir, procs: map[types.UID]*agentProcess{}, stop: make(chan struct{})}
	a.factory = informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = runtimes.LabelID }))
	inf := a.factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.sync(obj, false) },
		UpdateFunc: func(_, obj any) { a.sync(obj, false) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			a.sync(obj, true)
		},
	})
	if err != nil {
		return nil, err
	}
	a.factory.Start(a.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		a.Close()
		return nil, fmt.Errorf("agent runner: pod informer did not sync")
	}
	return a, nil
}

// sync starts or stops the agent of one pod to match its state.
func (a *agentRunner) sync(obj any, deleted bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || (realNode.name != "" && pod.Spec.NodeName == realNode.name) {
		// The real node's kubelet runs its pods' containers itself.
		return
	}
	running := !deleted && pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != ""
	a.mu.Lock()
	p, has := a.procs[pod.UID]
	a.mu.Unlock()
	switch {
	case running && !has:
		if err := a.startAgent(pod); err != nil {
			fmt.Fprintf(os.Stderr, "agent runner: pod %s/%s: %v\n", pod.Namespace, pod.Name, err)
		}
	case !running && has:
		a.mu.Lock()
		delete(a.procs, pod.UID)
		a.mu.Unlock()
		go p.terminate()
	}
}

// startAgent runs the pod's workload command the way a container runtime would, with the
// agent binary at the path the pod names and the pod IP as its address.
func (a *agentRunner) startAgent(pod *corev1.Pod) error {
	var workload *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == sgk8s.WorkloadContainer {
			workload = &pod.Spec.Containers[i]
		}
	}
	if workload == nil || len(workload.Command) == 0 {
		return fmt.Errorf("no %s container with a command", sgk8s.WorkloadContainer)
	}
	// The kubelet's $(VAR) expansion: env values see the variables before them, the
	// command sees them all.
	vars := map[string]string{}
	env := []string{"PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}
	for _, e := range workload.Env {
		v := expandKubelet(e.Value, vars)
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	args := make([]string, len(workload.Command))
	for i, c := range workload.Command {
		args[i] = expandKubelet(c, vars)
	}
	if !strings.HasSuffix(args[0], "/sandbox-agent") {
		return fmt.Errorf("workload command %q does not run the agent", args[0])
	}
	home := filepath.Join(a.dir, string(pod.UID))
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	addr := pod.Status.PodIP + ":44772"
	// Host processes without a pids limit of their own need no threads in reserve, and a
	// thousand agents with them would use up the host's pids.
	env = append(env, "HOME="+home, "SANDGATE_AGENT_ADDR="+addr, "SANDGATE_AGENT_RESERVED_THREADS=0")
	log, err := os.Create(filepath.Join(home, "agent.log"))
	if err != nil {
		return err
	}
	// Each agent is PID 1 of its own PID namespace with its own /proc, as in a pod: the
	// agent's orphan reaper scans /proc, and a thousand agents each scanning the host's
	// thousands of processes would measure the harness, not sandgate.
	cmd := exec.Command("unshare", append([]string{"--pid", "--fork", "--mount-proc", "--kill-child", a.binary}, args[1:]...)...)
	cmd.Dir = home
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that stopping it stops the entrypoint and what it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	p := &agentProcess{pod: pod.Namespace + "/" + pod.Name, addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	a.started.Add(1)
	a.mu.Lock()
	a.procs[pod.UID] = p
	a.mu.Unlock()
	return nil
}

// terminate stops an agent like a kubelet stopping a container: SIGTERM (the agent
// forwards it to the entrypoint), SIGKILL to the whole group after a grace period.
func (p *agentProcess) terminate() {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
}

// running reports how many agent processes run now.
func (a *agentRunner) running() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.procs)
}

// runningIn reports the agents of pods in one namespace.
func (a *agentRunner) runningIn(namespace string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, p := range a.procs {
		if strings.HasPrefix(p.pod, namespace+"/") {
			n++
		}
	}
	return n
}

// Close stops the informer and every agent.
func (a *agentRunner) Close() {
	close(a.stop)
	a.factory.Shutdown()
	a.mu.Lock()
	procs := a.procs
	a.procs = map[types.UID]*agentProcess{}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func(p *agentProcess) { defer wg.Done(); p.terminate() }(p)
	}
	wg.Wait()
}

// expandKubelet applies the kubelet's rules for command and env values: $(NAME) becomes
// the value of an earlier variable (left as written when there is none) and $$ becomes $.
func expandKubelet(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
