package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	sandgate "github.com/sandgate/sandgate/client"
)

// TestSnapshotsCarryNoTrust attacks the copies of a credential vault sandbox: its
// snapshot, a sandbox made from that snapshot with and without the vault, and a fork.
// The source's CA (whose key only the source's enforcer holds) must be nowhere a copy
// looks for trust: not in its system bundle, not in what SSL_CERT_FILE,
// REQUESTS_CA_BUNDLE or NODE_EXTRA_CA_CERTS name, not under /.sandgate/vault. A copy
// without the vault trusts no vault CA and has no trust variables pointing into the
// agent's directory; a copy with the vault gets a CA of its own, which it trusts and
// which injects.
func TestSnapshotsCarryNoTrust(t *testing.T) {
	w := newVaultWorld(t)
	admin := w.g
	tenant := admin.createTenant("snaptrust-"+randomHex(3), nil)
	removeSnapshotImagesOfTenant(t, w.e, tenant)
	_, key := admin.issueKey(tenant, "member")
	g := admin.asKey(key)
	w.g = g
	c := sdkClient(t, admin, key)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	src, srcAgent := w.vaultSandbox(nil)
	srcCA := pemLine(t, enforcerEnv(t, src, "SANDGATE_VAULT_CA_CERT"))
	// The source trusts its CA (where the copies must not).
	if got := trustHolding(srcAgent, srcCA); got == "" {
		t.Fatal("the source's own trust files do not hold its CA")
	}
	snap := g.snapshotOf(src)

	checkNoSourceTrust := func(t *testing.T, id string) {
		t.Helper()
		if got := trustHolding(g.agent(id), srcCA); got != "" {
			t.Errorf("copy %s trusts the source's CA in: %s", id, got)
		}
	}
	checkNoVault := func(t *testing.T, id string) {
		t.Helper()
		checkNoSourceTrust(t, id)
		out := strings.TrimSpace(stdoutOf(g.agent(id).run(`echo "[$SSL_CERT_FILE|$REQUESTS_CA_BUNDLE|$NODE_EXTRA_CA_CERTS]"; ls -A /.sandgate/vault 2>/dev/null | head -5`)))
		if out != "[||]" {
			t.Errorf("copy %s without the vault has trust variables or vault files: %q", id, out)
		}
	}

	t.Run("a copy without the vault trusts no vault CA", func(t *testing.T) {
		r := g.do("POST", "/v1/sandboxes", map[string]any{"snapshotId": snap})
		if r.Status != 202 {
			t.Fatalf("create from the snapshot: %d %s", r.Status, r.Body)
		}
		checkNoVault(t, r.JSON(t)["id"].(string))
	})

	t.Run("a copy with the vault gets its own CA", func(t *testing.T) {
		r := g.do("POST", "/v1/sandboxes", map[string]any{"snapshotId": snap, "credentialProxy": map[string]any{"enabled": true}})
		if r.Status != 202 {
			t.Fatalf("create from the snapshot with the vault: %d %s", r.Status, r.Body)
		}
		id := r.JSON(t)["id"].(string)
		checkNoSourceTrust(t, id)
		own := pemLine(t, enforcerEnv(t, id, "SANDGATE_VAULT_CA_CERT"))
		if own == srcCA {
			t.Fatal("the copy's enforcer has the source's CA")
		}
		a := g.agent(id)
		if got := trustHolding(a, own); !strings.Contains(got, "SSL_CERT_FILE") || !strings.Contains(got, "NODE_EXTRA_CA_CERTS") {
			t.Fatalf("the copy does not trust its own CA through its trust variables (found in: %q)", got)
		}
		real := "sk-copy-" + randomHex(12)
		if r := g.vault(id, "POST", "/credential-vault", map[string]any{
			"credentials": []map[string]any{{"name": "tok", "source": map[string]any{"type": "inline", "value": real}}},
			"bindings": []map[string]any{{"name": "echo", "match": map[string]any{"hosts": []string{vaultEchoHost}},
				"auth": map[string]any{"type": "bearer", "credential": "tok"}}},
		}); r.Status != 201 {
			t.Fatalf("POST /credential-vault: %d %s", r.Status, r.Body)
		}
		if ans, _ := curlEcho(t, a, "GET", "/api/x"); ans.Auth != sha256Hex([]byte("Bearer "+real)) {
			t.Fatalf("the copy's vault did not inject: %s", ans.Auth)
		}
	})

	t.Run("a fork trusts no vault CA", func(t *testing.T) {
		batch, err := c.Fork(ctx, src, sandgate.ForkRequest{Count: 1})
		if err != nil || len(batch.Members) != 1 {
			t.Fatalf("fork: %+v, %v", batch, err)
		}
		if b, err := c.WaitBatch(ctx, batch.ID, nil); err != nil || b.Summary.Running != 1 {
			t.Fatalf("fork member: %+v, %v; want it running", b, err)
		}
		checkNoVault(t, batch.Members[0].ID)
	})
}

// pemLine is the first full base64 line of a PEM certificate: 48 bytes of its DER,
// enough to tell one random certificate from every other.
func pemLine(t testing.TB, certPEM string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(certPEM), "\n")
	if len(lines) < 3 || len(lines[1]) != 64 {
		t.Fatalf("not a PEM certificate: %q", certPEM)
	}
	return lines[1]
}

// trustHolding names the places of a sandbox's trust that hold a certificate's line:
// the system bundle, the files the trust variables name, and /.sandgate/vault. Empty
// when none does.
func trustHolding(a *agent, line string) string {
	script := `for w in system:/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE:$SSL_CERT_FILE REQUESTS_CA_BUNDLE:$REQUESTS_CA_BUNDLE NODE_EXTRA_CA_CERTS:$NODE_EXTRA_CA_CERTS; do
  f=${w#*:}; [ -n "$f" ] && grep -qsF '` + line + `' "$f" && echo "${w%%:*}"
done
grep -rlsF '` + line + `' /.sandgate/vault 2>/dev/null
true`
	return strings.Join(strings.Fields(stdoutOf(a.run(script))), " ")
}
