// The published E2B JavaScript SDKs inside a sandbox made through sandgate's E2B door:
// commands (environment, working directory, users, exit codes, streaming, background
// processes, stdin, kill), a terminal, files (write, read, list by depth, info, rename,
// remove, watch) and the code interpreter's rich results (a chart, a DataFrame). Run by
// test/e2e TestSDKE2BJS beside sdk.test.mjs, with the same variables.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError, NotFoundError, FileType } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'

const run = process.env.SANDGATE_SDK_RUN
if (!run || !process.env.E2B_API_URL) throw new Error('the suite is run by test/e2e TestSDKE2BJS')
// Creates on two shared cores may take a while.
const requestTimeoutMs = 180_000
const made = []

async function create(opts = {}, Kind = Sandbox) {
  const sbx = await Kind.create({ requestTimeoutMs, timeoutMs: 300_000, ...opts, metadata: { run, ...(opts.metadata ?? {}) } })
  made.push(sbx)
  return sbx
}

let sbx
before(async () => {
  sbx = await create({ metadata: { suite: 'envd' }, envs: { FROM_CREATE: 'create-env' } })
})

after(async () => {
  for (const s of made) {
    await s.kill().catch(() => {})
  }
})

test('commands: output, env, cwd, user, exit codes', async () => {
  const r = await sbx.commands.run('echo "$FROM_CREATE $ASKED"; pwd; whoami', { envs: { ASKED: 'asked' }, cwd: '/tmp' })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'create-env asked\n/tmp\nuser\n')
  assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
  assert.equal((await sbx.commands.run('pwd')).stdout, '/home/user\n')

  const err = await sbx.commands.run('echo oops >&2; exit 3').catch((e) => e)
  assert.ok(err instanceof CommandExitError, `${err}`)
  assert.equal(err.exitCode, 3)
  assert.equal(err.stderr, 'oops\n')

  const seen = []
  await sbx.commands.run('for i in 1 2 3; do echo line$i; done', { onStdout: (d) => seen.push(d) })
  assert.equal(seen.join(''), 'line1\nline2\nline3\n')
})

test('commands: background, list, stdin, kill', async () => {
  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(cat.pid, 'through stdin\n')
  await sbx.commands.closeStdin(cat.pid)
  const done = await cat.wait()
  assert.equal(done.stdout, 'through stdin\n')

  const sleeper = await sbx.commands.run('sleep 300', { background: true })
  const running = await sbx.commands.list()
  assert.ok(running.some((p) => p.pid === sleeper.pid), `pid ${sleeper.pid} not in ${JSON.stringify(running)}`)
  assert.ok(await sbx.commands.kill(sleeper.pid))
  const ended = await sleeper.wait().catch((e) => e)
  assert.ok(ended instanceof CommandExitError, `${ended}`)
})

test('pty: a terminal answers', async () => {
  let out = ''
  const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += new TextDecoder().decode(d) } })
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo pty-$((6*7))\nexit\n'))
  await term.wait().catch(() => {})
  assert.match(out, /pty-42/)
})

test('files: write, read, list with depth, info, rename, remove, watch', async () => {
  const info = await sbx.files.write('notes/a.txt', 'hello files')
  assert.equal(info.path, '/home/user/notes/a.txt')
  assert.equal(await sbx.files.read('/home/user/notes/a.txt'), 'hello files')
  await sbx.files.write([
    { path: '/home/user/notes/deep/b.txt', data: 'b' },
    { path: '/home/user/notes/c.bin', data: new Uint8Array([0, 1, 2, 255]).buffer },
  ])
  const bytes = await sbx.files.read('/home/user/notes/c.bin', { format: 'bytes' })
  assert.deepEqual([...bytes], [0, 1, 2, 255])

  const top = await sbx.files.list('/home/user/notes')
  assert.deepEqual(top.map((e) => e.name).sort(), ['a.txt', 'c.bin', 'deep'])
  const deep = await sbx.files.list('/home/user/notes', { depth: 2 })
  assert.ok(deep.some((e) => e.path === '/home/user/notes/deep/b.txt'))

  const stat = await sbx.files.getInfo('/home/user/notes/a.txt')
  assert.equal(stat.type, FileType.FILE)
  assert.equal(stat.size, 11)
  assert.equal(stat.owner, 'user')

  await sbx.files.rename('/home/user/notes/a.txt', '/home/user/notes/renamed.txt')
  assert.equal(await sbx.files.exists('/home/user/notes/a.txt'), false)
  assert.ok(await sbx.files.exists('/home/user/notes/renamed.txt'))
  await sbx.files.remove('/home/user/notes/renamed.txt')
  assert.equal(await sbx.files.exists('/home/user/notes/renamed.txt'), false)
  await assert.rejects(sbx.files.read('/home/user/notes/none.txt'), NotFoundError)

  assert.ok(await sbx.files.makeDir('/home/user/watched'))
  const events = []
  const watcher = await sbx.files.watchDir('/home/user/watched', (e) => events.push(e))
  await sbx.files.write('/home/user/watched/new.txt', 'x')
  for (let i = 0; i < 50 && !events.some((e) => e.name === 'new.txt'); i++) {
    await new Promise((r) => setTimeout(r, 100))
  }
  await watcher.stop()
  assert.ok(events.some((e) => e.name === 'new.txt'), JSON.stringify(events))
})

test('code interpreter: state, output, errors, contexts, a chart and a DataFrame', async () => {
  const code = await create({}, CodeSandbox)
  await code.runCode('x = 41')
  const exec = await code.runCode('print("side"); x + 1')
  assert.equal(exec.text, '42')
  assert.deepEqual(exec.logs.stdout, ['side\n'])

  const failed = await code.runCode('1 / 0')
  assert.equal(failed.error?.name, 'ZeroDivisionError')

  const ctx = await code.createCodeContext({ cwd: '/tmp' })
  assert.equal((await code.runCode('import os; os.getcwd()', { context: ctx })).text, "'/tmp'")
  assert.ok((await code.listCodeContexts()).some((c) => c.id === ctx.id))
  await code.removeCodeContext(ctx)

  const chart = await code.runCode('import matplotlib.pyplot as plt\nplt.bar(["a", "b"], [1, 3])\nplt.title("bars")\nplt.show()')
  const withChart = chart.results.find((r) => r.chart)
  assert.ok(withChart, JSON.stringify(chart.results.map((r) => r.formats())))
  assert.ok(withChart.png)
  assert.equal(withChart.chart.type, 'bar')
  assert.equal(withChart.chart.title, 'bars')
  assert.equal(withChart.chart.elements.length, 2)

  const frame = await code.runCode('import pandas as pd\npd.DataFrame({"n": [1, 2]})')
  assert.ok(frame.results[0].html.includes('<table'))
  assert.deepEqual(frame.results[0].data, { n: { 0: 1, 1: 2 } })
})
