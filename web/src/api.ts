// A typed client for the gateway's public API. The console uses nothing else: every
// request goes through request() below, with the session cookie and the CSRF token.

export type State = "Pending" | "Running" | "Pausing" | "Paused" | "Resuming" | "Stopping" | "Terminated" | "Failed";
export const STATES: State[] = ["Pending", "Running", "Pausing", "Paused", "Resuming", "Stopping", "Terminated", "Failed"];

export interface Status {
  state: State;
  reason?: string;
  message?: string;
  lastTransitionAt?: string;
}

export interface Sandbox {
  id: string;
  image?: { uri: string };
  status: Status;
  metadata?: Record<string, string>;
  entrypoint?: string[];
  expiresAt?: string;
  createdAt: string;
}

export interface CreateSandboxRequest {
  image: { uri: string };
  entrypoint: string[];
  timeout?: number;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  resourceLimits?: Record<string, string>;
  extensions?: Record<string, string>;
}

export interface Endpoint {
  endpoint: string;
  headers?: Record<string, string>;
  url?: string;
  expiresAt?: string;
}

export interface Session {
  tenant: string;
  role: Role;
  keyId: string;
  csrfToken: string;
  expiresAt?: string;
  can?: Record<string, boolean>;
}

export type Role = "admin" | "tenant-admin" | "member" | "viewer";

export interface WhoAmI {
  tenant: string;
  role: Role;
  keyId: string;
  admin?: boolean;
  can?: Record<string, boolean>;
}

export interface Capacity {
  bufferMin?: number;
  bufferMax?: number;
  poolMin?: number;
  poolMax?: number;
}

export interface Pool {
  name: string;
  template: CreateSandboxRequest;
  capacitySpec: Capacity;
  status?: { total?: number; allocated?: number; available?: number; starting?: number };
  createdAt?: string;
  updatedAt?: string;
}

export interface BatchRequest {
  count: number;
  poolRef?: string;
  template?: CreateSandboxRequest;
  timeout?: number;
  metadata?: Record<string, string>;
}

export interface Batch {
  id: string;
  count: number;
  poolRef?: string;
  members?: { id: string; source: "pool" | "cold"; status?: Status }[];
  summary?: { running?: number; pending?: number; failed?: number; gone?: number };
  createdAt?: string;
}

export interface PluginStats {
  invocations?: number;
  errors?: number;
  timeouts?: number;
  drops?: number;
  auditRejected?: number;
  queued?: number;
  instances?: number;
  p50Ms?: number;
  p99Ms?: number;
  lastError?: string;
  lastErrorAt?: string;
}

export interface Plugin {
  name: string;
  version: string;
  hash: string;
  hooks: string[];
  limits?: { memoryMiB?: number; timeoutMs?: number; poolSize?: number };
  settings?: Record<string, unknown>;
  updatedAt: string;
  loaded: boolean;
  loadError?: string;
  stats?: PluginStats;
}

export interface AuditRecord {
  id: string;
  time: string;
  source: string;
  record: unknown;
}

export interface AuditPage {
  items: AuditRecord[];
  nextCursor?: string;
}

export interface Quotas {
  maxConcurrent?: number;
  maxCpuMillis?: number;
  maxMemoryBytes?: number;
  maxTimeoutSeconds?: number;
  maxBatchSize?: number;
  allowedImages?: string[];
  createRate?: number;
  createBurst?: number;
}

export interface Tenant {
  id: string;
  name?: string;
  quotas?: Quotas;
  createdAt?: string;
}

export interface Key {
  id: string;
  key?: string;
  role: Role;
  tenant: string;
  prefix?: string;
  createdAt?: string;
}

export interface PolicyModule {
  name: string;
  source: string;
  package?: string;
}

export interface PolicyDocument {
  version?: string;
  modules: PolicyModule[];
  tests?: { name: string; source: string }[];
}

export interface PolicyProblem {
  module?: string;
  row?: number;
  col?: number;
  message: string;
}

export interface PolicyTestResult {
  package?: string;
  name: string;
  pass: boolean;
  error?: string;
  durationMs?: number;
}

export interface EgressRule {
  action: "allow" | "deny";
  target: string;
}

export interface EgressPolicy {
  defaultAction?: "allow" | "deny";
  egress?: EgressRule[];
}

export interface Metrics {
  cpu_count: number;
  cpu_used_pct: number;
  mem_total_mib: number;
  mem_used_mib: number;
  timestamp: number;
}

export interface FileInfo {
  path: string;
  type: "file" | "directory" | "symlink" | "other";
  size: number;
  modified_at?: string;
  mode?: number;
  owner?: string;
}

/** ApiError is the gateway's {code, message} answer (or a network failure, status 0). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly requestId?: string,
  ) {
    super(message);
  }
}

let csrfToken = "";
let onUnauthorized: (() => void) | null = null;

/** setCsrfToken records the token the session answer carried; mutations send it. */
export function setCsrfToken(token: string) {
  csrfToken = token;
}

/** setUnauthorizedHandler is called when a request finds the session gone. */
export function setUnauthorizedHandler(fn: (() => void) | null) {
  onUnauthorized = fn;
}

export function mutationHeaders(): Record<string, string> {
  return csrfToken ? { "X-CSRF-Token": csrfToken } : {};
}

type Body = unknown;

interface RequestOptions {
  query?: Record<string, string | number | undefined | string[]>;
  signal?: AbortSignal;
  raw?: boolean; // return the Response itself (streams, downloads)
  headers?: Record<string, string>;
}

export function withQuery(path: string, query?: RequestOptions["query"]): string {
  if (!query) return path;
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined || v === "") continue;
    if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
    else q.append(k, String(v));
  }
  const s = q.toString();
  return s ? `${path}${path.includes("?") ? "&" : "?"}${s}` : path;
}

async function errorFrom(res: Response): Promise<ApiError> {
  let code = `HTTP_${res.status}`;
  let message = res.statusText || `HTTP ${res.status}`;
  try {
    const text = await res.text();
    try {
      const body = JSON.parse(text);
      if (body && typeof body === "object") {
        if (typeof body.code === "string") code = body.code;
        if (typeof body.message === "string") message = body.message;
      }
    } catch {
      if (text.trim()) message = text.trim().slice(0, 300);
    }
  } catch {
    /* the body is gone; keep the status line */
  }
  return new ApiError(res.status, code, message, res.headers.get("X-Request-ID") || undefined);
}

/** networkRetryPauses are the pauses before a read the network dropped is sent again (ms). */
const networkRetryPauses = [300, 1000];

/** sleep waits ms, or rejects with the signal's AbortError when it is aborted first. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason ?? new DOMException("Aborted", "AbortError"));
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason ?? new DOMException("Aborted", "AbortError"));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** request sends one API call. Bodies: FormData and Blob as they are, anything else as JSON. */
export async function request<T>(method: string, path: string, body?: Body, opts: RequestOptions = {}): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json", ...(opts.headers || {}) };
  let payload: BodyInit | undefined;
  if (body instanceof FormData || body instanceof Blob) {
    payload = body;
  } else if (body !== undefined) {
    payload = JSON.stringify(body);
    headers["Content-Type"] = "application/json";
  }
  const idempotent = method === "GET" || method === "HEAD";
  if (!idempotent) Object.assign(headers, mutationHeaders());
  let res: Response;
  // A read the network dropped (a reset connection, a network change on the machine) is
  // sent again after a pause, twice at most; a change is never sent twice.
  const pauses = idempotent ? [...networkRetryPauses] : [];
  for (;;) {
    try {
      res = await fetch(withQuery(path, opts.query), { method, headers, body: payload, credentials: "same-origin", signal: opts.signal });
      break;
    } catch (e) {
      if ((e as Error).name === "AbortError") throw e;
      const pause = pauses.shift();
      if (pause === undefined) {
        throw new ApiError(0, "NETWORK", "The gateway did not answer. Check that it is running and that this machine can reach it.");
      }
      await sleep(pause, opts.signal);
    }
  }
  if (!res.ok) {
    const err = await errorFrom(res);
    if (res.status === 401 && !path.startsWith("/v1/session") && onUnauthorized) onUnauthorized();
    throw err;
  }
  if (opts.raw) return res as unknown as T;
  if (res.status === 204) return undefined as T;
  const type = res.headers.get("Content-Type") || "";
  if (type.includes("json")) return (await res.json()) as T;
  return (await res.text()) as unknown as T;
}

const enc = encodeURIComponent;

// ---- session ---------------------------------------------------------------------------

export const session = {
  signIn: (apiKey: string) => request<Session>("POST", "/v1/session", { apiKey }),
  current: () => request<Session>("GET", "/v1/session"),
  signOut: () => request<void>("DELETE", "/v1/session"),
  whoami: () => request<WhoAmI>("GET", "/v1/whoami"),
};

// ---- sandboxes -------------------------------------------------------------------------

/** metadataQuery turns "k=v, k2=v2" into the list API's metadata parameter. */
export function metadataQuery(filter: Record<string, string>): string {
  return Object.entries(filter)
    .map(([k, v]) => `${k}=${v}`)
    .join("&");
}

export const sandboxes = {
  list: (q: { state?: string[]; metadata?: string; page?: number; pageSize?: number } = {}) =>
    request<{ items: Sandbox[]; pagination: unknown }>("GET", "/v1/sandboxes", undefined, { query: q }),
  get: (id: string) => request<Sandbox>("GET", `/v1/sandboxes/${enc(id)}`),
  create: (req: CreateSandboxRequest) => request<Sandbox>("POST", "/v1/sandboxes", req),
  remove: (id: string) => request<void>("DELETE", `/v1/sandboxes/${enc(id)}`),
  patchMetadata: (id: string, patch: Record<string, string | null>) =>
    request<Sandbox>("PATCH", `/v1/sandboxes/${enc(id)}/metadata`, patch),
  renew: (id: string, expiresAt: string) =>
    request<{ expiresAt: string }>("POST", `/v1/sandboxes/${enc(id)}/renew-expiration`, { expiresAt }),
  pause: (id: string) => request<void>("POST", `/v1/sandboxes/${enc(id)}/pause`),
  resume: (id: string) => request<void>("POST", `/v1/sandboxes/${enc(id)}/resume`),
  endpoint: (id: string, port: number, expires?: number) =>
    request<Endpoint>("GET", `/v1/sandboxes/${enc(id)}/endpoints/${port}`, undefined, { query: { expires } }),
  watchURL: (state: string[], metadata: string) => withQuery("/v1/sandboxes/watch", { state, metadata }),
  usage: (id: string) => request<SandboxUsage>("GET", `/v1/sandboxes/${enc(id)}/metrics`),
};

/** FleetHistory is GET /v1/fleet/metrics: the fleet over the last 15 minutes (admin only). */
export interface FleetHistory {
  intervalSeconds: number;
  history: {
    time: string;
    sandboxes: Record<string, number>;
    createP50Seconds: number | null;
    createP99Seconds: number | null;
    creates: number;
    pools: { name: string; available: number; target: number }[];
  }[];
}

export const fleet = {
  history: () => request<FleetHistory>("GET", "/v1/fleet/metrics"),
};

/** UsagePoint is one sample of a sandbox's resource use (GET /v1/sandboxes/{id}/metrics). */
export interface UsagePoint {
  time: string;
  cpuCores: number;
  cpuLimitCores: number | null;
  cpuPercent: number;
  memoryBytes: number;
  memoryPeakBytes: number;
  memoryLimitBytes: number;
  pids: number | null;
  netRxBytes: number | null;
  netTxBytes: number | null;
  diskBytes: number | null;
}

/** SandboxUsage is a sandbox's resource history, oldest point first. */
export interface SandboxUsage {
  id: string;
  source?: "engine" | "agent";
  intervalSeconds: number;
  current: UsagePoint | null;
  history: UsagePoint[];
}

// ---- images the gateway builds in the background -------------------------------------

export interface ImageBuild {
  images: string[];
  state: "Waiting" | "Building" | "Ready" | "Failed";
  step?: string;
  message?: string;
  startedAt?: string;
  finishedAt?: string;
}

export const imageBuilds = {
  list: () => request<{ items: ImageBuild[] }>("GET", "/v1/images"),
};

// ---- pools, batches --------------------------------------------------------------------

export const pools = {
  list: () => request<{ items: Pool[] }>("GET", "/v1/pools"),
  get: (name: string) => request<Pool>("GET", `/v1/pools/${enc(name)}`),
  create: (p: { name: string; template: CreateSandboxRequest; capacitySpec: Capacity }) => request<Pool>("POST", "/v1/pools", p),
  update: (name: string, p: { name: string; template: CreateSandboxRequest; capacitySpec: Capacity }) =>
    request<Pool>("PUT", `/v1/pools/${enc(name)}`, p),
  remove: (name: string) => request<void>("DELETE", `/v1/pools/${enc(name)}`),
};

/** BATCH_LABEL is the metadata key the gateway puts on every member of a batch. */
export const BATCH_LABEL = "sandgate.io/batch";
/** RESERVED_PREFIX marks metadata keys the gateway owns; they cannot be edited. */
export const RESERVED_PREFIX = "sandgate.io/";

export const batches = {
  create: (b: BatchRequest) => request<Batch>("POST", "/v1/batches", b),
  get: (id: string) => request<Batch>("GET", `/v1/batches/${enc(id)}`),
  remove: (id: string) => request<void>("DELETE", `/v1/batches/${enc(id)}`),
};

// ---- policy ----------------------------------------------------------------------------

export const policy = {
  get: () => request<PolicyDocument>("GET", "/v1/policy"),
  validate: (modules: Record<string, string>) =>
    request<{ ok: boolean; errors?: PolicyProblem[] }>("POST", "/v1/policy/validate", { modules }),
  apply: (modules: Record<string, string>) => request<PolicyDocument>("PUT", "/v1/policy", { modules }),
  evaluate: (decision: string, input: unknown, modules?: Record<string, string>) =>
    request<{ result: unknown; explanation?: string[] }>("POST", "/v1/policy/eval", { decision, input, modules }),
  test: (modules?: Record<string, string>) =>
    request<{ results: PolicyTestResult[]; pass: number; fail: number }>("POST", "/v1/policy/test", modules ? { modules } : {}),
};

// ---- plugins, audit, tenants -----------------------------------------------------------

export const plugins = {
  list: () => request<{ items: Plugin[] }>("GET", "/v1/plugins"),
  upload: (name: string, module: Blob, config: unknown) => {
    const form = new FormData();
    form.append("config", new Blob([JSON.stringify(config)], { type: "application/json" }), "config.json");
    form.append("module", module, "module.wasm");
    return request<Plugin>("PUT", `/v1/plugins/${enc(name)}`, form);
  },
  remove: (name: string) => request<void>("DELETE", `/v1/plugins/${enc(name)}`),
};

export const audit = {
  list: (q: { cursor?: string; limit?: number; order?: "oldest" | "newest" }) =>
    request<AuditPage>("GET", "/v1/audit", undefined, { query: q }),
  streamURL: () => "/v1/audit/stream",
};

export const tenants = {
  list: () => request<{ items: Tenant[] }>("GET", "/v1/tenants"),
  create: (t: { name: string; quotas?: Quotas }) => request<Tenant>("POST", "/v1/tenants", t),
  update: (id: string, t: { name?: string; quotas?: Quotas }) => request<Tenant>("PATCH", `/v1/tenants/${enc(id)}`, t),
  keys: (id: string) => request<{ items: Key[] }>("GET", `/v1/tenants/${enc(id)}/keys`),
  createKey: (id: string, role: Role) => request<Key>("POST", `/v1/tenants/${enc(id)}/keys`, { role }),
  revokeKey: (id: string, keyId: string) => request<void>("DELETE", `/v1/tenants/${enc(id)}/keys/${enc(keyId)}`),
};

// ---- the agent inside a sandbox, through the gateway's proxy -------------------------------

export const AGENT_PORT = 44772;
export const EGRESS_PORT = 18080;

/**
 * proxyPath is the console's own route to a sandbox's agent or enforcer. The session
 * cookie is honoured there (and on the rest of /v1) only, never on the preview routes
 * /sandboxes/{id}/proxy/{port}, whose pages are the sandbox's content.
 */
export function proxyPath(id: string, port: number, rest: string): string {
  return `/v1/console/sandboxes/${enc(id)}/ports/${port}${rest}`;
}

/** AgentEvent is one event of a command stream (PROTOCOL.md "Agent API"). */
export interface AgentEvent {
  type: string;
  text?: string;
  timestamp?: number;
  execution_time?: number;
  error?: { ename: string; evalue: string; traceback?: string[] };
}

export function agent(id: string) {
  const p = (rest: string) => proxyPath(id, AGENT_PORT, rest);
  return {
    metrics: () => request<Metrics>("GET", p("/metrics")),
    list: (path: string) => request<FileInfo[] | Record<string, FileInfo>>("GET", p("/directories/list"), undefined, { query: { path, depth: 1 } }),
    info: (path: string) => request<Record<string, FileInfo>>("GET", p("/files/info"), undefined, { query: { path } }),
    downloadURL: (path: string) => withQuery(p("/files/download"), { path }),
    download: (path: string) => request<Response>("GET", p("/files/download"), undefined, { query: { path }, raw: true }),
    removeFile: (path: string) => request<void>("DELETE", p("/files"), undefined, { query: { path } }),
    removeDir: (path: string) => request<void>("DELETE", p("/directories"), undefined, { query: { path } }),
    mkdir: (path: string) => request<void>("POST", p("/directories"), { [path]: { mode: 755 } }),
    upload: (files: { path: string; data: Blob }[]) => {
      const form = new FormData();
      for (const f of files) {
        form.append("metadata", new Blob([JSON.stringify({ path: f.path })], { type: "application/json" }), "metadata");
        form.append("file", f.data, f.path.split("/").pop() || "file");
      }
      return request<unknown>("POST", p("/files/upload"), form);
    },
    /** run streams a command's events to onEvent until it ends or signal aborts. */
    run: async (command: string, cwd: string | undefined, onEvent: (ev: AgentEvent) => void, signal?: AbortSignal) => {
      const res = await request<Response>("POST", p("/command"), { command, cwd: cwd || undefined }, { raw: true, signal });
      await readEventStream(res, onEvent);
    },
    interrupt: (commandId: string) => request<void>("DELETE", p("/command"), undefined, { query: { id: commandId } }),
    createPty: (cols: number, rows: number) => request<{ session_id: string }>("POST", p("/pty"), { cols, rows }),
    ptyInfo: (sessionId: string) => request<unknown>("GET", p(`/pty/${enc(sessionId)}`)),
    ptySocketURL: (sessionId: string, since?: number) => {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      return `${scheme}//${location.host}${withQuery(p(`/pty/${enc(sessionId)}/ws`), { since, takeover: 1 })}`;
    },
  };
}

/** readEventStream parses a stream of JSON events, bare or "data:"-prefixed, blank-line separated. */
export async function readEventStream(res: Response, onEvent: (ev: AgentEvent) => void) {
  if (!res.body) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  const flush = (line: string) => {
    line = line.trim();
    if (line.startsWith("data:")) line = line.slice(5).trim();
    if (!line || line.startsWith(":") || line.startsWith("event:") || line.startsWith("id:")) return;
    try {
      onEvent(JSON.parse(line));
    } catch {
      onEvent({ type: "stdout", text: line });
    }
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      flush(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  }
  flush(buf);
}

export const egress = (id: string) => ({
  get: () => request<{ status?: string; mode?: string; enforcementMode?: string; policy?: EgressPolicy; platformDeny?: string[] }>(
    "GET",
    proxyPath(id, EGRESS_PORT, "/policy"),
  ),
  replace: (p: EgressPolicy) => request<unknown>("PUT", proxyPath(id, EGRESS_PORT, "/policy"), p),
});

// ---- words for people --------------------------------------------------------------------

/** describeError turns any failure into a sentence a person can act on. */
export function describeError(e: unknown): string {
  if (e instanceof ApiError) {
    const msg = e.message.replace(/\.$/, "");
    switch (true) {
      case e.status === 0:
        return e.message;
      case e.code === "CSRF_TOKEN_INVALID":
        return "The page's security token is out of date (you signed in again elsewhere?). Reload the page and try again.";
      case e.code === "INVALID_API_KEY":
        return `The API key was refused: ${msg}.`;
      case e.code === "MISSING_API_KEY" || e.code.includes("SESSION") || e.status === 401:
        return `You are not signed in, or your session has ended: ${msg}.`;
      case e.status === 403:
        return `Not allowed: ${msg}.`;
      case e.status === 404:
        return `Not found: ${msg}.`;
      case e.status === 409:
        return `Conflict: ${msg}.`;
      case e.status === 429:
        return `Too many requests — try again in a moment: ${msg}.`;
      case e.status >= 500:
        return `The gateway failed: ${msg}. Try again; if it persists, check the gateway's logs.`;
      default:
        return `${msg.charAt(0).toUpperCase()}${msg.slice(1)}.`;
    }
  }
  if (e instanceof Error) return e.message;
  return String(e);
}

/** errorCode is the stable code of an error (and the request id of a server failure), shown small beside its sentence. */
export function errorCode(e: unknown): string | undefined {
  if (!(e instanceof ApiError) || e.status === 0) return undefined;
  return e.status >= 500 && e.requestId ? `${e.code} · request ${e.requestId}` : e.code;
}

// ---- the sandbox event stream (when the gateway offers it) ---------------------------------

export interface SandboxEvent {
  id?: string;
  type: string;
  time: string;
  sandboxId?: string;
  data?: Record<string, unknown>;
}

export interface EventQuery {
  sandbox?: string;
  type?: string; // type prefixes, comma-separated
  exclude?: string;
  cursor?: string;
  limit?: number;
  order?: "oldest" | "newest";
}

export const events = {
  list: (q: EventQuery) => request<{ items: SandboxEvent[]; nextCursor?: string }>("GET", "/v1/events", undefined, { query: { ...q } }),
  streamURL: (q: EventQuery) => withQuery("/v1/events/stream", { sandbox: q.sandbox, type: q.type, exclude: q.exclude }),
};
