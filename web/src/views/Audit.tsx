// The audit log: the gateway's events (who did what to which sandbox, policy decisions)
// and the records plugins emit, each with filters and a live tail over server-sent events.
import { useEffect, useMemo, useState } from "preact/hooks";
import { audit, type AuditRecord } from "../api";
import { Field } from "../components/Field";
import { Empty, ErrorBox, Loading } from "../components/Status";
import { localTime } from "../format";
import { useAction } from "../hooks";
import { EventList } from "./EventList";
import { LiveIndicator } from "./SandboxList";

export function Audit({ query }: { query: URLSearchParams }) {
  const [kind, setKind] = useState<"events" | "plugin">(query.get("kind") === "plugin" ? "plugin" : "events");
  return (
    <section>
      <div class="title-row">
        <h1>Audit log</h1>
        <Field label="Show" id="audit-kind">
          <select id="audit-kind" value={kind} onChange={(e) => setKind(e.currentTarget.value as "events" | "plugin")}>
            <option value="events">gateway events</option>
            <option value="plugin">records from plugins</option>
          </select>
        </Field>
      </div>
      {kind === "events" ? <GatewayEvents query={query} /> : <PluginRecords query={query} />}
    </section>
  );
}

function GatewayEvents({ query }: { query: URLSearchParams }) {
  const [form, setForm] = useState({ sandbox: query.get("sandbox") || "", type: query.get("type") || "", exclude: query.get("exclude") ?? "policy.decision" });
  const [applied, setApplied] = useState(form);
  const [tail, setTail] = useState(false);
  const bind = (k: keyof typeof form) => ({ value: form[k], onInput: (e: Event) => setForm({ ...form, [k]: (e.currentTarget as HTMLInputElement).value }) });
  return (
    <>
      <form
        class="filters"
        aria-label="Filter events"
        onSubmit={(e) => {
          e.preventDefault();
          setApplied({ ...form });
        }}
      >
        <Field label="Types" id="ev-type" hint="prefixes, comma-separated: sandbox., command.">
          <input id="ev-type" {...bind("type")} />
        </Field>
        <Field label="Leave out" id="ev-exclude" hint="prefixes, comma-separated">
          <input id="ev-exclude" {...bind("exclude")} />
        </Field>
        <Field label="Sandbox id" id="ev-sandbox">
          <input id="ev-sandbox" class="mono" {...bind("sandbox")} />
        </Field>
        <button type="submit">Apply filters</button>
        <label class="chip">
          <input type="checkbox" checked={tail} onChange={() => setTail(!tail)} data-testid="events-live-tail" /> Live tail
        </label>
      </form>
      <EventList query={{ sandbox: applied.sandbox.trim() || undefined, type: applied.type.trim() || undefined, exclude: applied.exclude.trim() || undefined }} live={tail} showSandbox />
    </>
  );
}

function PluginRecords({ query }: { query: URLSearchParams }) {
  const [items, setItems] = useState<AuditRecord[]>([]);
  const [cursor, setCursor] = useState<string | undefined>();
  const [loaded, setLoaded] = useState(false);
  const [text, setText] = useState(query.get("q") || "");
  const [source, setSource] = useState("");
  const [tail, setTail] = useState(false);
  const [phase, setPhase] = useState("connecting");
  const load = useAction(async (more: boolean) => {
    const page = await audit.list({ order: "newest", limit: 200, cursor: more ? cursor : undefined });
    setItems((prev) => (more ? [...prev, ...page.items] : page.items));
    setCursor(page.nextCursor);
    setLoaded(true);
  });
  useEffect(() => {
    load.run(false);
  }, []);
  useEffect(() => {
    if (!tail) return;
    setPhase("connecting");
    const es = new EventSource(audit.streamURL());
    es.addEventListener("open", () => setPhase("live"));
    es.addEventListener("audit", (e) => {
      const rec = JSON.parse((e as MessageEvent).data) as AuditRecord;
      setItems((prev) => (prev.some((r) => r.id === rec.id) ? prev : [rec, ...prev]));
    });
    es.addEventListener("error", () => setPhase(es.readyState === EventSource.CLOSED ? "failed" : "reconnecting"));
    return () => es.close();
  }, [tail]);
  const sources = useMemo(() => [...new Set(items.map((r) => r.source))], [items]);
  const shown = items.filter((r) => (!source || r.source === source) && (!text || JSON.stringify(r.record).toLowerCase().includes(text.toLowerCase())));
  return (
    <>
      <div class="title-row">
        <label class="chip">
          <input type="checkbox" checked={tail} onChange={() => setTail(!tail)} data-testid="live-tail" /> Live tail
        </label>
        {tail && <LiveIndicator phase={phase} />}
      </div>
      <form class="filters" onSubmit={(e) => e.preventDefault()} aria-label="Filter audit records">
        <Field label="Contains" id="audit-text">
          <input id="audit-text" value={text} onInput={(e) => setText(e.currentTarget.value)} placeholder="a sandbox id, a type…" />
        </Field>
        <Field label="Source" id="audit-source">
          <select id="audit-source" value={source} onChange={(e) => setSource(e.currentTarget.value)}>
            <option value="">any</option>
            {sources.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </Field>
      </form>
      <ErrorBox error={load.error} onRetry={() => load.run(false)} />
      {!loaded && load.busy ? (
        <Loading what="audit records" />
      ) : shown.length === 0 ? (
        loaded && (
          <Empty>
            <p>{items.length ? "No record matches these filters." : "No audit records yet. Plugins write them (emit_audit)."}</p>
          </Empty>
        )
      ) : (
        <ul class="records" data-testid="audit-records">
          {shown.map((r) => (
            <li key={r.id}>
              <time dateTime={r.time}>{localTime(r.time)}</time> <span class="tag">{r.source}</span>
              <pre class="mono">{JSON.stringify(r.record, null, 1)}</pre>
            </li>
          ))}
        </ul>
      )}
      {cursor && (
        <button type="button" onClick={() => load.run(true)} disabled={load.busy}>
          {load.busy ? "Loading…" : "Load older records"}
        </button>
      )}
    </>
  );
}
