import { useState } from "preact/hooks";
import { sandboxes, type CreateSandboxRequest, type Sandbox } from "../api";
import { Field } from "../components/Field";
import { ErrorBox } from "../components/Status";
import { parsePairs, splitCommand } from "../format";

declare const __SANDGATE_VERSION__: string;
export const DEFAULT_IMAGE = `sandgate/base:${__SANDGATE_VERSION__}`;

export interface TemplateFields {
  image: string;
  entrypoint: string;
  env: string;
  metadata: string;
  timeout: string;
  cpu: string;
  memory: string;
}

export const emptyTemplate = (): TemplateFields => ({
  image: DEFAULT_IMAGE,
  entrypoint: "tail -f /dev/null",
  env: "",
  metadata: "",
  timeout: "3600",
  cpu: "",
  memory: "",
});

/** buildRequest checks the form and builds the API request, or says what is wrong. */
export function buildRequest(f: TemplateFields): { req?: CreateSandboxRequest; problem?: string } {
  if (!f.image.trim()) return { problem: "Enter an image, for example " + DEFAULT_IMAGE + "." };
  const entrypoint = splitCommand(f.entrypoint);
  if (entrypoint.length === 0) return { problem: "Enter an entrypoint, for example tail -f /dev/null." };
  const env = parsePairs(f.env);
  if (env.bad.length) return { problem: `Environment lines need NAME=value: ${env.bad.join(", ")}` };
  const meta = parsePairs(f.metadata);
  if (meta.bad.length) return { problem: `Metadata lines need key=value: ${meta.bad.join(", ")}` };
  const req: CreateSandboxRequest = { image: { uri: f.image.trim() }, entrypoint };
  if (f.timeout.trim()) {
    const t = Number(f.timeout);
    if (!Number.isInteger(t) || t < 60) return { problem: "The timeout is a whole number of seconds, at least 60 (leave it empty for no expiry)." };
    req.timeout = t;
  }
  if (Object.keys(env.pairs).length) req.env = env.pairs;
  if (Object.keys(meta.pairs).length) req.metadata = meta.pairs;
  const limits: Record<string, string> = {};
  if (f.cpu.trim()) limits.cpu = f.cpu.trim();
  if (f.memory.trim()) limits.memory = f.memory.trim();
  if (Object.keys(limits).length) req.resourceLimits = limits;
  return { req };
}

export function TemplateEditor({ f, set, idPrefix }: { f: TemplateFields; set: (f: TemplateFields) => void; idPrefix: string }) {
  const id = (s: string) => `${idPrefix}-${s}`;
  const bind = (k: keyof TemplateFields) => ({
    id: id(k),
    value: f[k],
    onInput: (e: Event) => set({ ...f, [k]: (e.currentTarget as HTMLInputElement).value }),
  });
  return (
    <div class="grid2">
      <Field label="Image" id={id("image")}>
        <input {...bind("image")} required />
      </Field>
      <Field label="Entrypoint" id={id("entrypoint")} hint="The command the sandbox runs; quotes group words.">
        <input {...bind("entrypoint")} class="mono" />
      </Field>
      <Field label="Environment" id={id("env")} hint="NAME=value, one per line.">
        <textarea {...bind("env")} rows={3} class="mono" />
      </Field>
      <Field label="Metadata" id={id("metadata")} hint="key=value, one per line.">
        <textarea {...bind("metadata")} rows={3} class="mono" />
      </Field>
      <Field label="Timeout (seconds)" id={id("timeout")} hint="At least 60; empty = no expiry.">
        <input {...bind("timeout")} inputMode="numeric" />
      </Field>
      <div class="grid2 tight">
        <Field label="CPU" id={id("cpu")} hint="e.g. 500m or 1">
          <input {...bind("cpu")} />
        </Field>
        <Field label="Memory" id={id("memory")} hint="e.g. 512Mi">
          <input {...bind("memory")} />
        </Field>
      </div>
    </div>
  );
}

export function CreateSandboxForm({ onCreated }: { onCreated: (sb: Sandbox) => void }) {
  const [f, setF] = useState<TemplateFields>(emptyTemplate);
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    const { req, problem } = buildRequest(f);
    if (!req) {
      setError(new Error(problem));
      return;
    }
    setBusy(true);
    setError(undefined);
    try {
      onCreated(await sandboxes.create(req));
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="card" onSubmit={submit} aria-label="Create a sandbox" data-testid="create-form">
      <h2>New sandbox</h2>
      <TemplateEditor f={f} set={setF} idPrefix="create" />
      <div data-testid="create-error">
        <ErrorBox error={error} />
      </div>
      <button type="submit" class="primary" disabled={busy} data-testid="create-submit">
        {busy ? "Creating… (the gateway answers when the sandbox runs)" : "Create"}
      </button>
    </form>
  );
}
