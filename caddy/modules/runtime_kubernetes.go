//go:build !sandgate_nokubernetes

package modules

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/runtimes/docker"
	"github.com/sandgate/sandgate/runtimes/kubernetes"
)

// The Kubernetes runtime is built in unless the tag sandgate_nokubernetes leaves it out
// (withoutKubernetesTag): `make run` builds without it for local Docker, sparing the
// largest part of a first compile (docs/DEVELOPING.md).
func init() { runtimeBuilders["kubernetes"] = buildKubernetes }

func buildKubernetes(ctx context.Context, a *App, log *slog.Logger) (runtimes.Runtime, error) {
	upstreamCA, err := a.vaultUpstreamCA()
	if err != nil {
		return nil, err
	}
	sandboxDNS, err := docker.ParseSandboxDNS(a.SandboxDNS)
	if err != nil {
		return nil, fmt.Errorf("sandbox_dns: %w", err)
	}
	agentImage := a.K8sAgentImage
	if agentImage == "" {
		agentImage = "sandgate/agent:" + gateway.Version
	}
	return kubernetes.New(ctx, kubernetes.Options{Kubeconfig: a.Kubeconfig, Namespace: a.Namespace, AgentImage: agentImage,
		GVisorRuntimeClass: a.K8sGVisorRuntimeClass, OCIRuntime: a.OCIRuntime, QPS: float32(a.K8sQPS), Burst: a.K8sBurst,
		EphemeralStorage: a.K8sEphemeralStorage,
		NoEgress:         a.Egress == "off", ReadOnlyRootfs: a.ReadOnlyRootfs == "on", VaultUpstreamCA: upstreamCA, SandboxDNS: sandboxDNS,
		UserAgent: "sandgate/" + gateway.Version, Logger: log})
}
