// The published OpenSandbox JavaScript SDK's credentialVault helpers against a sandgate
// gateway: create, patch (with expectedRevision), the getters and delete, unchanged.
//
// Run by test/e2e TestSDKJSCredentialVault, which starts the gateway and an HTTPS echo
// server on the sandbox network (its own CA, trusted upstream by the gateway through
// SANDGATE_VAULT_UPSTREAM_CA) and passes, besides sdk.test.mjs's variables:
//   SANDGATE_SDK_VAULT_HOST   the echo server's name
//   SANDGATE_SDK_VAULT_SECRET the real credential (host side only)

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";

import { ConnectionConfig, Sandbox } from "@alibaba-group/opensandbox";

function mustEnv(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (the suite is run by test/e2e TestSDKJSCredentialVault)`);
  return v;
}

const domain = mustEnv("SANDGATE_SDK_DOMAIN");
const apiKey = mustEnv("SANDGATE_SDK_API_KEY");
const image = mustEnv("SANDGATE_SDK_IMAGE");
const host = mustEnv("SANDGATE_SDK_VAULT_HOST");
const secret = mustEnv("SANDGATE_SDK_VAULT_SECRET");

const sha256 = (s) => createHash("sha256").update(s).digest("hex");

async function curl(sbx, path) {
  const out = [];
  await sbx.commands.run(`curl -sS --max-time 20 -H 'Authorization: Bearer fake' https://${host}${path}`, undefined, {
    onStdout: (m) => { out.push(m.text); },
  });
  return JSON.parse(out.join(""));
}

describe("credentialVault", () => {
  let sbx;
  before(async () => {
    sbx = await Sandbox.create({
      connectionConfig: new ConnectionConfig({ domain, protocol: "http", apiKey, requestTimeoutSeconds: 180 }),
      image,
      timeoutSeconds: 600,
      readyTimeoutSeconds: 180,
      networkPolicy: { defaultAction: "deny", egress: [{ action: "allow", target: host }] },
      credentialProxy: { enabled: true },
    });
  });
  after(async () => {
    await sbx?.kill().catch(() => undefined);
    await sbx?.close().catch(() => undefined);
  });

  test("create, then a matching request carries the real token", async () => {
    const state = await sbx.credentialVault.create({
      credentials: [{ name: "echo-token", source: { type: "inline", value: secret } }],
      bindings: [{ name: "echo", match: { hosts: [host], paths: ["/api/*"] }, auth: { type: "bearer", credential: "echo-token" } }],
    });
    assert.equal(state.revision, 1);
    assert.ok(!JSON.stringify(state).includes(secret), "the state holds the value");
    assert.deepEqual(state.credentials.map((c) => [c.name, c.sourceType]), [["echo-token", "inline"]]);
    const seen = await curl(sbx, "/api/models");
    assert.equal(seen.auth, sha256(`Bearer ${secret}`));
    const untouched = await curl(sbx, "/elsewhere");
    assert.equal(untouched.auth, sha256("Bearer fake"));
  });

  test("patch with the current revision applies; a stale one is refused", async () => {
    const next = await sbx.credentialVault.patch({
      expectedRevision: 1,
      credentials: { add: [{ name: "k2", source: { type: "inline", value: `${secret}-2` } }] },
      bindings: { add: [{ name: "keyed", match: { hosts: [host], paths: ["/keyed"] }, auth: { type: "apiKey", name: "X-Api-Key", credential: "k2" } }] },
    });
    assert.equal(next.revision, 2);
    await assert.rejects(
      sbx.credentialVault.patch({ expectedRevision: 1, credentials: { delete: ["k2"] } }),
      (err) => err.statusCode === 409 || JSON.stringify(err).includes("REVISION_CONFLICT") || String(err.message).includes("stale"),
    );
    assert.equal((await sbx.credentialVault.get()).revision, 2);
  });

  test("getters return sanitized metadata", async () => {
    const creds = await sbx.credentialVault.listCredentials();
    assert.deepEqual(creds.map((c) => c.name).sort(), ["echo-token", "k2"]);
    const one = await sbx.credentialVault.getCredential("k2");
    assert.equal(one.revision, 2);
    const bindings = await sbx.credentialVault.listBindings();
    assert.deepEqual(bindings.map((b) => b.name).sort(), ["echo", "keyed"]);
    const keyed = await sbx.credentialVault.getBinding("keyed");
    assert.deepEqual(keyed.auth, { type: "apiKey", name: "X-Api-Key" });
    assert.deepEqual(keyed.match?.paths, ["/keyed"]);
    assert.ok(!JSON.stringify([creds, bindings, one, keyed]).includes(secret));
  });

  test("delete removes the vault", async () => {
    await sbx.credentialVault.delete();
    await assert.rejects(sbx.credentialVault.get());
  });
});
