// CPU and memory of one sandbox over the last 15 minutes, from the gateway's
// GET /v1/sandboxes/{id}/metrics (sampled every few seconds by the gateway itself, from
// the engine). uPlot draws them; this module is loaded lazily, so it does not weigh on
// the console's first load.
import { useEffect, useRef, useState } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { fleet, sandboxes, type FleetHistory, type SandboxUsage } from "../api";
import { ErrorBox, Loading } from "../components/Status";

const MiB = 1 << 20;

/**
 * usePolled loads fetch() at once and again after each answer's intervalSeconds (10 s
 * after an error), until the component goes or deps change. It answers the last value
 * and the last error (undefined once a load succeeds again).
 */
function usePolled<T extends { intervalSeconds: number }>(fetch: () => Promise<T>, deps: unknown[]): [T | undefined, unknown] {
  const [value, setValue] = useState<T>();
  const [error, setError] = useState<unknown>();
  useEffect(() => {
    let stop = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const load = async () => {
      try {
        const v = await fetch();
        if (stop) return;
        setValue(v);
        setError(undefined);
        timer = setTimeout(load, Math.max(1, v.intervalSeconds) * 1000);
      } catch (e) {
        if (stop) return;
        setError(e);
        timer = setTimeout(load, 10000);
      }
    };
    load();
    return () => {
      stop = true;
      clearTimeout(timer);
    };
  }, deps);
  return [value, error];
}

export default function UsageCharts({ id }: { id: string }) {
  const [usage, error] = usePolled<SandboxUsage>(() => sandboxes.usage(id), [id]);
  if (error && !usage) return <ErrorBox error={error} />;
  if (!usage) return <Loading what="resource history" />;
  if (usage.history.length < 2) return <p class="hint" data-testid="usage-waiting">Collecting samples (one every {usage.intervalSeconds} s)…</p>;
  const t = usage.history.map((p) => Date.parse(p.time) / 1000);
  const cur = usage.current;
  const limit = cur?.cpuLimitCores;
  return (
    <div class="usage-charts">
      <Chart
        testid="cpu-chart"
        title={`CPU (% of ${limit ? `${limit} ${limit === 1 ? "core" : "cores"}` : "one core"})`}
        unit="%"
        t={t}
        series={[{ label: "%", values: usage.history.map((p) => p.cpuPercent), stroke: "#2563eb", fill: true }]}
        max={100}
      />
      <Chart
        testid="memory-chart"
        title={`Memory (MiB of ${cur ? (cur.memoryLimitBytes / MiB).toFixed(0) : "?"}, peak ${cur ? (cur.memoryPeakBytes / MiB).toFixed(0) : "?"})`}
        unit="MiB"
        t={t}
        series={[{ label: "MiB", values: usage.history.map((p) => p.memoryBytes / MiB), stroke: "#16a34a", fill: true }]}
      />
    </div>
  );
}

const PALETTE = ["#2563eb", "#16a34a", "#d97706", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];

/** FleetCharts polls GET /v1/fleet/metrics and draws sandboxes by state, create latency and pool fill. */
export function FleetCharts() {
  const [hist, error] = usePolled<FleetHistory>(() => fleet.history(), []);
  if (error && !hist) return <ErrorBox error={error} />;
  if (!hist) return <Loading what="the fleet's history" />;
  if (hist.history.length < 2) return <p class="hint" data-testid="fleet-waiting">Collecting samples (one every {hist.intervalSeconds} s)…</p>;
  const h = hist.history;
  const t = h.map((p) => Date.parse(p.time) / 1000);
  const states = [...new Set(h.flatMap((p) => Object.keys(p.sandboxes)))].sort();
  const pools = [...new Set(h.flatMap((p) => p.pools.map((x) => x.name)))].sort();
  const poolSeries: Series[] = [];
  for (const name of pools) {
    poolSeries.push({ label: `${name} available`, values: h.map((p) => p.pools.find((x) => x.name === name)?.available ?? null) });
    poolSeries.push({ label: `${name} target`, values: h.map((p) => p.pools.find((x) => x.name === name)?.target ?? null) });
  }
  return (
    <div class="usage-charts">
      <Chart testid="fleet-states-chart" title="Sandboxes by state" unit="sandboxes" t={t}
        series={states.map((st) => ({ label: st, values: h.map((p) => p.sandboxes[st] ?? 0) }))} />
      <Chart testid="fleet-latency-chart" title="Cold create latency (last 5 minutes)" unit="s" t={t}
        series={[{ label: "p50", values: h.map((p) => p.createP50Seconds) }, { label: "p99", values: h.map((p) => p.createP99Seconds) }]} />
      {pools.length > 0 ? (
        <Chart testid="fleet-pools-chart" title="Pool fill" unit="warm" t={t} series={poolSeries} />
      ) : (
        <p class="hint">No pools.</p>
      )}
    </div>
  );
}

/** One line of a chart: its colour is the palette's unless stroke names one; fill shades the area below it. */
type Series = { label: string; values: (number | null)[]; stroke?: string; fill?: boolean };

/** Chart draws series over times t (seconds), from 0 to at least max; a legend only for several series. */
function Chart(props: { testid: string; title: string; unit: string; t: number[]; series: Series[]; max?: number }) {
  const { testid, title, unit, t, series, max } = props;
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot>();
  const data = [t, ...series.map((s) => s.values)] as uPlot.AlignedData;
  const shape = series.map((s) => s.label).join("|");
  useEffect(() => {
    if (!el.current) return;
    const width = Math.max(240, el.current.clientWidth || 480);
    plot.current = new uPlot(
      {
        width,
        height: 160,
        scales: { x: { time: true }, y: { range: (_u, lo, hi) => [0, Math.max(hi, max ?? 0, lo + 1)] } },
        axes: [{}, { label: unit, size: 56 }],
        series: [
          {},
          ...series.map((s, i) => {
            const stroke = s.stroke ?? PALETTE[i % PALETTE.length];
            return { label: s.label, stroke, fill: s.fill ? stroke + "22" : undefined, width: 1.5, points: { show: true, size: 3 } };
          }),
        ],
        legend: { show: series.length > 1 },
      },
      data,
      el.current,
    );
    return () => plot.current?.destroy();
  }, [shape]);
  useEffect(() => {
    plot.current?.setData(data);
  });
  return (
    <figure class="chart" data-testid={testid} data-points={String(t.length)}>
      <figcaption>{title}</figcaption>
      <div ref={el} />
    </figure>
  );
}
