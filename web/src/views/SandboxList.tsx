// The sandbox list: live over server-sent events, filtered by state and metadata, with
// bulk delete and the create form.
import { useMemo, useState } from "preact/hooks";
import { sandboxes, STATES, type Sandbox } from "../api";
import { useCan } from "../auth";
import { ConfirmButton } from "../components/ConfirmButton";
import { StateBadge } from "../components/Badge";
import { Empty, ErrorBox, Loading, Notice } from "../components/Status";
import { relativeTime, shortId } from "../format";
import { useNow } from "../hooks";
import { href, navigate } from "../router";
import { useSandboxWatch } from "../watch";
import { CreateSandboxForm } from "./CreateSandboxForm";
import { ImageBuilds } from "./ImageBuilds";

export function SandboxList({ query }: { query: URLSearchParams }) {
  const can = useCan();
  const [states, setStates] = useState<string[]>(query.getAll("state"));
  const [metaText, setMetaText] = useState(query.get("metadata") || "");
  const [metadata, setMetadata] = useState(query.get("metadata") || "");
  const watch = useSandboxWatch(states, metadata);
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [showCreate, setShowCreate] = useState(false);
  const [deleting, setDeleting] = useState(false);
  const [deleteErrors, setDeleteErrors] = useState<{ id: string; error: unknown }[]>([]);
  const [notice, setNotice] = useState("");
  const now = useNow(5000);

  const rows = useMemo(() => [...watch.items.values()].sort((a, b) => b.createdAt.localeCompare(a.createdAt)), [watch.items]);
  const visibleSelected = rows.filter((r) => selected.has(r.id));
  const canDelete = can("sandbox.delete");

  const toggle = (id: string) => {
    const next = new Set(selected);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    setSelected(next);
  };
  const toggleAll = () => setSelected(visibleSelected.length === rows.length ? new Set() : new Set(rows.map((r) => r.id)));

  const bulkDelete = async () => {
    setDeleting(true);
    setDeleteErrors([]);
    const ids = visibleSelected.map((r) => r.id);
    const results = await Promise.allSettled(ids.map((id) => sandboxes.remove(id)));
    const failed = results.flatMap((r, i) => (r.status === "rejected" ? [{ id: ids[i], error: r.reason }] : []));
    setDeleteErrors(failed);
    setSelected(new Set(failed.map((f) => f.id)));
    setNotice(`${ids.length - failed.length} of ${ids.length} sandboxes deleted.`);
    setDeleting(false);
  };

  const applyFilter = (e: Event) => {
    e.preventDefault();
    setMetadata(metaText.split(/[\n,]/).map((s) => s.trim()).filter(Boolean).join("&"));
  };

  return (
    <section>
      <div class="title-row">
        <h1>Sandboxes</h1>
        <LiveIndicator phase={watch.phase} />
        {can("sandbox.create") && (
          <button type="button" class="primary" aria-expanded={showCreate} onClick={() => setShowCreate(!showCreate)} data-testid="new-sandbox">
            {showCreate ? "Close the form" : "New sandbox"}
          </button>
        )}
      </div>
      <ImageBuilds />
      {showCreate && (
        <CreateSandboxForm
          onCreated={(sb) => {
            setShowCreate(false);
            setNotice(`Sandbox ${shortId(sb.id)} is ${sb.status.state.toLowerCase()}.`);
          }}
        />
      )}
      <form class="filters" onSubmit={applyFilter} aria-label="Filter sandboxes">
        <fieldset>
          <legend>State</legend>
          <div class="chips">
            {STATES.map((s) => (
              <label key={s} class="chip">
                <input
                  type="checkbox"
                  data-state={s}
                  checked={states.includes(s)}
                  onChange={() => setStates(states.includes(s) ? states.filter((x) => x !== s) : [...states, s])}
                />
                {s}
              </label>
            ))}
          </div>
        </fieldset>
        <div class="field inline">
          <label for="meta-filter">Metadata</label>
          <input id="meta-filter" placeholder="team=ml, env=dev" value={metaText} onInput={(e) => setMetaText(e.currentTarget.value)} />
          <button type="submit">Filter</button>
          {(metadata || states.length > 0) && (
            <button
              type="button"
              data-testid="clear-filters"
              onClick={() => {
                setStates([]);
                setMetaText("");
                setMetadata("");
              }}
            >
              Clear filters
            </button>
          )}
        </div>
      </form>
      {notice && <Notice>{notice}</Notice>}
      {deleteErrors.map((f) => (
        <div key={f.id}>
          <p class="hint">Sandbox {shortId(f.id)} was not deleted:</p>
          <ErrorBox error={f.error} />
        </div>
      ))}
      {watch.phase === "failed" && <ErrorBox error={watch.error || new Error("The live list could not be opened.")} onRetry={watch.retry} />}
      {watch.phase === "connecting" && rows.length === 0 && <Loading what="sandboxes" />}
      {watch.phase !== "connecting" && watch.phase !== "failed" && rows.length === 0 && (
        <Empty>
          {metadata || states.length ? (
            <p>No sandbox matches these filters.</p>
          ) : (
            <p>No sandboxes yet.{can("sandbox.create") ? " Create one with “New sandbox”." : ""}</p>
          )}
        </Empty>
      )}
      {rows.length > 0 && (
        <>
          {canDelete && (
            <div class="bulk" aria-live="polite">
              <span>{visibleSelected.length} selected</span>
              <ConfirmButton
                disabled={visibleSelected.length === 0 || deleting}
                onConfirm={bulkDelete}
                testid="bulk-delete"
                confirmLabel={`Yes, delete ${visibleSelected.length}`}
              >
                {deleting ? "Deleting…" : `Delete selected`}
              </ConfirmButton>
            </div>
          )}
          <div class="table-wrap">
            <table class="list" data-testid="sandbox-table">
              <thead>
                <tr>
                  {canDelete && (
                    <th scope="col" class="check">
                      <input type="checkbox" aria-label="Select all" checked={visibleSelected.length === rows.length} onChange={toggleAll} />
                    </th>
                  )}
                  <th scope="col">Sandbox</th>
                  <th scope="col">State</th>
                  <th scope="col" class="wide">Image</th>
                  <th scope="col" class="wide">Metadata</th>
                  <th scope="col">Created</th>
                  <th scope="col">Expires</th>
                </tr>
              </thead>
              <tbody>
                {rows.map((sb) => (
                  <Row key={sb.id} sb={sb} now={now} canDelete={canDelete} checked={selected.has(sb.id)} onToggle={() => toggle(sb.id)} />
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
    </section>
  );
}

function Row({ sb, now, canDelete, checked, onToggle }: { sb: Sandbox; now: number; canDelete: boolean; checked: boolean; onToggle: () => void }) {
  return (
    <tr data-id={sb.id} class="sandbox-row">
      {canDelete && (
        <td class="check">
          <input type="checkbox" aria-label={`Select sandbox ${sb.id}`} checked={checked} onChange={onToggle} />
        </td>
      )}
      <td>
        <a href={href("sandboxes", sb.id)} class="mono" title={sb.id}>
          {shortId(sb.id)}
        </a>
      </td>
      <td>
        <StateBadge status={sb.status} />
      </td>
      <td class="wide mono">{sb.image?.uri || "—"}</td>
      <td class="wide">
        {Object.entries(sb.metadata || {}).map(([k, v]) => (
          <button type="button" class="tag" key={k} title="Filter by this" onClick={() => navigate(`#/sandboxes?metadata=${encodeURIComponent(`${k}=${v}`)}`)}>
            {k}={v}
          </button>
        ))}
      </td>
      <td title={sb.createdAt}>{relativeTime(sb.createdAt, now)}</td>
      <td title={sb.expiresAt}>{sb.expiresAt ? relativeTime(sb.expiresAt, now) : "never"}</td>
    </tr>
  );
}

export function LiveIndicator({ phase }: { phase: string }) {
  const words: Record<string, string> = { connecting: "connecting…", live: "live", reconnecting: "reconnecting…", failed: "not live" };
  return (
    <span class={`live live-${phase}`} role="status" data-testid="live">
      {words[phase] || phase}
    </span>
  );
}
