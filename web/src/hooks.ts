import { useCallback, useEffect, useRef, useState } from "preact/hooks";

export interface Async<T> {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  reload: () => void;
  setData: (d: T) => void;
}

/** useAsync runs load when deps change and keeps its last answer, error and progress. */
export function useAsync<T>(load: () => Promise<T>, deps: unknown[]): Async<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  const seq = useRef(0);
  const lastDeps = useRef("");
  useEffect(() => {
    const mine = ++seq.current;
    // New arguments (another sandbox, say) must not show the previous answer meanwhile;
    // a reload of the same ones keeps it on screen until the new one arrives.
    const key = JSON.stringify(deps);
    if (key !== lastDeps.current) {
      lastDeps.current = key;
      setData(undefined);
      setError(undefined);
    }
    setLoading(true);
    load().then(
      (d) => {
        if (mine !== seq.current) return;
        setData(d);
        setError(undefined);
        setLoading(false);
      },
      (e) => {
        if (mine !== seq.current) return;
        setError(e);
        setLoading(false);
      },
    );
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { data, error, loading, reload, setData };
}

/** useAction wraps a mutation: busy while it runs, its error kept for display. */
export function useAction<A extends unknown[], R>(fn: (...args: A) => Promise<R>) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const run = async (...args: A): Promise<R | undefined> => {
    setBusy(true);
    setError(undefined);
    try {
      return await fn(...args);
    } catch (e) {
      setError(e);
      return undefined;
    } finally {
      setBusy(false);
    }
  };
  return { run, busy, error, clearError: () => setError(undefined) };
}

/** useInterval calls fn every ms while mounted (for clocks, never for data that has a stream). */
export function useNow(ms: number): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}
