// EventList shows a tenant's events (GET /v1/events) newest first, with older pages on
// demand and, optionally, new events as they happen (GET /v1/events/stream).
import { useEffect, useState } from "preact/hooks";
import { events, type EventQuery, type SandboxEvent } from "../api";
import { Empty, ErrorBox, Loading } from "../components/Status";
import { localTime, shortId } from "../format";
import { useAction } from "../hooks";
import { href } from "../router";
import { LiveIndicator } from "./SandboxList";

export function EventList({ query, live, showSandbox }: { query: EventQuery; live: boolean; showSandbox?: boolean }) {
  const [items, setItems] = useState<SandboxEvent[]>([]);
  const [cursor, setCursor] = useState<string | undefined>();
  const [loaded, setLoaded] = useState(false);
  const [phase, setPhase] = useState("connecting");
  const key = JSON.stringify(query);
  const load = useAction(async (more: boolean) => {
    const page = await events.list({ ...query, order: "newest", limit: 50, cursor: more ? cursor : undefined });
    setItems((prev) => (more ? [...prev, ...page.items] : page.items));
    setCursor(page.nextCursor);
    setLoaded(true);
  });
  useEffect(() => {
    setLoaded(false);
    setItems([]);
    load.run(false);
  }, [key]);
  useEffect(() => {
    if (!live) return;
    setPhase("connecting");
    const es = new EventSource(events.streamURL(query));
    es.addEventListener("open", () => setPhase("live"));
    es.addEventListener("event", (e) => {
      const ev = JSON.parse((e as MessageEvent).data) as SandboxEvent;
      setItems((prev) => (ev.id && prev.some((p) => p.id === ev.id) ? prev : [ev, ...prev].slice(0, 1000)));
    });
    es.addEventListener("error", () => setPhase(es.readyState === EventSource.CLOSED ? "failed" : "reconnecting"));
    return () => es.close();
  }, [key, live]);
  return (
    <div>
      {live && <LiveIndicator phase={phase} />}
      <ErrorBox error={load.error} onRetry={() => load.run(false)} />
      {!loaded && load.busy ? (
        <Loading what="events" />
      ) : items.length === 0 ? (
        loaded && (
          <Empty>
            <p>No events match.</p>
          </Empty>
        )
      ) : (
        <ul class="records" data-testid="events">
          {items.map((ev, i) => (
            <li key={ev.id || i}>
              <time dateTime={ev.time}>{localTime(ev.time)}</time> <span class="tag">{ev.type}</span>
              {showSandbox && ev.sandboxId && (
                <a class="mono" href={href("sandboxes", ev.sandboxId)}>
                  {shortId(ev.sandboxId)}
                </a>
              )}
              {ev.data && Object.keys(ev.data).length > 0 && <pre class="mono">{JSON.stringify(ev.data)}</pre>}
            </li>
          ))}
        </ul>
      )}
      {cursor && (
        <button type="button" onClick={() => load.run(true)} disabled={load.busy}>
          {load.busy ? "Loading…" : "Load older events"}
        </button>
      )}
    </div>
  );
}
