// Volumes through sandgate's E2B door with the published JavaScript SDK: the tenant's
// named volumes, made, listed, read and deleted with the SDK's Volume, mounted by a
// create's volumeMounts; what one sandbox's user writes there (without sudo) another
// sandbox reads. Another tenant's key neither sees nor mounts them. Run by test/e2e
// TestSDKE2BJS beside sdk.test.mjs, with the same variables; the volume is named
// vol-<run>, which the Go test removes if the suite leaves it.
import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, Volume, VolumeError, VolumeNotFoundError } from 'e2b'

const run = process.env.SANDGATE_SDK_RUN
const otherKey = process.env.SANDGATE_SDK_OTHER_KEY
if (!run || !otherKey || !process.env.E2B_API_URL) throw new Error('the suite is run by test/e2e TestSDKE2BJS')
// Creates on two shared cores may take a while.
const requestTimeoutMs = 180_000
const name = `vol-${run}`
const made = []

async function create(opts = {}) {
  const sbx = await Sandbox.create({ requestTimeoutMs, ...opts, metadata: { run, suite: 'volumes', ...(opts.metadata ?? {}) } })
  made.push(sbx)
  return sbx
}

after(async () => {
  for (const s of made) {
    await s.kill().catch(() => {})
  }
  await Volume.destroy(name).catch(() => {})
})

test('volumes: create, list, getInfo, destroy', async () => {
  const vol = await Volume.create(name)
  assert.equal(vol.name, name)
  assert.ok(vol.volumeId)
  assert.ok(vol.token)
  assert.ok((await Volume.list()).some((v) => v.name === name))
  const info = await Volume.getInfo(vol.volumeId)
  assert.deepEqual([info.volumeId, info.name], [vol.volumeId, name])
  await assert.rejects(Volume.create(name), VolumeError) // exists already

  // Another tenant's key finds no such volume.
  assert.ok(!(await Volume.list({ apiKey: otherKey })).some((v) => v.name === name))
  await assert.rejects(Volume.getInfo(vol.volumeId, { apiKey: otherKey }), VolumeNotFoundError)
  assert.equal(await Volume.destroy(vol.volumeId, { apiKey: otherKey }), false)

  assert.equal(await Volume.destroy(vol.volumeId), true)
  assert.ok(!(await Volume.list()).some((v) => v.name === name))
  await assert.rejects(Volume.getInfo(vol.volumeId), VolumeNotFoundError)
  assert.equal(await Volume.destroy(vol.volumeId), false)
})

test('volumes: mounted on create, shared by two sandboxes', async () => {
  const vol = await Volume.create(name)
  const writer = await create({ metadata: { case: 'writer' }, volumeMounts: { '/mnt/data': vol } })
  // The volume's root is the sandbox's user's: `user` (the default) writes without sudo.
  assert.equal((await writer.commands.run('stat -c %U:%G /mnt/data')).stdout.trim(), 'user:user')
  assert.equal((await writer.commands.run('echo from-the-writer > /mnt/data/note.txt')).exitCode, 0)
  await writer.files.write('/mnt/data/by-files.txt', `files ${run}`)
  // A volume a sandbox mounts is not removed from under it.
  await assert.rejects(Volume.destroy(vol.volumeId), VolumeError)
  await writer.kill()

  // Mounted by name this time, at another path.
  const reader = await create({ metadata: { case: 'reader' }, volumeMounts: { '/data': name } })
  assert.equal((await reader.files.read('/data/note.txt')).trim(), 'from-the-writer')
  assert.equal(await reader.files.read('/data/by-files.txt'), `files ${run}`)
  await reader.kill()

  // Another tenant's create cannot mount it.
  await assert.rejects(
    Sandbox.create({ apiKey: otherKey, requestTimeoutMs, volumeMounts: { '/mnt/data': name } }),
    (err) => String(err).includes('not found'),
  )
  assert.equal(await Volume.destroy(vol.volumeId), true)
})
