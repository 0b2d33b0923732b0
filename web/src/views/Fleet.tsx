// The fleet over the last 15 minutes: sandboxes by state, cold create latency and pool
// fill, from the gateway's GET /v1/fleet/metrics (platform admin only). The charts and
// uPlot load lazily.
import { lazy, Suspense } from "preact/compat";
import { Loading } from "../components/Status";

const FleetCharts = lazy(() => import("./UsageCharts").then((m) => ({ default: m.FleetCharts })));

export function Fleet() {
  return (
    <section>
      <h1>Fleet</h1>
      <p class="hint">Sampled by this gateway every few seconds; Prometheus has the long history (GET /metrics, deploy/grafana/sandgate.json).</p>
      <div class="card">
        <Suspense fallback={<Loading what="charts" />}>
          <FleetCharts />
        </Suspense>
      </div>
    </section>
  );
}
