// Plugins: the tenant's WASM modules, their hooks, how their calls go; upload and delete.
import { useState } from "preact/hooks";
import { plugins, type Plugin } from "../api";
import { useCan } from "../auth";
import { ConfirmButton } from "../components/ConfirmButton";
import { Field } from "../components/Field";
import { Empty, ErrorBox, Loading, Notice } from "../components/Status";
import { bytes, localTime } from "../format";
import { useAction, useAsync } from "../hooks";

const HOOKS = ["on_event", "decide_ttl"];

export function Plugins() {
  const can = useCan();
  const list = useAsync(() => plugins.list(), []);
  const [notice, setNotice] = useState("");
  const del = useAction(async (name: string) => {
    await plugins.remove(name);
    setNotice(`Plugin ${name} removed.`);
    list.reload();
  });
  const items = list.data?.items || [];
  return (
    <section>
      <div class="title-row">
        <h1>Plugins</h1>
        <button type="button" class="small" onClick={list.reload}>
          Refresh
        </button>
      </div>
      {can("plugin.update") && (
        <Upload
          onDone={(p) => {
            setNotice(`Plugin ${p.name} ${p.loaded ? "is loaded" : "was stored but did not load here"}.`);
            list.reload();
          }}
        />
      )}
      {notice && <Notice>{notice}</Notice>}
      <ErrorBox error={del.error} />
      {list.loading && !list.data ? (
        <Loading what="plugins" />
      ) : list.error ? (
        <ErrorBox error={list.error} onRetry={list.reload} />
      ) : items.length === 0 ? (
        <Empty>
          <p>No plugins. A plugin is a WebAssembly module that sees events and can decide expiry extensions (plugins/ABI.md).</p>
        </Empty>
      ) : (
        <div class="table-wrap">
          <table class="list">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Hooks</th>
                <th scope="col">Loaded</th>
                <th scope="col">Calls</th>
                <th scope="col">Errors</th>
                <th scope="col" class="wide">Latency p50 / p99</th>
                <th scope="col" class="wide">Updated</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {items.map((p) => (
                <PluginRow key={p.name} p={p} canDelete={can("plugin.delete")} onDelete={() => del.run(p.name)} />
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

function PluginRow({ p, canDelete, onDelete }: { p: Plugin; canDelete: boolean; onDelete: () => void }) {
  const s = p.stats || {};
  const errs = (s.errors || 0) + (s.timeouts || 0);
  return (
    <>
      <tr data-plugin={p.name}>
        <td>
          <strong>{p.name}</strong>
          <div class="hint mono" title={p.hash}>
            v{p.version} · {p.hash.slice(0, 12)}
          </div>
        </td>
        <td>{p.hooks.join(", ")}</td>
        <td data-testid="loaded">{p.loaded ? "yes" : <span class="warn">no</span>}</td>
        <td>{s.invocations ?? 0}</td>
        <td>
          {errs}
          {(s.timeouts || 0) > 0 && <span class="hint"> ({s.timeouts} timeouts)</span>}
          {(s.drops || 0) > 0 && <span class="hint"> · {s.drops} dropped</span>}
        </td>
        <td class="wide">
          {s.p50Ms !== undefined ? `${s.p50Ms.toFixed(2)} / ${(s.p99Ms ?? 0).toFixed(2)} ms` : "—"}
        </td>
        <td class="wide">{localTime(p.updatedAt)}</td>
        <td>{canDelete && <ConfirmButton class="small" onConfirm={onDelete}>Delete</ConfirmButton>}</td>
      </tr>
      {(p.loadError || s.lastError) && (
        <tr class="sub">
          <td colSpan={8}>
            {p.loadError && <p class="warn">Did not load: {p.loadError}</p>}
            {s.lastError && (
              <p class="warn">
                Last error ({localTime(s.lastErrorAt)}): {s.lastError}
              </p>
            )}
          </td>
        </tr>
      )}
    </>
  );
}

function Upload({ onDone }: { onDone: (p: Plugin) => void }) {
  const [name, setName] = useState("");
  const [file, setFile] = useState<File | null>(null);
  const [hooks, setHooks] = useState<string[]>(["on_event"]);
  const [timeoutMs, setTimeoutMs] = useState("");
  const [memory, setMemory] = useState("");
  const [settings, setSettings] = useState("{}");
  const [dragging, setDragging] = useState(false);
  const up = useAction(async () => {
    if (!name.trim()) throw new Error("Name the plugin.");
    if (!file) throw new Error("Choose the plugin's .wasm file.");
    if (!hooks.length) throw new Error("Choose at least one hook.");
    let parsed: unknown;
    try {
      parsed = JSON.parse(settings || "{}");
    } catch (e) {
      throw new Error(`The settings are not valid JSON: ${(e as Error).message}`);
    }
    const limits: Record<string, number> = {};
    if (timeoutMs) limits.timeoutMs = Number(timeoutMs);
    if (memory) limits.memoryMiB = Number(memory);
    const p = await plugins.upload(name.trim(), file, { hooks, limits: Object.keys(limits).length ? limits : undefined, settings: parsed });
    setFile(null);
    onDone(p);
  });
  return (
    <form
      class={`card ${dragging ? "over" : ""}`}
      onSubmit={(e) => {
        e.preventDefault();
        up.run();
      }}
      onDragOver={(e) => {
        e.preventDefault();
        setDragging(true);
      }}
      onDragLeave={() => setDragging(false)}
      onDrop={(e) => {
        e.preventDefault();
        setDragging(false);
        const f = e.dataTransfer?.files[0];
        if (f) {
          setFile(f);
          if (!name) setName(f.name.replace(/\.wasm$/, "").toLowerCase().replace(/[^a-z0-9-]/g, "-"));
        }
      }}
    >
      <h2>Upload a plugin</h2>
      <div class="grid2 tight">
        <Field label="Name" id="plugin-name" hint="Uploading under an existing name replaces it.">
          <input id="plugin-name" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </Field>
        <Field label="Module (.wasm)" id="plugin-file" hint={file ? `${file.name}, ${bytes(file.size)}` : "or drop it on this form"}>
          <input
            id="plugin-file"
            type="file"
            accept=".wasm,application/wasm"
            onChange={(e) => {
              const f = e.currentTarget.files?.[0] || null;
              setFile(f);
              if (f && !name) setName(f.name.replace(/\.wasm$/, "").toLowerCase().replace(/[^a-z0-9-]/g, "-"));
            }}
          />
        </Field>
      </div>
      <fieldset>
        <legend>Hooks</legend>
        {HOOKS.map((h) => (
          <label key={h} class="chip">
            <input type="checkbox" checked={hooks.includes(h)} onChange={() => setHooks(hooks.includes(h) ? hooks.filter((x) => x !== h) : [...hooks, h])} />
            {h}
          </label>
        ))}
      </fieldset>
      <div class="grid2 tight">
        <Field label="Timeout per call (ms)" id="plugin-timeout" hint="at most 5000; empty = default">
          <input id="plugin-timeout" inputMode="numeric" value={timeoutMs} onInput={(e) => setTimeoutMs(e.currentTarget.value)} />
        </Field>
        <Field label="Memory (MiB)" id="plugin-memory" hint="empty = default">
          <input id="plugin-memory" inputMode="numeric" value={memory} onInput={(e) => setMemory(e.currentTarget.value)} />
        </Field>
      </div>
      <Field label="Settings (JSON)" id="plugin-settings">
        <textarea id="plugin-settings" class="mono" rows={3} value={settings} onInput={(e) => setSettings(e.currentTarget.value)} />
      </Field>
      <ErrorBox error={up.error} />
      <button type="submit" class="primary" disabled={up.busy} data-testid="plugin-upload">
        {up.busy ? "Uploading…" : "Upload"}
      </button>
    </form>
  );
}
