// Package vaultca makes the per-sandbox CA of the credential vault: its key goes to the
// egress enforcer only (which signs a leaf per intercepted host with it), its
// certificate into the workload's trust store.
package vaultca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// New makes a sandbox's credential-vault CA (ECDSA P-256, valid for validity), returning the
// certificate and key in PEM. Runtimes call it at sandbox start.
func New(sandboxID string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "sandgate credential vault " + sandboxID, Organization: []string{"sandgate"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// SystemBundle is where Debian, Ubuntu and Alpine keep the system's roots (what curl,
// git and OpenSSL read).
const SystemBundle = "/etc/ssl/certs/ca-certificates.crt"

// Bundle is system (the image's roots, possibly empty) with caPEM appended.
func Bundle(system, caPEM []byte) []byte {
	if len(bytes.TrimSpace(system)) == 0 {
		return caPEM
	}
	return append(append(bytes.TrimRight(system, "\n"), '\n'), caPEM...)
}

// WriteTrust writes dir/ca.pem (caPEM alone) and dir/ca-bundle.pem (the image's system
// roots plus caPEM), mode 0644, for `sandbox-agent vault-trust` in a pod's init
// container: it runs in the workload's image, so it reads that image's roots.
func WriteTrust(dir string, caPEM []byte) error {
	if !bytes.Contains(caPEM, []byte("BEGIN CERTIFICATE")) {
		return fmt.Errorf("vault-trust: no CA certificate given")
	}
	system, err := os.ReadFile(SystemBundle)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("vault-trust: read %s: %w", SystemBundle, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("vault-trust: %w", err)
	}
	for name, data := range map[string][]byte{"ca.pem": caPEM, "ca-bundle.pem": Bundle(system, caPEM)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("vault-trust: %w", err)
		}
	}
	return nil
}
