// Tenants and their API keys. An admin sees every tenant and creates them; a
// tenant-admin manages the keys of its own tenant.
import { useState } from "preact/hooks";
import { tenants, type Key, type Role, type Tenant } from "../api";
import { useAuth, useCan } from "../auth";
import { ConfirmButton } from "../components/ConfirmButton";
import { CopyButton } from "../components/CopyButton";
import { Field } from "../components/Field";
import { Empty, ErrorBox, Loading, Notice } from "../components/Status";
import { localTime } from "../format";
import { useAction, useAsync } from "../hooks";

const ROLES: Role[] = ["viewer", "member", "tenant-admin", "admin"];

export function Tenants() {
  const can = useCan();
  const { auth } = useAuth();
  const platform = can("tenant.list");
  const list = useAsync(async () => (platform ? (await tenants.list()).items : [{ id: auth.tenant } as Tenant]), [platform]);
  const [open, setOpen] = useState<string>(platform ? "" : auth.tenant);
  return (
    <section>
      <h1>{platform ? "Tenants and keys" : "API keys"}</h1>
      {platform && can("tenant.create") && <CreateTenant onCreated={list.reload} />}
      {list.loading && !list.data ? (
        <Loading what="tenants" />
      ) : list.error ? (
        <ErrorBox error={list.error} onRetry={list.reload} />
      ) : (list.data || []).length === 0 ? (
        <Empty>
          <p>No tenants yet.</p>
        </Empty>
      ) : (
        <ul class="plain tenants">
          {(list.data || []).map((t) => (
            <li key={t.id} class="card" data-tenant-name={t.name || t.id}>
              <div class="title-row">
                <h2>{t.name || t.id}</h2>
                <span class="hint mono">{t.id}</span>
                <button type="button" class="small" aria-expanded={open === t.id} onClick={() => setOpen(open === t.id ? "" : t.id)} data-testid="show-keys">
                  {open === t.id ? "Hide keys" : "Keys"}
                </button>
              </div>
              {t.quotas && <Quotas t={t} />}
              {open === t.id && <Keys tenant={t.id} />}
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

function Quotas({ t }: { t: Tenant }) {
  const q = t.quotas || {};
  const parts = [
    q.maxConcurrent && `${q.maxConcurrent} sandboxes at once`,
    q.maxTimeoutSeconds && `timeout ≤ ${q.maxTimeoutSeconds} s`,
    q.maxBatchSize && `batches ≤ ${q.maxBatchSize}`,
    q.allowedImages?.length && `images: ${q.allowedImages.join(", ")}`,
    q.createRate && `${q.createRate} creates/s`,
  ].filter(Boolean);
  return <p class="hint">{parts.length ? parts.join(" · ") : "No quotas."}</p>;
}

function CreateTenant({ onCreated }: { onCreated: () => void }) {
  const [name, setName] = useState("");
  const [maxConcurrent, setMaxConcurrent] = useState("");
  const [images, setImages] = useState("");
  const create = useAction(async () => {
    if (!name.trim()) throw new Error("Name the tenant.");
    const quotas: Tenant["quotas"] = {};
    if (maxConcurrent) quotas.maxConcurrent = Number(maxConcurrent);
    if (images.trim()) quotas.allowedImages = images.split(/[\s,]+/).filter(Boolean);
    await tenants.create({ name: name.trim(), quotas });
    setName("");
    onCreated();
  });
  return (
    <form
      class="card"
      onSubmit={(e) => {
        e.preventDefault();
        create.run();
      }}
    >
      <h2>New tenant</h2>
      <div class="grid2 tight">
        <Field label="Name" id="tenant-name">
          <input id="tenant-name" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </Field>
        <Field label="Sandboxes at once" id="tenant-max" hint="empty = unlimited">
          <input id="tenant-max" inputMode="numeric" value={maxConcurrent} onInput={(e) => setMaxConcurrent(e.currentTarget.value)} />
        </Field>
      </div>
      <Field label="Allowed images" id="tenant-images" hint="glob patterns, comma-separated; empty = any">
        <input id="tenant-images" value={images} onInput={(e) => setImages(e.currentTarget.value)} />
      </Field>
      <ErrorBox error={create.error} />
      <button type="submit" class="primary" disabled={create.busy} data-testid="create-tenant">
        Create tenant
      </button>
    </form>
  );
}

function Keys({ tenant }: { tenant: string }) {
  const can = useCan();
  const { auth } = useAuth();
  const keys = useAsync(() => tenants.keys(tenant), [tenant]);
  const [role, setRole] = useState<Role>("member");
  const [issued, setIssued] = useState<Key | null>(null);
  const create = useAction(async () => {
    setIssued(await tenants.createKey(tenant, role));
    keys.reload();
  });
  const revoke = useAction(async (id: string) => {
    await tenants.revokeKey(tenant, id);
    keys.reload();
  });
  const roles = ROLES.filter((r) => r !== "admin" || auth.role === "admin");
  return (
    <div>
      {can("key.create") && (
        <form
          class="inline-form"
          onSubmit={(e) => {
            e.preventDefault();
            create.run();
          }}
        >
          <Field label="Role of the new key" id={`role-${tenant}`}>
            <select id={`role-${tenant}`} value={role} onChange={(e) => setRole(e.currentTarget.value as Role)}>
              {roles.map((r) => (
                <option key={r} value={r}>
                  {r}
                </option>
              ))}
            </select>
          </Field>
          <button type="submit" disabled={create.busy} data-testid="issue-key">
            Issue key
          </button>
        </form>
      )}
      <ErrorBox error={create.error || revoke.error} />
      {issued?.key && (
        <Notice>
          New {issued.role} key — copy it now, it is not shown again: <code class="break" data-testid="new-key">{issued.key}</code> <CopyButton text={issued.key} />
        </Notice>
      )}
      {keys.loading && !keys.data ? (
        <Loading what="keys" />
      ) : keys.error ? (
        <ErrorBox error={keys.error} onRetry={keys.reload} />
      ) : (keys.data?.items || []).length === 0 ? (
        <Empty>
          <p>No keys.</p>
        </Empty>
      ) : (
        <div class="table-wrap">
          <table class="list">
            <thead>
              <tr>
                <th scope="col">Key</th>
                <th scope="col">Role</th>
                <th scope="col" class="wide">Created</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {(keys.data?.items || []).map((k) => (
                <tr key={k.id}>
                  <td class="mono">
                    {k.prefix ? `${k.prefix}…` : k.id}
                    {k.id === auth.keyId && <span class="tag">this session</span>}
                  </td>
                  <td>{k.role}</td>
                  <td class="wide">{localTime(k.createdAt)}</td>
                  <td>
                    {can("key.delete") && (
                      <ConfirmButton class="small" onConfirm={() => revoke.run(k.id)} confirmLabel="Yes, revoke">
                        Revoke
                      </ConfirmButton>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
