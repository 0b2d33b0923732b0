// The published E2B JavaScript SDKs (e2b, @e2b/code-interpreter; the versions
// package-lock.json pins) driven against a sandgate gateway's E2B door, as a team that
// moves its E2B code to sandgate drives them: only E2B's own environment variables
// change. Run by test/e2e TestSDKE2BJS, which starts the gateway and passes
// E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (a tenant's key), SANDGATE_SDK_OTHER_KEY
// (another tenant's) and SANDGATE_SDK_RUN (a random token of the run, in metadata).
// Every sandbox a test creates is killed when the suite ends.

import { after, test } from 'node:test'
import assert from 'node:assert/strict'

import { Sandbox, SandboxNotFoundError } from 'e2b'
import { Sandbox as CodeInterpreter } from '@e2b/code-interpreter'

function mustEnv(name) {
  const value = process.env[name]
  if (!value) throw new Error(`${name} is not set (the suite is run by test/e2e TestSDKE2BJS)`)
  return value
}

const RUN = mustEnv('SANDGATE_SDK_RUN')
const OTHER_KEY = mustEnv('SANDGATE_SDK_OTHER_KEY')
mustEnv('E2B_API_URL')
mustEnv('E2B_SANDBOX_URL')
mustEnv('E2B_API_KEY')

// Creates on two shared cores may take a while.
const requestTimeoutMs = 180_000

const created = []
async function create(opts = {}, Kind = Sandbox) {
  const sbx = await Kind.create({ requestTimeoutMs, ...opts })
  created.push(sbx)
  return sbx
}
after(async () => {
  for (const sbx of created) {
    try {
      await sbx.kill()
    } catch {
      // already killed by the test
    }
  }
})

const secondsLeft = (info) => (info.endAt.getTime() - Date.now()) / 1000

test('create, getInfo, setTimeout', async () => {
  const sbx = await create({ metadata: { run: RUN, case: 'info' } })
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, 'base')
  assert.deepEqual(info.metadata, { run: RUN, case: 'info' })
  assert.equal(info.state, 'running')
  assert.ok(secondsLeft(info) > 240 && secondsLeft(info) <= 305, `E2B's default of 300 s, got ${secondsLeft(info)}`)
  await sbx.setTimeout(90_000)
  const shorter = await sbx.getInfo()
  assert.ok(secondsLeft(shorter) > 30 && secondsLeft(shorter) <= 95, `after setTimeout(90 s): ${secondsLeft(shorter)}`)
})

test('list by metadata', async () => {
  const a = await create({ metadata: { run: RUN, case: 'list' } })
  const b = await create({ metadata: { run: RUN, case: 'list' } })
  await create({ metadata: { run: RUN, case: 'other' } })
  const items = await Sandbox.list({ query: { metadata: { run: RUN, case: 'list' } } }).nextItems()
  assert.deepEqual(items.map((s) => s.sandboxId).sort(), [a.sandboxId, b.sandboxId].sort())
})

test('pause, connect, kill, isRunning', async () => {
  const sbx = await create({ metadata: { run: RUN, case: 'pause' } })
  assert.equal(await sbx.pause(), true)
  assert.equal(await Sandbox.pause(sbx.sandboxId), false)
  assert.equal((await sbx.getInfo()).state, 'paused')
  const resumed = await Sandbox.connect(sbx.sandboxId, { requestTimeoutMs })
  assert.equal(resumed.sandboxId, sbx.sandboxId)
  assert.equal((await sbx.getInfo()).state, 'running')
  assert.equal(await sbx.kill(), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  await assert.rejects(sbx.getInfo(), SandboxNotFoundError)
  assert.equal(await sbx.isRunning(), false)
})

test('another tenant sees nothing', async () => {
  const sbx = await create({ metadata: { run: RUN, case: 'tenant' } })
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId, { apiKey: OTHER_KEY }), SandboxNotFoundError)
  assert.equal(await Sandbox.kill(sbx.sandboxId, { apiKey: OTHER_KEY }), false)
  const listed = await Sandbox.list({ query: { metadata: { run: RUN } }, apiKey: OTHER_KEY }).nextItems()
  assert.ok(!listed.some((s) => s.sandboxId === sbx.sandboxId))
  assert.equal((await sbx.getInfo()).state, 'running')
})

test('envd: commands and files through the door', async () => {
  const sbx = await create({ metadata: { run: RUN, case: 'envd' }, envs: { GREETING: 'hi' } })
  assert.equal(await sbx.isRunning(), true)
  const result = await sbx.commands.run('echo $GREETING from $(whoami)')
  assert.equal(result.exitCode, 0)
  assert.equal(result.stdout.trim(), 'hi from user')
  await sbx.files.write('/home/user/door.txt', `through the door ${RUN}`)
  assert.equal(await sbx.files.read('/home/user/door.txt'), `through the door ${RUN}`)
})

test('code interpreter: runCode and contexts', async () => {
  const sbx = await create({ metadata: { run: RUN, case: 'code' } }, CodeInterpreter)
  const execution = await sbx.runCode("x = 40 + 2\nprint('hello')\nx")
  assert.equal(execution.error, undefined)
  assert.equal(execution.text, '42')
  assert.ok(execution.logs.stdout.join('').includes('hello'))
  const ctx = await sbx.createCodeContext({ language: 'python' })
  await sbx.runCode('y = 7', { context: ctx })
  assert.equal((await sbx.runCode('y * 6', { context: ctx })).text, '42')
  assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
  await sbx.removeCodeContext(ctx)
  const failed = await sbx.runCode('undefined_name')
  assert.equal(failed.error.name, 'NameError')
})
