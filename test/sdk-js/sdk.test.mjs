// The published OpenSandbox JavaScript SDK (@alibaba-group/opensandbox) driven against a
// sandgate gateway, as a new user would drive it: only the server address changes.
//
// Run by test/e2e TestSDKJS, which starts the gateway and passes, in the environment:
//   SANDGATE_SDK_DOMAIN  host:port of the gateway (loopback)
//   SANDGATE_SDK_API_KEY the tenant's API key
//   SANDGATE_SDK_IMAGE   the sandbox image (sandgate/base:<VERSION>)
//
// Every sandbox a test creates is killed in an after() hook.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { ConnectionConfig, Sandbox, SandboxManager } from "@alibaba-group/opensandbox";

const domain = mustEnv("SANDGATE_SDK_DOMAIN");
const apiKey = mustEnv("SANDGATE_SDK_API_KEY");
const image = mustEnv("SANDGATE_SDK_IMAGE");
const run = Math.random().toString(16).slice(2, 10);

function mustEnv(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (the suite is run by test/e2e TestSDKJS)`);
  return v;
}

function connection() {
  return new ConnectionConfig({ domain, protocol: "http", apiKey, requestTimeoutSeconds: 180 });
}

const created = [];

async function create(opts = {}) {
  const sbx = await Sandbox.create({
    connectionConfig: connection(),
    image,
    timeoutSeconds: 600,
    readyTimeoutSeconds: 180,
    ...opts,
  });
  created.push(sbx);
  return sbx;
}

after(async () => {
  for (const sbx of created) {
    try {
      await sbx.kill();
    } catch {
      // already killed by the test
    }
    await sbx.close().catch(() => undefined);
  }
});

describe("lifecycle", () => {
  let sbx;
  let manager;
  before(async () => {
    manager = SandboxManager.create({ connectionConfig: connection() });
    sbx = await create({ metadata: { suite: "sdk-js", run, role: "lifecycle" }, env: { GREETING: "hi" } });
  });
  after(async () => manager?.close());

  test("create returns a Running sandbox with its metadata", async () => {
    const info = await sbx.getInfo();
    assert.equal(info.id, sbx.id);
    assert.equal(info.status.state, "Running");
    assert.deepEqual(info.metadata, { suite: "sdk-js", run, role: "lifecycle" });
    assert.ok(info.expiresAt instanceof Date, `expiresAt ${info.expiresAt}`);
    assert.equal(info.image?.uri, image);
  });

  test("list filters by metadata and state", async () => {
    const other = await create({ metadata: { suite: "sdk-js", run, role: "other" } });
    const mine = await manager.listSandboxInfos({ metadata: { run, role: "lifecycle" } });
    assert.deepEqual(mine.items.map((s) => s.id), [sbx.id]);
    const both = await manager.listSandboxInfos({ metadata: { run }, states: ["Running"] });
    assert.deepEqual(new Set(both.items.map((s) => s.id)), new Set([sbx.id, other.id]));
    const paused = await manager.listSandboxInfos({ metadata: { run }, states: ["Paused"] });
    assert.deepEqual(paused.items, []);
    const page = await manager.listSandboxInfos({ metadata: { run }, pageSize: 1 });
    assert.equal(page.items.length, 1);
    assert.equal(page.pagination?.totalItems, 2);
    assert.equal(page.pagination?.hasNextPage, true);
    await other.kill();
  });

  test("renew moves the expiry", async () => {
    const before = (await sbx.getInfo()).expiresAt;
    const res = await sbx.renew(3600);
    const renewed = new Date(res.expiresAt);
    assert.ok(renewed > before, `renewed ${renewed.toISOString()} not after ${before.toISOString()}`);
    const after = (await sbx.getInfo()).expiresAt;
    assert.equal(after.getTime(), renewed.getTime());
  });

  test("pause and resume keep the sandbox's state", async () => {
    await sbx.files.writeFiles([{ path: "/tmp/kept.txt", data: "survives a pause" }]);
    await sbx.pause();
    const info = await waitForState(sbx, "Paused");
    assert.equal(info.status.state, "Paused");
    const resumed = await sbx.resume({ readyTimeoutSeconds: 180 });
    created.push(resumed);
    assert.equal((await resumed.getInfo()).status.state, "Running");
    assert.equal(await resumed.files.readFile("/tmp/kept.txt"), "survives a pause");
  });

  test("kill removes the sandbox", async () => {
    const doomed = await create({ metadata: { suite: "sdk-js", run, role: "doomed" } });
    await doomed.kill();
    const left = await manager.listSandboxInfos({ metadata: { run, role: "doomed" }, states: ["Running", "Pending", "Paused"] });
    assert.deepEqual(left.items, []);
  });
});

describe("commands", () => {
  let sbx;
  before(async () => {
    sbx = await create({ metadata: { suite: "sdk-js", run, role: "commands" }, env: { GREETING: "hello from env" } });
  });

  test("run streams stdout and stderr to the handlers", async () => {
    const stdout = [];
    const stderr = [];
    let init;
    let complete;
    const exec = await sbx.commands.run('echo "$GREETING"; echo line2; echo oops >&2', undefined, {
      onInit: (i) => { init = i; },
      onStdout: (m) => { stdout.push(m.text); },
      onStderr: (m) => { stderr.push(m.text); },
      onExecutionComplete: (c) => { complete = c; },
    });
    assert.ok(init?.id, "no init event");
    assert.equal(exec.id, init.id);
    assert.deepEqual(stdout.map((s) => s.trimEnd()), ["hello from env", "line2"]);
    assert.deepEqual(stderr.map((s) => s.trimEnd()), ["oops"]);
    assert.ok(complete, "no execution_complete event");
    assert.equal(exec.error, undefined);
  });

  test("a failing command reports its exit code", async () => {
    let err;
    const exec = await sbx.commands.run("exit 3", undefined, { onError: (e) => { err = e; } });
    assert.equal(err?.name, "CommandExecError");
    assert.equal(err?.value, "3");
    assert.equal(exec.exitCode, 3);
  });

  test("working directory and per-command env", async () => {
    const exec = await sbx.commands.run("pwd; echo $ONLY_HERE", { workingDirectory: "/tmp", envs: { ONLY_HERE: "yes" } });
    assert.deepEqual(exec.logs.stdout.map((m) => m.text.trimEnd()), ["/tmp", "yes"]);
  });

  test("a background command's logs can be read later", async () => {
    const exec = await sbx.commands.run("for i in 1 2 3; do echo bg-$i; done; sleep 0.2; echo done", { background: true });
    assert.ok(exec.id, "background command has no id");
    let status;
    for (let i = 0; i < 600; i++) {
      status = await sbx.commands.getCommandStatus(exec.id);
      if (!status.running) break;
      await sleep(100);
    }
    assert.equal(status.running, false, "background command still running after a minute");
    assert.equal(status.exitCode ?? status.exit_code, 0);
    const logs = await sbx.commands.getBackgroundCommandLogs(exec.id);
    assert.equal(logs.content, "bg-1\nbg-2\nbg-3\ndone\n");
    assert.equal(typeof logs.cursor, "number");
    const rest = await sbx.commands.getBackgroundCommandLogs(exec.id, logs.cursor);
    assert.equal(rest.content, "");
  });
});

describe("files", () => {
  let sbx;
  const dir = "/tmp/sdk files";
  before(async () => {
    sbx = await create({ metadata: { suite: "sdk-js", run, role: "files" } });
  });

  test("write and read", async () => {
    await sbx.files.writeFiles([
      { path: `${dir}/a.txt`, data: "cat and cat and cat", mode: 640 },
      { path: `${dir}/nested/b.bin`, data: new Uint8Array([0, 1, 2, 255]) },
    ]);
    assert.equal(await sbx.files.readFile(`${dir}/a.txt`), "cat and cat and cat");
    assert.deepEqual(Array.from(await sbx.files.readBytes(`${dir}/nested/b.bin`)), [0, 1, 2, 255]);
    const info = await sbx.files.getFileInfo([`${dir}/a.txt`]);
    assert.equal(info[`${dir}/a.txt`].size, 19);
    assert.equal(info[`${dir}/a.txt`].mode, 640);
  });

  test("replace detailed counts each file's replacements", async () => {
    await sbx.files.writeFiles([
      { path: `${dir}/none.txt`, data: "nothing" },
      { path: `${dir}/one.txt`, data: "one cat" },
    ]);
    const results = await sbx.files.replaceContentsDetailed([
      { path: `${dir}/a.txt`, oldContent: "cat", newContent: "dog" },
      { path: `${dir}/one.txt`, oldContent: "cat", newContent: "dog" },
      { path: `${dir}/none.txt`, oldContent: "cat", newContent: "dog" },
    ]);
    const counts = Object.fromEntries(results.map((r) => [r.path, r.replacedCount]));
    assert.deepEqual(counts, { [`${dir}/a.txt`]: 3, [`${dir}/one.txt`]: 1, [`${dir}/none.txt`]: 0 });
    assert.equal(await sbx.files.readFile(`${dir}/a.txt`), "dog and dog and dog");
    await sbx.files.replaceContents([{ path: `${dir}/one.txt`, oldContent: "dog", newContent: "bird" }]);
    assert.equal(await sbx.files.readFile(`${dir}/one.txt`), "one bird");
  });

  test("move", async () => {
    await sbx.files.moveFiles([{ src: `${dir}/a.txt`, dest: `${dir}/moved.txt` }]);
    assert.equal(await sbx.files.readFile(`${dir}/moved.txt`), "dog and dog and dog");
    await assert.rejects(sbx.files.readFile(`${dir}/a.txt`));
  });

  test("delete", async () => {
    await sbx.files.deleteFiles([`${dir}/moved.txt`]);
    await assert.rejects(sbx.files.getFileInfo([`${dir}/moved.txt`]));
    await sbx.files.deleteDirectories([dir]);
    await assert.rejects(sbx.files.getFileInfo([dir]));
  });
});

describe("egress", () => {
  // Only the policy is read and changed: nothing in the sandbox resolves or connects, so
  // these names are never looked up.
  let sbx;
  before(async () => {
    sbx = await create({
      metadata: { suite: "sdk-js", run, role: "egress" },
      networkPolicy: { defaultAction: "deny", egress: [{ action: "allow", target: "allowed.example" }] },
    });
  });

  test("get returns the policy the sandbox was created with", async () => {
    const policy = await sbx.getEgressPolicy();
    assert.equal(policy.defaultAction, "deny");
    assert.ok(
      policy.egress?.some((r) => r.action === "allow" && r.target === "allowed.example"),
      `policy ${JSON.stringify(policy)}`,
    );
  });

  test("patch adds a rule and replaces a target's rule", async () => {
    await sbx.patchEgressRules([
      { action: "allow", target: "*.patched.example" },
      { action: "deny", target: "allowed.example" },
    ]);
    const policy = await sbx.getEgressPolicy();
    const byTarget = Object.fromEntries((policy.egress ?? []).map((r) => [r.target, r.action]));
    assert.equal(byTarget["*.patched.example"], "allow", `policy ${JSON.stringify(policy)}`);
    assert.equal(byTarget["allowed.example"], "deny", `policy ${JSON.stringify(policy)}`);
    assert.equal(policy.defaultAction, "deny");
  });

  test("delete removes a target's rules", async () => {
    await sbx.deleteEgressRules(["*.patched.example"]);
    const policy = await sbx.getEgressPolicy();
    assert.ok(!(policy.egress ?? []).some((r) => r.target === "*.patched.example"), `policy ${JSON.stringify(policy)}`);
  });
});

async function waitForState(sbx, state) {
  let info;
  for (let i = 0; i < 1200; i++) {
    info = await sbx.getInfo();
    if (info.status.state === state) return info;
    await sleep(100);
  }
  assert.fail(`sandbox ${sbx.id} did not reach ${state} (last ${info?.status.state})`);
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}
