package kubernetes

// Credential vault on Kubernetes (EgressSpec.CredentialProxy), as on Docker: the runtime
// makes a CA per sandbox at create; its key and certificate go to the egress native
// sidecar's environment only (the pod never shares its process namespace, so the
// workload cannot read it), the certificate to the workload's trust store through an
// init container (VaultTrustContainer) that runs `sandbox-agent vault-trust` in the
// workload's own image, so that it appends the CA to that image's system roots; the
// result, in the agent volume, is mounted over the system bundle and named by
// SSL_CERT_FILE, REQUESTS_CA_BUNDLE and NODE_EXTRA_CA_CERTS. The vault itself lives in
// the sidecar's state volume, so it survives the sidecar's restarts.

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/egress/vaultca"
)

// VaultTrustContainer writes the vault CA into the agent volume.
const VaultTrustContainer = "vault-trust"

// Environment of the vault (read by `sandbox-agent egress` and `vault-trust`).
const (
	EnvVaultCACert     = "SANDGATE_VAULT_CA_CERT"
	EnvVaultCAKey      = "SANDGATE_VAULT_CA_KEY"
	EnvVaultUpstreamCA = "SANDGATE_VAULT_UPSTREAM_CA"
)

// annotationCredentialProxy marks a pod whose enforcer runs the vault.
const annotationCredentialProxy = runtimes.LabelCredentialProxy

const (
	vaultDir        = agentDir + "/vault"
	vaultCAPath     = vaultDir + "/ca.pem"
	vaultBundlePath = vaultDir + "/ca-bundle.pem"
)

// RunsCredentialProxy reports that sandboxes with EgressSpec.CredentialProxy get the
// vault (whenever egress enforcement is on).
func (r *Runtime) RunsCredentialProxy() bool { return !r.opts.NoEgress }

// withCredentialProxy adds the vault to a pod made by podFor with an enforcer: a new
// CA, the trust init container, the workload's trust settings and the sidecar's flag.
func (r *Runtime) withCredentialProxy(pod *corev1.Pod, spec runtimes.Spec) error {
	certPEM, keyPEM, err := vaultca.New(spec.ID, 90*24*time.Hour)
	if err != nil {
		return fmt.Errorf("make the credential vault CA: %w", err)
	}
	pod.Annotations[annotationCredentialProxy] = "enabled"
	trust := corev1.Container{
		Name:                     VaultTrustContainer,
		Image:                    spec.Image,
		Command:                  []string{agentPath, "vault-trust", vaultDir},
		Env:                      []corev1.EnvVar{{Name: EnvVaultCACert, Value: escapeExpansion(string(certPEM))}},
		Resources:                helperResources("100m", "64Mi"),
		VolumeMounts:             []corev1.VolumeMount{{Name: AgentVolume, MountPath: agentDir}},
		SecurityContext:          oneShotHelperSecurity(),
		ImagePullPolicy:          r.opts.ImagePullPolicy,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	var inits []corev1.Container
	for _, c := range pod.Spec.InitContainers {
		switch c.Name {
		case InstallContainer:
			// The trust container runs the agent the install container copied.
			inits = append(inits, c, trust)
			continue
		case EgressContainer:
			c.Command = append(c.Command, "--credential-proxy")
			c.Env = append(c.Env,
				corev1.EnvVar{Name: EnvVaultCACert, Value: escapeExpansion(string(certPEM))},
				corev1.EnvVar{Name: EnvVaultCAKey, Value: escapeExpansion(string(keyPEM))})
			if len(r.opts.VaultUpstreamCA) > 0 {
				c.Env = append(c.Env, corev1.EnvVar{Name: EnvVaultUpstreamCA, Value: escapeExpansion(string(r.opts.VaultUpstreamCA))})
			}
		}
		inits = append(inits, c)
	}
	pod.Spec.InitContainers = inits
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name != WorkloadContainer {
			continue
		}
		c.Env = append(c.Env,
			corev1.EnvVar{Name: "SSL_CERT_FILE", Value: vaultBundlePath},
			corev1.EnvVar{Name: "REQUESTS_CA_BUNDLE", Value: vaultBundlePath},
			corev1.EnvVar{Name: "NODE_EXTRA_CA_CERTS", Value: vaultCAPath})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{
			Name: AgentVolume, MountPath: vaultca.SystemBundle, SubPath: "vault/ca-bundle.pem", ReadOnly: true,
		})
	}
	return nil
}
