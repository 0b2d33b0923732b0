package egress

import (
	"crypto/x509"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"

	"github.com/sandgate/sandgate/sandbox-agent/egress/vaultca"
)

// rootsProbeEnv makes this test binary, run again, the process of
// TestVaultProxyBundledRootsWithoutSystemOnes that has no system roots.
const rootsProbeEnv = "SANDGATE_TEST_VAULT_ROOTS_PROBE"

// TestVaultProxyBundledRootsWithoutSystemOnes: in a sidecar whose image has no
// certificate bundle, the credential proxy still verifies upstreams against the public
// roots bundled with the binary. Run in a process of its own, whose system roots
// (read once per process) are pointed at nothing.
func TestVaultProxyBundledRootsWithoutSystemOnes(t *testing.T) {
	if os.Getenv(rootsProbeEnv) != "" {
		probeVaultRoots(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestVaultProxyBundledRootsWithoutSystemOnes$", "-test.v")
	cmd.Env = append(os.Environ(), rootsProbeEnv+"=1", "SSL_CERT_FILE=/nonexistent", "SSL_CERT_DIR=/nonexistent")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the probe without system roots failed: %v\n%s", err, out)
	}
}

func probeVaultRoots(t *testing.T) {
	if pool, err := x509.SystemCertPool(); err == nil && pool != nil && len(pool.Subjects()) > 0 {
		t.Fatalf("the probe's process has %d system roots; it must have none", len(pool.Subjects()))
	}
	caPEM, caKeyPEM, err := vaultca.New("roots", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newVaultProxy(nil, caPEM, caKeyPEM, nil, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	verified := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		cert, err := x509.ParseCertificate(root.Certificate)
		if err != nil {
			continue
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: p.roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
			verified++
		}
	}
	if verified < 50 {
		t.Fatalf("the proxy's upstream roots verify %d of the bundled public roots", verified)
	}
}
