package docker

// Credential vault on Docker (EgressSpec.CredentialProxy). At create the runtime makes
// the sandbox a CA (package vaultca): the key and certificate go into the enforcer
// sidecar's environment only (another container, another PID namespace: the workload
// cannot read either's /proc), and the certificate into the workload before it starts,
// in the agent's directory: ca.pem (alone, for NODE_EXTRA_CA_CERTS) and ca-bundle.pem
// (the image's system roots plus it, for SSL_CERT_FILE and REQUESTS_CA_BUNDLE). The
// agent sets those variables for every process it starts while the files exist
// (agentproto.VaultTrustEnv).
//
// Nothing of it is in the workload's image layers or its container configuration: the
// agent's directory is a volume of the container's own (agentDirMount), which a commit
// leaves out, the system bundle is never changed, and no trust variable is in the
// container's environment. So a snapshot or a fork of a vault sandbox trusts nothing of
// its source; a copy with the vault gets its own CA, one without trusts none. RestoreEgress
// makes a new CA and rewrites these files: the vault itself lived in the old sidecar and
// is gone with it.

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
	"github.com/sandgate/sandgate/sandbox-agent/egress/vaultca"
)

// labelCredentialProxy on a workload says its enforcer runs the credential vault.
const labelCredentialProxy = runtimes.LabelCredentialProxy

// Environment of the enforcer with the vault (read by `sandbox-agent egress`).
const (
	envVaultCACert     = "SANDGATE_VAULT_CA_CERT"
	envVaultCAKey      = "SANDGATE_VAULT_CA_KEY"
	envVaultUpstreamCA = "SANDGATE_VAULT_UPSTREAM_CA"
)

// Trust files in the workload: the image's system bundle is read, never written, and
// the vault's files are in the agent's directory.
const (
	vaultCAPath     = agentproto.VaultCAPath
	vaultBundlePath = agentproto.VaultBundlePath
	systemBundle    = vaultca.SystemBundle
)

// vaultCAValidity bounds the CA's life; a sandbox lives far less.
const vaultCAValidity = 90 * 24 * time.Hour

// RunsCredentialProxy reports that sandboxes with EgressSpec.CredentialProxy get the
// vault (whenever egress enforcement is on).
func (r *Runtime) RunsCredentialProxy() bool { return !r.opts.NoEgress }

// vaultCA is a sandbox's CA in PEM.
type vaultCA struct{ cert, key []byte }

func newVaultCA(id string) (*vaultCA, error) {
	cert, key, err := vaultca.New(id, vaultCAValidity)
	if err != nil {
		return nil, fmt.Errorf("make the credential vault CA: %w", err)
	}
	return &vaultCA{cert: cert, key: key}, nil
}

// enforcerEnv is the sidecar's part.
func (ca *vaultCA) enforcerEnv(upstreamCA []byte) []string {
	env := []string{envVaultCACert + "=" + string(ca.cert), envVaultCAKey + "=" + string(ca.key)}
	if len(upstreamCA) > 0 {
		env = append(env, envVaultUpstreamCA+"="+string(upstreamCA))
	}
	return env
}

// installVaultTrust writes the CA certificate into the workload container (created or
// running) as described in the file comment.
func (r *Runtime) installVaultTrust(ctx context.Context, containerID string, ca *vaultCA) error {
	system := r.readContainerFile(ctx, containerID, systemBundle)
	bundle := append(append(bytes.TrimRight(system, "\n"), '\n'), ca.cert...)
	if len(system) == 0 {
		bundle = ca.cert
	}
	files := map[string][]byte{
		strings.TrimPrefix(vaultCAPath, agentDir+"/"):     ca.cert,
		strings.TrimPrefix(vaultBundlePath, agentDir+"/"): bundle,
	}
	if err := r.copyFiles(ctx, containerID, agentDir, files); err != nil {
		return fmt.Errorf("install the credential vault CA: %w", err)
	}
	return nil
}

// readContainerFile returns a regular file's content, or nil.
func (r *Runtime) readContainerFile(ctx context.Context, containerID, path string) []byte {
	res, err := r.cli.CopyFromContainer(ctx, containerID, client.CopyFromContainerOptions{SourcePath: path})
	if err != nil {
		return nil
	}
	defer res.Content.Close()
	tr := tar.NewReader(res.Content)
	hdr, err := tr.Next()
	if err != nil || hdr.Typeflag != tar.TypeReg || hdr.Size > 4<<20 {
		return nil
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		return nil
	}
	return data
}

// copyFiles writes files (relative names, mode 0644, parents 0755) under dest.
func (r *Runtime) copyFiles(ctx context.Context, containerID, dest string, files map[string][]byte) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for name, data := range files {
		for i := 0; i < len(name); i++ {
			if name[i] == '/' && !dirs[name[:i]] {
				dirs[name[:i]] = true
				if err := tw.WriteHeader(&tar.Header{Name: name[:i] + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
					return err
				}
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	_, err := r.cli.CopyToContainer(ctx, containerID, client.CopyToContainerOptions{DestinationPath: dest, Content: &buf})
	return err
}
