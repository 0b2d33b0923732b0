// One sandbox: its status and settings, and tabs for the terminal, files, commands,
// egress policy and activity. Each tab talks to the sandbox's agent through the gateway.
import { lazy, Suspense } from "preact/compat";
import { useEffect, useState } from "preact/hooks";
import {
  agent,
  sandboxes,
  type Endpoint,
  type Metrics,
  type Sandbox,
  AGENT_PORT,
  EGRESS_PORT,
  RESERVED_PREFIX,
  proxyPath,
  readEventStream,
} from "../api";
import { useCan } from "../auth";
import { StateBadge } from "../components/Badge";
import { ConfirmButton } from "../components/ConfirmButton";
import { CopyButton } from "../components/CopyButton";
import { Field } from "../components/Field";
import { ErrorBox, Loading, Notice } from "../components/Status";
import { formatPairs, localTime, parsePairs, relativeTime } from "../format";
import { useAction, useAsync, useNow } from "../hooks";
import { href, navigate } from "../router";
import { CommandRunner } from "./CommandRunner";
import { EgressEditor } from "./EgressEditor";
import { EventList } from "./EventList";
import { FileBrowser } from "./FileBrowser";

// xterm.js is large: it loads only when the terminal tab opens.
const Terminal = lazy(() => import("./Terminal"));
// uPlot loads with the first chart, not with the console.
const UsageCharts = lazy(() => import("./UsageCharts"));

const TABS: { id: string; label: string; action: string }[] = [
  { id: "overview", label: "Overview", action: "sandbox.get" },
  { id: "terminal", label: "Terminal", action: "sandbox.proxy" },
  { id: "files", label: "Files", action: "sandbox.proxy" },
  { id: "commands", label: "Commands", action: "sandbox.proxy" },
  { id: "egress", label: "Egress", action: "sandbox.proxy" },
  { id: "activity", label: "Activity", action: "audit.read" },
];

export function SandboxDetail({ id, tab }: { id: string; tab: string }) {
  const can = useCan();
  const sb = useAsync(() => sandboxes.get(id), [id]);

  const del = useAction(async () => {
    await sandboxes.remove(id);
    navigate(href("sandboxes"));
  });
  if (sb.loading && !sb.data) return <Loading what="the sandbox" />;
  if (!sb.data)
    return (
      <section>
        <p>
          <a href={href("sandboxes")}>← Sandboxes</a>
        </p>
        <ErrorBox error={sb.error} onRetry={sb.reload} />
      </section>
    );
  const s = sb.data;
  const running = s.status.state === "Running";
  const tabs = TABS.filter((t) => can(t.action));
  return (
    <section>
      <p class="crumbs">
        <a href={href("sandboxes")}>← Sandboxes</a>
      </p>
      <div class="title-row">
        <h1 class="mono break">{s.id}</h1>
        <StateBadge status={s.status} />
        <button type="button" class="small" onClick={sb.reload} disabled={sb.loading}>
          {sb.loading ? "Refreshing…" : "Refresh"}
        </button>
        {can("sandbox.delete") && (
          <ConfirmButton onConfirm={() => del.run()} testid="delete-sandbox">
            {del.busy ? "Deleting…" : "Delete"}
          </ConfirmButton>
        )}
      </div>
      <ErrorBox error={del.error} />
      <nav class="tabs" aria-label="Sandbox sections">
        {tabs.map((t) => (
          <a key={t.id} href={href("sandboxes", id, t.id)} aria-current={tab === t.id ? "page" : undefined}>
            {t.label}
          </a>
        ))}
      </nav>
      {!running && tab !== "overview" && tab !== "activity" && (
        <Notice>The sandbox is {s.status.state.toLowerCase()}; its agent answers only while it runs.</Notice>
      )}
      {tab === "overview" && <Overview sb={s} onChange={sb.reload} setData={sb.setData} />}
      {tab === "terminal" && (
        <Suspense fallback={<Loading what="the terminal" />}>
          <Terminal id={id} />
        </Suspense>
      )}
      {tab === "files" && <FileBrowser id={id} />}
      {tab === "commands" && <CommandRunner id={id} />}
      {tab === "egress" && <EgressEditor id={id} />}
      {tab === "activity" && <Activity id={id} />}
    </section>
  );
}

function Overview({ sb, onChange, setData }: { sb: Sandbox; onChange: () => void; setData: (s: Sandbox) => void }) {
  const can = useCan();
  const now = useNow(5000);
  const running = sb.status.state === "Running";
  return (
    <div class="cols">
      <div class="card">
        <h2>Status</h2>
        <dl class="kv">
          <dt>State</dt>
          <dd>
            <StateBadge status={sb.status} /> {sb.status.reason && <span>{sb.status.reason}</span>}
          </dd>
          {sb.status.message && (
            <>
              <dt>Message</dt>
              <dd>{sb.status.message}</dd>
            </>
          )}
          <dt>Image</dt>
          <dd class="mono">{sb.image?.uri || "—"}</dd>
          <dt>Entrypoint</dt>
          <dd class="mono">{(sb.entrypoint || []).join(" ") || "—"}</dd>
          <dt>Created</dt>
          <dd>
            {localTime(sb.createdAt)} ({relativeTime(sb.createdAt, now)})
          </dd>
        </dl>
        {can("sandbox.update") && <PauseResume sb={sb} onChange={onChange} />}
      </div>
      <Expiry sb={sb} now={now} setData={setData} />
      <MetadataEditor sb={sb} setData={setData} />
      {running && can("sandbox.proxy") && <MetricsCard id={sb.id} />}
      {running && (
        <div class="card">
          <h2>Over time</h2>
          <Suspense fallback={<Loading what="charts" />}>
            <UsageCharts id={sb.id} />
          </Suspense>
        </div>
      )}
      {can("sandbox.proxy") && <Endpoints id={sb.id} />}
    </div>
  );
}

function PauseResume({ sb, onChange }: { sb: Sandbox; onChange: () => void }) {
  const act = useAction(async (what: "pause" | "resume") => {
    await (what === "pause" ? sandboxes.pause(sb.id) : sandboxes.resume(sb.id));
    onChange();
  });
  return (
    <div class="actions">
      {sb.status.state === "Running" && (
        <button type="button" onClick={() => act.run("pause")} disabled={act.busy}>
          Pause
        </button>
      )}
      {sb.status.state === "Paused" && (
        <button type="button" onClick={() => act.run("resume")} disabled={act.busy}>
          Resume
        </button>
      )}
      <ErrorBox error={act.error} />
    </div>
  );
}

function Expiry({ sb, now, setData }: { sb: Sandbox; now: number; setData: (s: Sandbox) => void }) {
  const can = useCan();
  const [minutes, setMinutes] = useState("60");
  const renew = useAction(async () => {
    const m = Number(minutes);
    if (!Number.isFinite(m) || m <= 0) throw new Error("Enter a positive number of minutes.");
    const r = await sandboxes.renew(sb.id, new Date(Date.now() + m * 60_000).toISOString());
    setData({ ...sb, expiresAt: r.expiresAt });
  });
  return (
    <div class="card">
      <h2>Expiry</h2>
      {sb.expiresAt ? (
        <p data-testid="expires">
          Expires {relativeTime(sb.expiresAt, now)} — {localTime(sb.expiresAt)}
        </p>
      ) : (
        <p>This sandbox does not expire; delete it when done.</p>
      )}
      {can("sandbox.update") && sb.expiresAt && (
        <form
          class="inline-form"
          onSubmit={(e) => {
            e.preventDefault();
            renew.run();
          }}
        >
          <Field label="Renew to (minutes from now)" id="renew-minutes">
            <input id="renew-minutes" inputMode="numeric" value={minutes} onInput={(e) => setMinutes(e.currentTarget.value)} />
          </Field>
          <button type="submit" disabled={renew.busy} data-testid="renew">
            {renew.busy ? "Renewing…" : "Renew"}
          </button>
        </form>
      )}
      <ErrorBox error={renew.error} />
    </div>
  );
}

function MetadataEditor({ sb, setData }: { sb: Sandbox; setData: (s: Sandbox) => void }) {
  const can = useCan();
  const [editing, setEditing] = useState(false);
  // Keys under sandgate.io/ belong to the gateway (a batch label, say): shown, not edited.
  const editable = () => Object.fromEntries(Object.entries(sb.metadata || {}).filter(([k]) => !k.startsWith(RESERVED_PREFIX)));
  const [text, setText] = useState(formatPairs(editable()));
  const save = useAction(async () => {
    const { pairs, bad } = parsePairs(text);
    if (bad.length) throw new Error(`Each line needs key=value: ${bad.join(", ")}`);
    const reserved = Object.keys(pairs).filter((k) => k.startsWith(RESERVED_PREFIX));
    if (reserved.length) throw new Error(`Keys under ${RESERVED_PREFIX} belong to the gateway: ${reserved.join(", ")}`);
    // A JSON merge patch: keys that are gone are sent as null.
    const patch: Record<string, string | null> = { ...pairs };
    for (const k of Object.keys(editable())) if (!(k in pairs)) patch[k] = null;
    const updated = await sandboxes.patchMetadata(sb.id, patch);
    setData(updated);
    setEditing(false);
  });
  const entries = Object.entries(sb.metadata || {});
  return (
    <div class="card">
      <h2>Metadata</h2>
      {!editing &&
        (entries.length ? (
          <dl class="kv" data-testid="metadata">
            {entries.map(([k, v]) => (
              <>
                <dt class="mono">{k}</dt>
                <dd class="mono">{v}</dd>
              </>
            ))}
          </dl>
        ) : (
          <p class="hint">No metadata.</p>
        ))}
      {editing && (
        <form
          onSubmit={(e) => {
            e.preventDefault();
            save.run();
          }}
        >
          <Field label="Metadata (key=value, one per line)" id="meta-edit">
            <textarea id="meta-edit" rows={5} class="mono" value={text} onInput={(e) => setText(e.currentTarget.value)} />
          </Field>
          <div class="actions">
            <button type="submit" class="primary" disabled={save.busy} data-testid="save-metadata">
              Save
            </button>
            <button type="button" onClick={() => setEditing(false)}>
              Cancel
            </button>
          </div>
        </form>
      )}
      <ErrorBox error={save.error} />
      {!editing && can("sandbox.update") && (
        <button
          type="button"
          data-testid="edit-metadata"
          onClick={() => {
            setText(formatPairs(editable()));
            setEditing(true);
          }}
        >
          Edit metadata
        </button>
      )}
    </div>
  );
}

/** MetricsCard follows the agent's /metrics/watch stream (one sample a second). */
function MetricsCard({ id }: { id: string }) {
  const [m, setM] = useState<Metrics>();
  const [error, setError] = useState<unknown>();
  useEffect(() => {
    const ctrl = new AbortController();
    (async () => {
      try {
        const res = await fetch(proxyPath(id, AGENT_PORT, "/metrics/watch"), { credentials: "same-origin", signal: ctrl.signal });
        if (!res.ok) {
          setM(await agent(id).metrics());
          return;
        }
        await readEventStream(res, (ev) => setM(ev as unknown as Metrics));
      } catch (e) {
        if ((e as Error).name !== "AbortError") setError(e);
      }
    })();
    return () => ctrl.abort();
  }, [id]);
  return (
    <div class="card">
      <h2>Usage</h2>
      {error ? <ErrorBox error={error} /> : !m ? <Loading what="metrics" /> : (
        <div data-testid="metrics">
          <Meter label={`CPU (${m.cpu_count} ${m.cpu_count === 1 ? "core" : "cores"})`} value={m.cpu_used_pct} max={100} text={`${m.cpu_used_pct.toFixed(1)} %`} />
          <Meter label="Memory" value={m.mem_used_mib} max={m.mem_total_mib || 1} text={`${m.mem_used_mib.toFixed(0)} of ${m.mem_total_mib.toFixed(0)} MiB`} />
        </div>
      )}
    </div>
  );
}

export function Meter({ label, value, max, text }: { label: string; value: number; max: number; text: string }) {
  return (
    <div class="meter">
      <span>{label}</span>
      <span class="mono">{text}</span>
      <meter min={0} max={max} value={value} aria-label={label} />
    </div>
  );
}

const LINK_TTLS = [
  { label: "10 minutes", seconds: 600 },
  { label: "1 hour", seconds: 3600 },
  { label: "1 day", seconds: 86400 },
];

function Endpoints({ id }: { id: string }) {
  const [port, setPort] = useState(String(AGENT_PORT));
  const [ttl, setTtl] = useState(600);
  const [ep, setEp] = useState<Endpoint>();
  const [link, setLink] = useState<Endpoint>();
  const get = useAction(async () => {
    const p = Number(port);
    if (!Number.isInteger(p) || p < 1 || p > 65535) throw new Error("A port is a whole number from 1 to 65535.");
    setEp(await sandboxes.endpoint(id, p));
  });
  const sign = useAction(async () => {
    const p = Number(port);
    if (!Number.isInteger(p) || p < 1 || p > 65535) throw new Error("A port is a whole number from 1 to 65535.");
    setLink(await sandboxes.endpoint(id, p, Math.floor(Date.now() / 1000) + ttl));
  });
  const url = ep ? `${location.protocol}//${ep.endpoint}` : "";
  return (
    <div class="card">
      <h2>Endpoints</h2>
      <form
        class="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          get.run();
        }}
      >
        <Field label="Port" id="ep-port" hint={`${AGENT_PORT} is the agent, ${EGRESS_PORT} the egress API`}>
          <input id="ep-port" inputMode="numeric" list="ep-ports" value={port} onInput={(e) => setPort(e.currentTarget.value)} />
          <datalist id="ep-ports">
            <option value={String(AGENT_PORT)} />
            <option value={String(EGRESS_PORT)} />
            <option value="8000" />
            <option value="8080" />
          </datalist>
        </Field>
        <button type="submit" disabled={get.busy}>
          Show endpoint
        </button>
      </form>
      <ErrorBox error={get.error} />
      {ep && (
        <div class="endpoint" data-testid="endpoint">
          <code class="break">{url}</code> <CopyButton text={url} />
          {ep.headers &&
            Object.entries(ep.headers).map(([k, v]) => (
              <p key={k} class="hint">
                Send header <code>{k}</code> <CopyButton text={v} label="Copy value" />
              </p>
            ))}
        </div>
      )}
      <form
        class="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          sign.run();
        }}
      >
        <Field label="Signed link valid for" id="ep-ttl">
          <select id="ep-ttl" value={String(ttl)} onChange={(e) => setTtl(Number(e.currentTarget.value))}>
            {LINK_TTLS.map((t) => (
              <option key={t.seconds} value={String(t.seconds)}>
                {t.label}
              </option>
            ))}
          </select>
        </Field>
        <button type="submit" disabled={sign.busy} data-testid="sign-link">
          Signed link
        </button>
      </form>
      <ErrorBox error={sign.error} />
      {link?.url && (
        <div class="endpoint">
          <a href={link.url} target="_blank" rel="noopener" class="break" data-testid="signed-link">
            {link.url}
          </a>{" "}
          <CopyButton text={link.url} />
          <p class="hint">Anyone with this link can open port {port} until {localTime(link.expiresAt)}.</p>
        </div>
      )}
    </div>
  );
}

/** Activity shows the sandbox's events, live. */
function Activity({ id }: { id: string }) {
  const [noisy, setNoisy] = useState(false);
  return (
    <div class="card">
      <div class="title-row">
        <h2>Recent activity</h2>
        <label class="chip">
          <input type="checkbox" checked={noisy} onChange={() => setNoisy(!noisy)} /> Include previews and policy decisions
        </label>
        <a href={href("audit") + `?sandbox=${encodeURIComponent(id)}`}>Open in the audit log</a>
      </div>
      <EventList query={{ sandbox: id, exclude: noisy ? undefined : "policy.,preview.accessed" }} live={true} />
    </div>
  );
}
