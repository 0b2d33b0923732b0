// useSandboxWatch keeps a live map of sandboxes from the gateway's server-sent events
// (GET /v1/sandboxes/watch): a snapshot ("sandbox" events up to "ready"), then changes.
// EventSource reconnects by itself; each reconnection replays the snapshot, so what was
// deleted while disconnected disappears too.
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, sandboxes, type Sandbox } from "./api";

export type WatchPhase = "connecting" | "live" | "reconnecting" | "failed";

export interface Watch {
  items: Map<string, Sandbox>;
  phase: WatchPhase;
  error: unknown;
  retry: () => void;
}

export function useSandboxWatch(states: string[], metadata: string): Watch {
  const [items, setItems] = useState<Map<string, Sandbox>>(new Map());
  const [phase, setPhase] = useState<WatchPhase>("connecting");
  const [error, setError] = useState<unknown>();
  const [attempt, setAttempt] = useState(0);
  const live = useRef(new Map<string, Sandbox>());

  useEffect(() => {
    setPhase("connecting");
    setError(undefined);
    const es = new EventSource(sandboxes.watchURL(states, metadata));
    let snapshot: Map<string, Sandbox> | null = new Map();
    let ready = false;
    const publish = () => setItems(new Map(live.current));
    es.addEventListener("open", () => {
      snapshot = new Map();
    });
    es.addEventListener("sandbox", (e) => {
      const sb = JSON.parse((e as MessageEvent).data) as Sandbox;
      if (snapshot) snapshot.set(sb.id, sb);
      else {
        live.current.set(sb.id, sb);
        publish();
      }
    });
    es.addEventListener("ready", () => {
      live.current = snapshot || new Map();
      snapshot = null;
      ready = true;
      setPhase("live");
      setError(undefined);
      publish();
    });
    es.addEventListener("deleted", (e) => {
      const { id } = JSON.parse((e as MessageEvent).data) as { id: string };
      if (snapshot) snapshot.delete(id);
      live.current.delete(id);
      publish();
    });
    es.addEventListener("error", () => {
      if (es.readyState === EventSource.CLOSED) {
        // The gateway refused the stream (EventSource hides why): ask the list API, whose
        // error carries the gateway's {code, message}.
        setPhase("failed");
        sandboxes
          .list({ state: states, metadata, pageSize: 1 })
          .then(() => setError(new ApiError(0, "STREAM", "The live list could not be opened.")))
          .catch(setError);
      } else {
        setPhase(ready ? "reconnecting" : "connecting");
      }
    });
    return () => es.close();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [states.join(","), metadata, attempt]);

  return { items, phase, error, retry: () => setAttempt((a) => a + 1) };
}
