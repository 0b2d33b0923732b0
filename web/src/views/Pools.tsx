// Pools: how full each is against its bounds, capacity edits, create and delete.
import { useEffect, useState } from "preact/hooks";
import { pools, type Capacity, type Pool } from "../api";
import { useCan } from "../auth";
import { ConfirmButton } from "../components/ConfirmButton";
import { Field } from "../components/Field";
import { Empty, ErrorBox, Loading, Notice } from "../components/Status";
import { useAction, useAsync } from "../hooks";
import { buildRequest, emptyTemplate, TemplateEditor, type TemplateFields } from "./CreateSandboxForm";

const CAP_FIELDS: { key: keyof Capacity; label: string; hint: string }[] = [
  { key: "bufferMin", label: "Buffer min", hint: "idle warm sandboxes kept at least" },
  { key: "bufferMax", label: "Buffer max", hint: "idle warm sandboxes at most" },
  { key: "poolMin", label: "Pool min", hint: "total at least" },
  { key: "poolMax", label: "Pool max", hint: "total at most" },
];

export function Pools() {
  const can = useCan();
  const list = useAsync(() => pools.list(), []);
  const [auto, setAuto] = useState(true);
  const [showCreate, setShowCreate] = useState(false);
  const [notice, setNotice] = useState("");
  // Pool status has no stream; while the page is open it is re-read every few seconds.
  useEffect(() => {
    if (!auto) return;
    const t = setInterval(() => document.visibilityState === "visible" && list.reload(), 3000);
    return () => clearInterval(t);
  }, [auto]);
  const items = list.data?.items || [];
  return (
    <section>
      <div class="title-row">
        <h1>Pools</h1>
        <label class="chip">
          <input type="checkbox" checked={auto} onChange={() => setAuto(!auto)} /> Refresh every 3 s
        </label>
        {can("pool.create") && (
          <button type="button" class="primary" aria-expanded={showCreate} onClick={() => setShowCreate(!showCreate)} data-testid="new-pool">
            {showCreate ? "Close the form" : "New pool"}
          </button>
        )}
      </div>
      {showCreate && (
        <CreatePool
          onCreated={(p) => {
            setShowCreate(false);
            setNotice(`Pool ${p.name} created; it fills in the background.`);
            list.reload();
          }}
        />
      )}
      {notice && <Notice>{notice}</Notice>}
      {list.loading && !list.data ? (
        <Loading what="pools" />
      ) : list.error && !list.data ? (
        <ErrorBox error={list.error} onRetry={list.reload} />
      ) : items.length === 0 ? (
        <Empty>
          <p>No pools. A pool keeps sandboxes warm so that creates claim one at once.</p>
        </Empty>
      ) : (
        <div class="cols">
          {items.map((p) => (
            <PoolCard key={p.name} pool={p} onChange={list.reload} />
          ))}
        </div>
      )}
    </section>
  );
}

function PoolCard({ pool, onChange }: { pool: Pool; onChange: () => void }) {
  const can = useCan();
  const [editing, setEditing] = useState(false);
  const [cap, setCap] = useState<Record<string, string>>({});
  const save = useAction(async () => {
    const spec: Capacity = {};
    for (const f of CAP_FIELDS) {
      const n = Number(cap[f.key]);
      if (!Number.isInteger(n) || n < 0) throw new Error(`${f.label} must be a whole number, 0 or more.`);
      spec[f.key] = n;
    }
    await pools.update(pool.name, { name: pool.name, template: pool.template, capacitySpec: spec });
    setEditing(false);
    onChange();
  });
  const del = useAction(async () => {
    await pools.remove(pool.name);
    onChange();
  });
  const st = pool.status || {};
  const c = pool.capacitySpec || {};
  return (
    <article class="card" data-pool={pool.name}>
      <h2>{pool.name}</h2>
      <p class="mono hint">{pool.template?.image?.uri}</p>
      <Gauge label="Idle (warm)" value={st.available ?? 0} min={c.bufferMin ?? 0} max={c.bufferMax ?? 0} testid="available" />
      <Gauge label="Total" value={st.total ?? 0} min={c.poolMin ?? 0} max={c.poolMax ?? 0} testid="total" />
      <p class="hint">
        {st.allocated ?? 0} claimed · {st.starting ?? 0} starting
      </p>
      {editing ? (
        <form
          onSubmit={(e) => {
            e.preventDefault();
            save.run();
          }}
        >
          <div class="grid2 tight">
            {CAP_FIELDS.map((f) => (
              <Field key={f.key} label={f.label} id={`${pool.name}-${f.key}`} hint={f.hint}>
                <input
                  id={`${pool.name}-${f.key}`}
                  inputMode="numeric"
                  value={cap[f.key]}
                  onInput={(e) => setCap({ ...cap, [f.key]: e.currentTarget.value })}
                />
              </Field>
            ))}
          </div>
          <div class="actions">
            <button type="submit" class="primary" disabled={save.busy} data-testid="save-capacity">
              Save capacity
            </button>
            <button type="button" onClick={() => setEditing(false)}>
              Cancel
            </button>
          </div>
        </form>
      ) : (
        can("pool.update") && (
          <div class="actions">
            <button
              type="button"
              data-testid="edit-capacity"
              onClick={() => {
                setCap(Object.fromEntries(CAP_FIELDS.map((f) => [f.key, String(c[f.key] ?? 0)])));
                setEditing(true);
              }}
            >
              Edit capacity
            </button>
            {can("pool.delete") && <ConfirmButton onConfirm={() => del.run()}>Delete pool</ConfirmButton>}
          </div>
        )
      )}
      <ErrorBox error={save.error || del.error} />
    </article>
  );
}

/** Gauge draws value against its [min, max] bounds. */
function Gauge({ label, value, min, max, testid }: { label: string; value: number; min: number; max: number; testid?: string }) {
  const top = Math.max(max, value, 1);
  const pct = (n: number) => `${Math.min(100, (n / top) * 100)}%`;
  const state = value < min ? "below" : value > max ? "above" : "within";
  return (
    <div class="gauge" role="img" aria-label={`${label}: ${value}, bounds ${min} to ${max} (${state})`}>
      <div class="gauge-label">
        <span>{label}</span>
        <span class="mono">
          <span data-testid={testid}>{value}</span> <span class="hint">in [{min}, {max}]</span>
        </span>
      </div>
      <div class="gauge-track">
        <div class="gauge-band" style={{ left: pct(min), width: `calc(${pct(max)} - ${pct(min)})` }} />
        <div class={`gauge-fill ${state}`} style={{ width: pct(value) }} />
      </div>
    </div>
  );
}

function CreatePool({ onCreated }: { onCreated: (p: Pool) => void }) {
  const [name, setName] = useState("");
  const [tpl, setTpl] = useState<TemplateFields>(() => ({ ...emptyTemplate(), timeout: "" }));
  const [cap, setCap] = useState<Record<string, string>>({ bufferMin: "1", bufferMax: "2", poolMin: "0", poolMax: "5" });
  const create = useAction(async () => {
    if (!/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(name)) throw new Error("A pool name is lower-case letters, digits and dashes (up to 63).");
    const { req, problem } = buildRequest(tpl);
    if (!req) throw new Error(problem);
    const spec: Capacity = {};
    for (const f of CAP_FIELDS) {
      const n = Number(cap[f.key]);
      if (!Number.isInteger(n) || n < 0) throw new Error(`${f.label} must be a whole number, 0 or more.`);
      spec[f.key] = n;
    }
    onCreated(await pools.create({ name, template: req, capacitySpec: spec }));
  });
  return (
    <form
      class="card"
      onSubmit={(e) => {
        e.preventDefault();
        create.run();
      }}
    >
      <h2>New pool</h2>
      <Field label="Name" id="pool-name">
        <input id="pool-name" value={name} onInput={(e) => setName(e.currentTarget.value)} />
      </Field>
      <TemplateEditor f={tpl} set={setTpl} idPrefix="pool" />
      <div class="grid2 tight">
        {CAP_FIELDS.map((f) => (
          <Field key={f.key} label={f.label} id={`new-${f.key}`} hint={f.hint}>
            <input id={`new-${f.key}`} inputMode="numeric" value={cap[f.key]} onInput={(e) => setCap({ ...cap, [f.key]: e.currentTarget.value })} />
          </Field>
        ))}
      </div>
      <ErrorBox error={create.error} />
      <button type="submit" class="primary" disabled={create.busy} data-testid="create-pool">
        Create pool
      </button>
    </form>
  );
}
