// Snapshots and forks through sandgate's E2B door with the published JavaScript SDK: a
// snapshot is a template (a create names its id), listed by its sandbox and by its name,
// deleted like a template; a named one is E2B's namespaced template name,
// namespace/alias:tag, in the caller's tenant's namespace. A fork answers its started
// copies, each a sandbox of its own with its own tokens. Another tenant sees none of
// them, and its names are its own. Run by test/e2e TestSDKE2BJS beside sdk.test.mjs,
// with the same variables; the Go test removes the images of the snapshots and forks
// the suite leaves.
import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError } from 'e2b'

const run = process.env.SANDGATE_SDK_RUN
const otherKey = process.env.SANDGATE_SDK_OTHER_KEY
if (!run || !otherKey || !process.env.E2B_API_URL) throw new Error('the suite is run by test/e2e TestSDKE2BJS')
// Creates and snapshots on two shared cores may take a while.
const requestTimeoutMs = 180_000
const made = []

// create makes a sandbox from template (the door's default when undefined) and kills it
// when the suite ends.
async function create(template, opts = {}) {
  const sandboxOpts = { requestTimeoutMs, ...opts, metadata: { run, suite: 'snapshots', ...(opts.metadata ?? {}) } }
  const sbx = template === undefined ? await Sandbox.create(sandboxOpts) : await Sandbox.create(template, sandboxOpts)
  made.push(sbx)
  return sbx
}

after(async () => {
  for (const s of made) {
    await s.kill().catch(() => {})
  }
})

// The SDK keeps a sandbox's envd token in a field its typings mark protected.
const envdToken = (sbx) => sbx.envdAccessToken

// snapshotIds lists the ids of the snapshots the filter finds, sorted.
async function snapshotIds(filter) {
  return (await Sandbox.listSnapshots(filter).nextItems()).map((s) => s.snapshotId).sort()
}

// rejectedWith asserts that promise fails with an SDK error of HTTP status `status`
// whose message contains `words`.
async function rejectedWith(promise, status, words) {
  await assert.rejects(promise, (err) => {
    assert.equal(err.statusCode, status, `${err}`)
    assert.ok(String(err).includes(words), `${err} does not say ${words}`)
    return true
  })
}

test('a snapshot is a template', async () => {
  const src = await create(undefined, { metadata: { case: 'snapshot' }, timeoutMs: 600_000 })
  const snap = await src.createSnapshot({ name: `snap-${run}`, requestTimeoutMs })
  const [namespace, alias] = snap.snapshotId.split('/')
  assert.ok(namespace, snap.snapshotId)
  assert.equal(alias, `snap-${run}:default`)
  assert.deepEqual(snap.names, [`${namespace}/snap-${run}`])

  assert.deepEqual(await snapshotIds({ sandboxId: src.sandboxId }), [snap.snapshotId])
  assert.deepEqual((await src.listSnapshots().nextItems()).map((s) => s.snapshotId), [snap.snapshotId])
  assert.deepEqual(await snapshotIds({ name: `snap-${run}` }), [snap.snapshotId])
  assert.deepEqual(await snapshotIds({ sandboxId: src.sandboxId, apiKey: otherKey }), [])

  const copy = await create(snap.snapshotId, { metadata: { case: 'from-snapshot' } })
  const info = await copy.getInfo()
  assert.equal(info.templateId, snap.snapshotId)
  assert.equal(info.state, 'running')
  assert.notEqual(envdToken(copy), envdToken(src))
  const fromSnap = await Sandbox.list({ query: { template: snap.snapshotId } }).nextItems()
  assert.deepEqual(
    fromSnap.map((s) => [s.sandboxId, s.templateId]),
    [[copy.sandboxId, snap.snapshotId]],
  )

  // Another tenant can neither create from it nor delete it.
  await rejectedWith(Sandbox.create(snap.snapshotId, { apiKey: otherKey, requestTimeoutMs }), 404, 'not known')
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, { apiKey: otherKey }), false)

  await copy.kill()
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
  assert.deepEqual(await snapshotIds({ sandboxId: src.sandboxId }), [])
})

test('fork', async () => {
  const src = await create(undefined, { metadata: { case: 'fork' }, timeoutMs: 600_000 })
  const copies = await src.fork({ count: 2, requestTimeoutMs })
  assert.equal(copies.length, 2)
  for (const c of copies) {
    assert.ok(!(c instanceof Error), `${c}`)
    made.push(c)
    assert.ok(c instanceof Sandbox)
    assert.notEqual(c.sandboxId, src.sandboxId)
    assert.notEqual(envdToken(c), envdToken(src))
    assert.equal((await c.getInfo()).state, 'running')
  }
  assert.notEqual(envdToken(copies[0]), envdToken(copies[1]))
  await assert.rejects(Sandbox.fork(src.sandboxId, { count: 1, apiKey: otherKey, requestTimeoutMs }), SandboxNotFoundError)
})

test('namespaced names', async () => {
  const src = await create(undefined, { metadata: { case: 'names' }, timeoutMs: 600_000 })
  await src.files.write('/home/user/which', 'first\n')
  const first = await src.createSnapshot({ name: `Names-${run}`, requestTimeoutMs })
  const namespace = first.snapshotId.split('/')[0]
  assert.equal(first.snapshotId, `${namespace}/names-${run}:default`) // lower-cased, the default tag
  await src.files.write('/home/user/which', 'tagged\n')
  const tagged = await src.createSnapshot({ name: `${namespace}/names-${run}:v2`, requestTimeoutMs })
  assert.deepEqual([tagged.snapshotId, tagged.names], [`${namespace}/names-${run}:v2`, [`${namespace}/names-${run}`]])

  // Listed by the name with and without its namespace, with and without a tag.
  const both = [first.snapshotId, tagged.snapshotId].sort()
  assert.deepEqual(await snapshotIds({ name: `names-${run}` }), both)
  assert.deepEqual(await snapshotIds({ name: `${namespace}/names-${run}` }), both)
  assert.deepEqual(await snapshotIds({ name: `names-${run}:v2` }), [tagged.snapshotId])
  assert.deepEqual(await snapshotIds({ name: `${namespace}/names-${run}:default` }), [first.snapshotId])
  assert.deepEqual(await snapshotIds({ name: `other-namespace/names-${run}` }), [])

  // A create names it in every form; without a tag it is the default one. The list
  // names the template as the get does, and a filter by the snapshot's id finds the
  // sandbox whichever form the create gave.
  for (const [template, want, snapshotId] of [
    [`names-${run}`, 'first', first.snapshotId],
    [`${namespace}/names-${run}:v2`, 'tagged', tagged.snapshotId],
    [first.snapshotId, 'first', first.snapshotId],
  ]) {
    const copy = await create(template, { metadata: { case: 'names-copy' } })
    assert.equal((await copy.files.read('/home/user/which')).trim(), want, template)
    assert.equal((await copy.getInfo()).templateId, template)
    const found = await Sandbox.list({ query: { metadata: { run, case: 'names-copy' }, template: snapshotId } }).nextItems()
    assert.deepEqual(found.map((s) => [s.sandboxId, s.templateId]), [[copy.sandboxId, template]], template)
    await copy.kill()
  }

  // A name in another namespace is refused to a snapshot, and names no template.
  await rejectedWith(src.createSnapshot({ name: `not-${namespace}/names-${run}`, requestTimeoutMs }), 400, 'namespace')
  await rejectedWith(Sandbox.create(`not-${namespace}/names-${run}`, { requestTimeoutMs }), 404, 'not known')

  // Deleting the name without a tag deletes every tag of it.
  assert.equal(await Sandbox.deleteSnapshot(`${namespace}/names-${run}`), true)
  assert.deepEqual(await snapshotIds({ name: `names-${run}` }), [])
  assert.equal(await Sandbox.deleteSnapshot(tagged.snapshotId), false)
})

test("names are the tenant's own", async () => {
  const mine = await create(undefined, { metadata: { case: 'names-mine' }, timeoutMs: 600_000 })
  await mine.files.write('/home/user/whose', 'mine\n')
  const mySnap = await mine.createSnapshot({ name: `shared-${run}`, requestTimeoutMs })
  const myNamespace = mySnap.snapshotId.split('/')[0]

  // Another tenant finds nothing by the name, in any form, and cannot take the
  // namespace.
  assert.deepEqual(await snapshotIds({ name: `shared-${run}`, apiKey: otherKey }), [])
  assert.deepEqual(await snapshotIds({ name: mySnap.snapshotId, apiKey: otherKey }), [])
  for (const template of [`shared-${run}`, mySnap.snapshotId]) {
    await rejectedWith(Sandbox.create(template, { apiKey: otherKey, requestTimeoutMs }), 404, 'not known')
  }
  assert.equal(await Sandbox.deleteSnapshot(mySnap.snapshotId, { apiKey: otherKey }), false)
  assert.equal(await Sandbox.deleteSnapshot(`shared-${run}`, { apiKey: otherKey }), false)

  // Its snapshot of the same name is its own, in its own namespace; each tenant's name
  // leads to its own snapshot.
  const theirs = await create(undefined, { apiKey: otherKey, metadata: { case: 'names-theirs' }, timeoutMs: 600_000 })
  await theirs.files.write('/home/user/whose', 'theirs\n')
  await rejectedWith(theirs.createSnapshot({ name: mySnap.snapshotId, requestTimeoutMs }), 400, 'namespace')
  const theirSnap = await theirs.createSnapshot({ name: `shared-${run}`, requestTimeoutMs })
  const theirNamespace = theirSnap.snapshotId.split('/')[0]
  assert.notEqual(theirNamespace, myNamespace)
  assert.equal(theirSnap.snapshotId, `${theirNamespace}/shared-${run}:default`)

  for (const [apiKey, want] of [[undefined, 'mine'], [otherKey, 'theirs']]) {
    const copy = await create(`shared-${run}`, { ...(apiKey && { apiKey }), metadata: { case: 'names-whose' } })
    assert.equal((await copy.files.read('/home/user/whose')).trim(), want)
    await copy.kill()
  }

  assert.equal(await Sandbox.deleteSnapshot(theirSnap.snapshotId, { apiKey: otherKey }), true)
  assert.equal(await Sandbox.deleteSnapshot(mySnap.snapshotId), true)
})
