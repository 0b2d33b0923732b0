// The sandbox's egress policy: read from the enforcer, replaced through the gateway
// (which checks the change against the Rego egress policy first).
import { useState } from "preact/hooks";
import { egress, type EgressPolicy, type EgressRule } from "../api";
import { useCan } from "../auth";
import { Field } from "../components/Field";
import { ErrorBox, Loading, Notice } from "../components/Status";
import { useAction, useAsync } from "../hooks";

export function EgressEditor({ id }: { id: string }) {
  const can = useCan();
  const api = egress(id);
  const current = useAsync(() => api.get(), [id]);
  const [draft, setDraft] = useState<EgressPolicy | null>(null);
  const [notice, setNotice] = useState("");
  const save = useAction(async (p: EgressPolicy) => {
    await api.replace(p);
    setDraft(null);
    setNotice("The egress policy is in force.");
    current.reload();
  });
  if (current.loading && !current.data) return <Loading what="the egress policy" />;
  if (current.error) return <ErrorBox error={current.error} onRetry={current.reload} />;
  // The platform's own deny rules come first in what the enforcer reports; they are
  // always applied, so they are shown apart and never sent back.
  const platform = current.data?.platformDeny || [];
  const reported = current.data?.policy || { defaultAction: "deny", egress: [] };
  const policy: EgressPolicy = {
    ...reported,
    egress: (reported.egress || []).filter((r) => !(r.action === "deny" && platform.includes(r.target))),
  };
  const editing = draft !== null;
  const p = draft || policy;
  const rules = p.egress || [];
  const setRule = (i: number, r: EgressRule) => setDraft({ ...p, egress: rules.map((x, j) => (j === i ? r : x)) });
  return (
    <div class="card">
      <h2>Egress policy</h2>
      <p data-testid="egress-mode">
        Mode: <strong>{current.data?.mode || "unknown"}</strong>
        {current.data?.enforcementMode && <> · enforcement {current.data.enforcementMode}</>}
      </p>
      {notice && <Notice>{notice}</Notice>}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          save.run(p);
        }}
      >
        <Field label="When no rule matches" id="egress-default">
          <select
            id="egress-default"
            disabled={!editing}
            value={p.defaultAction || "deny"}
            onChange={(e) => setDraft({ ...p, defaultAction: e.currentTarget.value as "allow" | "deny" })}
          >
            <option value="allow">allow</option>
            <option value="deny">deny</option>
          </select>
        </Field>
        <p class="hint">Rules apply in order; the first that matches wins. Targets: a name (example.com), a wildcard (*.example.com), an IP or a CIDR.</p>
        {platform.length > 0 && (
          <p class="hint" data-testid="platform-deny">
            Always denied by the platform: <span class="mono">{platform.join(", ")}</span>
          </p>
        )}
        {rules.length === 0 && <p class="hint">No rules of this sandbox.</p>}
        <ol class="rules">
          {rules.map((r, i) => (
            <li key={i}>
              <label class="sr-only" for={`rule-action-${i}`}>
                Action of rule {i + 1}
              </label>
              <select id={`rule-action-${i}`} disabled={!editing} value={r.action} onChange={(e) => setRule(i, { ...r, action: e.currentTarget.value as "allow" | "deny" })}>
                <option value="allow">allow</option>
                <option value="deny">deny</option>
              </select>
              <label class="sr-only" for={`rule-target-${i}`}>
                Target of rule {i + 1}
              </label>
              <input id={`rule-target-${i}`} class="mono" readOnly={!editing} value={r.target} onInput={(e) => setRule(i, { ...r, target: e.currentTarget.value })} />
              {editing && (
                <button type="button" class="small" onClick={() => setDraft({ ...p, egress: rules.filter((_, j) => j !== i) })}>
                  Remove
                </button>
              )}
            </li>
          ))}
        </ol>
        <ErrorBox error={save.error} />
        {can("sandbox.proxy") && (
          <div class="actions">
            {!editing && (
              <button type="button" onClick={() => setDraft(structuredClone(policy))} data-testid="egress-edit">
                Edit
              </button>
            )}
            {editing && (
              <>
                <button type="button" onClick={() => setDraft({ ...p, egress: [...rules, { action: "allow", target: "" }] })} data-testid="egress-add">
                  Add rule
                </button>
                <button type="submit" class="primary" disabled={save.busy} data-testid="egress-apply">
                  {save.busy ? "Applying…" : "Apply"}
                </button>
                <button type="button" onClick={() => setDraft(null)}>
                  Cancel
                </button>
              </>
            )}
          </div>
        )}
      </form>
    </div>
  );
}
