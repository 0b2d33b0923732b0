package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
)

// annotationPaused marks a pod whose workload the agent holds frozen: Kubernetes has no
// pause of a pod, so the agent (PID 1 of the workload container, which shares its PID
// namespace with nothing else of the pod) stops every other process of the container
// with SIGSTOP and continues them on resume. The pod keeps its requests and its memory;
// its enforcer keeps running. The annotation makes every gateway's view (Inspect, List)
// say paused, also after a restart.
const annotationPaused = "sandgate.io/paused"

// agentFreezeTimeout bounds the agent's freeze (it scans until no process starts) and
// thaw.
const agentFreezeTimeout = 15 * time.Second

// Pause implements runtimes.Runtime: the agent freezes the workload, then the pod is
// marked paused. A mark that cannot be written thaws the workload again.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	inst, err := r.Inspect(ctx, id)
	if err != nil {
		return err
	}
	if inst.State != runtimes.StateRunning {
		return fmt.Errorf("sandbox %s is %s, not running: %w", id, inst.State, runtimes.ErrWrongState)
	}
	if _, err := r.agents.Agent(ctx, inst.Address, inst.AgentToken, http.MethodPost, agentproto.PathFreeze, nil, agentFreezeTimeout); err != nil {
		return fmt.Errorf("freeze sandbox %s: %w", id, agentRefusal(err))
	}
	if err := r.markPaused(ctx, id, true); err != nil {
		if _, thawErr := r.agents.Agent(context.WithoutCancel(ctx), inst.Address, inst.AgentToken, http.MethodPost, agentproto.PathThaw, nil, agentFreezeTimeout); thawErr != nil {
			r.log.Warn("a sandbox frozen without its pause mark could not be thawed", "sandbox", id, "error", thawErr)
		}
		return err
	}
	return nil
}

// Resume implements runtimes.Runtime: the agent thaws the workload, then the mark goes.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	inst, err := r.Inspect(ctx, id)
	if err != nil {
		return err
	}
	if inst.State != runtimes.StatePaused {
		return fmt.Errorf("sandbox %s is %s, not paused: %w", id, inst.State, runtimes.ErrWrongState)
	}
	if _, err := r.agents.Agent(ctx, inst.Address, inst.AgentToken, http.MethodPost, agentproto.PathThaw, nil, agentFreezeTimeout); err != nil {
		return fmt.Errorf("thaw sandbox %s: %w", id, agentRefusal(err))
	}
	return r.markPaused(ctx, id, false)
}

// agentRefusal makes an agent's NOT_SUPPORTED (an agent that is not PID 1 of its
// sandbox, or one older than the freeze) errors.ErrUnsupported, which callers report as
// such.
func agentRefusal(err error) error {
	var se *agentclient.StatusError
	if errors.As(err, &se) && se.Status == http.StatusNotImplemented {
		return fmt.Errorf("the sandbox's agent cannot freeze it (%w): %w", err, errors.ErrUnsupported)
	}
	return err
}

// markPaused writes or removes the pod's pause mark and waits until the informer's
// cache shows it, so that the next Inspect (the caller's, the reconciler's) agrees.
func (r *Runtime) markPaused(ctx context.Context, id string, paused bool) error {
	var value any // null removes the annotation
	if paused {
		value = "true"
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{annotationPaused: value}}})
	changed, stop := r.watch(id)
	defer stop()
	_, err := r.client.CoreV1().Pods(r.opts.Namespace).Patch(ctx, PodName(id), types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("sandbox %s: %w", id, runtimes.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("mark pod %s paused=%v: %w", PodName(id), paused, err)
	}
	wait := time.NewTimer(10 * time.Second)
	defer wait.Stop()
	for {
		if pod, err := r.pods.Get(PodName(id)); err != nil || (pod.Annotations[annotationPaused] == "true") == paused {
			return nil
		}
		select {
		case <-changed:
		case <-wait.C:
			return nil // the cache is late; the reconciler reads the mark on a later pass
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
