// CPU and memory of one sandbox over the last 15 minutes, from the gateway's
// GET /v1/sandboxes/{id}/metrics (sampled every few seconds by the gateway itself, from
// the engine). uPlot draws them; this module is loaded lazily, so it does not weigh on
// the console's first load.
import { useEffect, useRef, useState } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { sandboxes, type SandboxUsage } from "../api";
import { ErrorBox, Loading } from "../components/Status";

const MiB = 1 << 20;

export default function UsageCharts({ id }: { id: string }) {
  const [usage, setUsage] = useState<SandboxUsage>();
  const [error, setError] = useState<unknown>();
  useEffect(() => {
    let stop = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const load = async () => {
      try {
        const u = await sandboxes.usage(id);
        if (stop) return;
        setUsage(u);
        setError(undefined);
        timer = setTimeout(load, Math.max(1, u.intervalSeconds) * 1000);
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
  }, [id]);
  if (error && !usage) return <ErrorBox error={error} />;
  if (!usage) return <Loading what="resource history" />;
  if (usage.history.length < 2) return <p class="muted" data-testid="usage-waiting">Collecting samples (one every {usage.intervalSeconds} s)…</p>;
  const t = usage.history.map((p) => Date.parse(p.time) / 1000);
  const cur = usage.current;
  const limit = cur?.cpuLimitCores;
  return (
    <div class="usage-charts">
      <Chart
        testid="cpu-chart"
        title={`CPU (% of ${limit ? `${limit} ${limit === 1 ? "core" : "cores"}` : "one core"})`}
        data={[t, usage.history.map((p) => p.cpuPercent)]}
        unit="%"
        stroke="#2563eb"
        max={100}
      />
      <Chart
        testid="memory-chart"
        title={`Memory (MiB of ${cur ? (cur.memoryLimitBytes / MiB).toFixed(0) : "?"}, peak ${cur ? (cur.memoryPeakBytes / MiB).toFixed(0) : "?"})`}
        data={[t, usage.history.map((p) => p.memoryBytes / MiB)]}
        unit="MiB"
        stroke="#16a34a"
      />
    </div>
  );
}

function Chart({ testid, title, data, unit, stroke, max }: { testid: string; title: string; data: uPlot.AlignedData; unit: string; stroke: string; max?: number }) {
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot>();
  useEffect(() => {
    if (!el.current) return;
    const width = Math.max(240, el.current.clientWidth || 480);
    plot.current = new uPlot(
      {
        width,
        height: 160,
        scales: { x: { time: true }, y: { range: (_u, lo, hi) => [0, Math.max(hi, max ?? 0, lo + 1)] } },
        axes: [{}, { label: unit, size: 56 }],
        series: [{}, { label: unit, stroke, fill: stroke + "22", width: 1.5, points: { show: true, size: 3 } }],
        legend: { show: false },
      },
      data,
      el.current,
    );
    return () => plot.current?.destroy();
  }, []);
  useEffect(() => {
    plot.current?.setData(data);
  }, [data]);
  return (
    <figure class="chart" data-testid={testid} data-points={String(data[0].length)}>
      <figcaption>{title}</figcaption>
      <div ref={el} />
    </figure>
  );
}
