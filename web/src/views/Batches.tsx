// Batches: create N sandboxes at once and watch them come up. The gateway labels every
// member with sandgate.io/batch=<id>, so the live list can follow just them.
import { useMemo, useState } from "preact/hooks";
import { BATCH_LABEL, batches, pools, type Batch } from "../api";
import { useCan } from "../auth";
import { StateBadge } from "../components/Badge";
import { ConfirmButton } from "../components/ConfirmButton";
import { Field } from "../components/Field";
import { Empty, ErrorBox, Loading } from "../components/Status";
import { localTime, shortId } from "../format";
import { useAction, useAsync } from "../hooks";
import { href, navigate } from "../router";
import { useSandboxWatch } from "../watch";
import { LiveIndicator } from "./SandboxList";
import { buildRequest, emptyTemplate, TemplateEditor, type TemplateFields } from "./CreateSandboxForm";

const RECENT = "sandgate.batches";

interface Recent {
  id: string;
  count: number;
  at: string;
}

function recent(): Recent[] {
  try {
    return JSON.parse(localStorage.getItem(RECENT) || "[]");
  } catch {
    return [];
  }
}

export function Batches({ id }: { id?: string }) {
  if (id) return <BatchView id={id} />;
  return <BatchHome />;
}

function BatchHome() {
  const can = useCan();
  const list = recent();
  return (
    <section>
      <h1>Batches</h1>
      {can("batch.create") && <CreateBatch />}
      <form
        class="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          const v = (e.currentTarget.elements.namedItem("batch-id") as HTMLInputElement).value.trim();
          if (v) navigate(href("batches", v));
        }}
      >
        <Field label="Open a batch by id" id="batch-id">
          <input id="batch-id" name="batch-id" class="mono" />
        </Field>
        <button type="submit">Open</button>
      </form>
      <h2>Recent batches from this browser</h2>
      {list.length === 0 ? (
        <Empty>
          <p>No batches created here yet.</p>
        </Empty>
      ) : (
        <ul class="plain">
          {list.map((b) => (
            <li key={b.id}>
              <a href={href("batches", b.id)} class="mono">
                {shortId(b.id)}
              </a>{" "}
              — {b.count} sandboxes, {localTime(b.at)}
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

function CreateBatch() {
  const poolList = useAsync(() => pools.list(), []);
  const [count, setCount] = useState("3");
  const [source, setSource] = useState<"template" | "pool">("template");
  const [poolRef, setPoolRef] = useState("");
  const [tpl, setTpl] = useState<TemplateFields>(emptyTemplate);
  const create = useAction(async () => {
    const n = Number(count);
    if (!Number.isInteger(n) || n < 1) throw new Error("The count is a whole number, 1 or more.");
    let b: Batch;
    if (source === "pool") {
      if (!poolRef) throw new Error("Choose a pool.");
      b = await batches.create({ count: n, poolRef });
    } else {
      const { req, problem } = buildRequest(tpl);
      if (!req) throw new Error(problem);
      b = await batches.create({ count: n, template: req });
    }
    localStorage.setItem(RECENT, JSON.stringify([{ id: b.id, count: n, at: new Date().toISOString() }, ...recent()].slice(0, 20)));
    navigate(href("batches", b.id));
  });
  const poolNames = poolList.data?.items.map((p) => p.name) || [];
  return (
    <form
      class="card"
      onSubmit={(e) => {
        e.preventDefault();
        create.run();
      }}
    >
      <h2>New batch</h2>
      <div class="grid2 tight">
        <Field label="Count" id="batch-count">
          <input id="batch-count" inputMode="numeric" value={count} onInput={(e) => setCount(e.currentTarget.value)} />
        </Field>
        <Field label="From" id="batch-source">
          <select id="batch-source" value={source} onChange={(e) => setSource(e.currentTarget.value as "template" | "pool")}>
            <option value="template">a template (cold start)</option>
            <option value="pool" disabled={poolNames.length === 0}>
              a pool (warm){poolNames.length === 0 ? " — none exist" : ""}
            </option>
          </select>
        </Field>
      </div>
      {source === "pool" ? (
        <Field label="Pool" id="batch-pool">
          <select id="batch-pool" value={poolRef} onChange={(e) => setPoolRef(e.currentTarget.value)}>
            <option value="">Choose…</option>
            {poolNames.map((n) => (
              <option key={n} value={n}>
                {n}
              </option>
            ))}
          </select>
        </Field>
      ) : (
        <TemplateEditor f={tpl} set={setTpl} idPrefix="batch" />
      )}
      <ErrorBox error={create.error} />
      <button type="submit" class="primary" disabled={create.busy} data-testid="create-batch">
        {create.busy ? "Creating…" : "Create batch"}
      </button>
    </form>
  );
}

function BatchView({ id }: { id: string }) {
  const can = useCan();
  const batch = useAsync(() => batches.get(id), [id]);
  const watch = useSandboxWatch([], `${BATCH_LABEL}=${id}`);
  const del = useAction(async () => {
    await batches.remove(id);
    navigate(href("batches"));
  });
  const members = useMemo(() => {
    const ids = batch.data?.members?.map((m) => m.id) || [];
    return ids.map((mid) => ({ id: mid, source: batch.data?.members?.find((m) => m.id === mid)?.source, live: watch.items.get(mid), initial: batch.data?.members?.find((m) => m.id === mid)?.status }));
  }, [batch.data, watch.items]);
  if (batch.loading && !batch.data) return <Loading what="the batch" />;
  if (!batch.data)
    return (
      <section>
        <p>
          <a href={href("batches")}>← Batches</a>
        </p>
        <ErrorBox error={batch.error} onRetry={batch.reload} />
      </section>
    );
  const hasSource = members.some((m) => m.source);
  const counts: Record<string, number> = {};
  for (const m of members) {
    const s = m.live?.status.state || m.initial?.state || "Pending";
    counts[s] = (counts[s] || 0) + 1;
  }
  return (
    <section>
      <p class="crumbs">
        <a href={href("batches")}>← Batches</a>
      </p>
      <div class="title-row">
        <h1 class="mono break">Batch {shortId(id)}</h1>
        <LiveIndicator phase={watch.phase} />
        {can("batch.delete") && <ConfirmButton onConfirm={() => del.run()}>Delete batch and members</ConfirmButton>}
      </div>
      <ErrorBox error={del.error} />
      <p data-testid="batch-summary">
        {batch.data.count} members{batch.data.poolRef ? ` from pool ${batch.data.poolRef}` : ""}:{" "}
        {Object.entries(counts)
          .map(([s, n]) => `${n} ${s.toLowerCase()}`)
          .join(", ")}
      </p>
      {watch.phase === "failed" && <ErrorBox error={watch.error} onRetry={watch.retry} />}
      <progress max={batch.data.count} value={counts.Running || 0} aria-label="Members running" />
      <div class="table-wrap">
        <table class="list">
          <thead>
            <tr>
              <th scope="col">Sandbox</th>
              {hasSource && <th scope="col">Source</th>}
              <th scope="col">State</th>
            </tr>
          </thead>
          <tbody>
            {members.map((m) => (
              <tr key={m.id}>
                <td>
                  <a class="mono" href={href("sandboxes", m.id)}>
                    {shortId(m.id)}
                  </a>
                </td>
                {hasSource && <td>{m.source}</td>}
                <td>
                  <StateBadge status={m.live?.status || m.initial} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}
