// E2B's host form ({port}-{sandboxID}.<domain>) and signed file URLs with the published
// JavaScript SDK: a sandbox created secure (the door always is) gives downloadUrl() and
// uploadUrl() URLs that reach its files without any of the door's headers, and a
// tampered, foreign or expired signature is refused. Each URL's path and query go to the
// gateway's own listener with getHost()'s name in the Host header: the domain
// (SANDGATE_SDK_E2B_DOMAIN, the gateway's preview domain) is a .test name nothing
// resolves, and no request leaves the loopback. Run by test/e2e TestSDKE2BJS.
import { after, before, test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { Sandbox } from 'e2b'

const run = process.env.SANDGATE_SDK_RUN
const domain = process.env.SANDGATE_SDK_E2B_DOMAIN
const gateway = process.env.E2B_SANDBOX_URL
if (!run || !domain || !gateway) throw new Error('the suite is run by test/e2e TestSDKE2BJS')
const requestTimeoutMs = 180_000
const envdPort = 49983

// send sends url's path and query to the gateway with Host: host; it answers
// { status, body } (body a Buffer).
function send(url, host, { method = 'GET', body, headers = {} } = {}) {
  const target = new URL(gateway)
  const parts = new URL(url)
  return new Promise((resolve, reject) => {
    const req = http.request(
      { hostname: target.hostname, port: target.port, path: parts.pathname + parts.search, method, headers: { Host: host, ...headers } },
      (res) => {
        const chunks = []
        res.on('data', (c) => chunks.push(c))
        res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks) }))
        res.on('error', reject)
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}

// multipart is a multipart/form-data body with one `file` part, as uploadUrl() wants.
function multipart(filename, content) {
  const boundary = `b${run}${Date.now()}`
  const body = Buffer.concat([
    Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${filename}"\r\nContent-Type: application/octet-stream\r\n\r\n`),
    Buffer.from(content),
    Buffer.from(`\r\n--${boundary}--\r\n`),
  ])
  return { body, headers: { 'Content-Type': `multipart/form-data; boundary=${boundary}` } }
}

// tamper changes the last character of url's signature.
function tamper(url) {
  const u = new URL(url)
  const sig = u.searchParams.get('signature')
  assert.ok(sig, `no signature in ${url}`)
  u.searchParams.set('signature', sig.slice(0, -1) + (sig.endsWith('A') ? 'B' : 'A'))
  return u.toString()
}

let sbx
let other
before(async () => {
  sbx = await Sandbox.create({ requestTimeoutMs, secure: true, metadata: { run, case: 'signed-urls' } })
  other = await Sandbox.create({ requestTimeoutMs, secure: true, metadata: { run, case: 'signed-urls-other' } })
})

after(async () => {
  for (const s of [sbx, other]) {
    await s?.kill().catch(() => {})
  }
})

test('signed urls: the host is the preview domain', () => {
  assert.equal(sbx.sandboxDomain, domain)
  assert.equal(sbx.getHost(envdPort), `${envdPort}-${sbx.sandboxId}.${domain}`)
})

test('signed urls: uploadUrl and downloadUrl', async () => {
  const path = '/home/user/signed-js.txt'
  const content = `signed js ${run}`
  const host = sbx.getHost(envdPort)
  const up = multipart('signed-js.txt', content)
  const put = await send(await sbx.uploadUrl(path, { useSignatureExpiration: 300 }), host, { method: 'POST', ...up })
  assert.equal(put.status, 200, put.body.toString())
  assert.equal(await sbx.files.read(path), content)
  for (const url of [await sbx.downloadUrl(path), await sbx.downloadUrl(path, { useSignatureExpiration: 60 })]) {
    const got = await send(url, host)
    assert.equal(got.status, 200, got.body.toString())
    assert.equal(got.body.toString(), content)
  }
})

test('signed urls: tampered, foreign, expired and missing signatures are refused', async () => {
  const path = '/home/user/refused-js.txt'
  await sbx.files.write(path, 'kept')
  const host = sbx.getHost(envdPort)
  const url = await sbx.downloadUrl(path)

  let got = await send(tamper(url), host)
  assert.equal(got.status, 403, got.body.toString())
  got = await send(tamper(await sbx.uploadUrl(path)), host, { method: 'POST', ...multipart('refused-js.txt', 'overwritten') })
  assert.equal(got.status, 403, got.body.toString())
  // A signature for another path.
  got = await send(url.replace(encodeURIComponent(path), encodeURIComponent('/etc/hostname')), host)
  assert.equal(got.status, 403, got.body.toString())
  // This sandbox's signature on another sandbox's host, and the other's on this one's.
  got = await send(url, other.getHost(envdPort))
  assert.equal(got.status, 403, got.body.toString())
  got = await send(await other.downloadUrl(path), host)
  assert.equal(got.status, 403, got.body.toString())
  // A read signature used for a write.
  got = await send(url, host, { method: 'POST', ...multipart('refused-js.txt', 'overwritten') })
  assert.equal(got.status, 403, got.body.toString())
  // Expired, and without a signature.
  got = await send(await sbx.downloadUrl(path, { useSignatureExpiration: -10 }), host)
  assert.equal(got.status, 401, got.body.toString())
  assert.equal(JSON.parse(got.body.toString()).message, 'signature is already expired')
  const unsigned = new URL(url)
  unsigned.searchParams.delete('signature')
  got = await send(unsigned.toString(), host)
  assert.equal(got.status, 401, got.body.toString())

  assert.equal(await sbx.files.read(path), 'kept')
})
