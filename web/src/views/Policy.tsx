// Policy authors' page: the Rego in force, an editor with validate and apply, a
// playground (input JSON → decision, with OPA's explanation) and the Rego tests.
import { useMemo, useState } from "preact/hooks";
import { policy, type PolicyProblem, type PolicyTestResult } from "../api";
import { useCan } from "../auth";
import { Field } from "../components/Field";
import { Empty, ErrorBox, Loading, Notice } from "../components/Status";
import { useAction, useAsync } from "../hooks";

const DECISIONS = ["access", "admission", "egress"];

const SAMPLE_INPUTS: Record<string, unknown> = {
  access: { principal: { kind: "api_key", role: "member", tenant: "default" }, action: "sandbox.create", resource: { kind: "sandbox", tenant: "default" } },
  admission: { tenant: { id: "default", quotas: {} }, usage: { sandboxes: 0 }, request: { image: "sandgate/base:0.1.0", count: 1 } },
  egress: { tenant: { id: "default" }, request: { defaultAction: "deny", egress: [{ action: "allow", target: "example.com" }] } },
};

const NEW_MODULE = `package sandgate.admission

# Refuse an image by name.
deny contains {"code": "ADMISSION::IMAGE_NOT_ALLOWED", "message": msg} if {
\tstartswith(input.request.image, "forbidden/")
\tmsg := sprintf("image %s is not allowed here", [input.request.image])
}
`;

export function Policy() {
  const can = useCan();
  const doc = useAsync(() => policy.get(), []);
  // Edited sources by module name; only these are sent as changes.
  const [edits, setEdits] = useState<Record<string, string>>({});
  const [selected, setSelected] = useState("");
  const [problems, setProblems] = useState<PolicyProblem[] | null>(null);
  const [notice, setNotice] = useState("");
  const [newName, setNewName] = useState("");

  const modules = useMemo(() => {
    const list = (doc.data?.modules || []).map((m) => ({ ...m }));
    for (const name of Object.keys(edits)) if (!list.some((m) => m.name === name)) list.push({ name, source: edits[name], package: "" });
    return list;
  }, [doc.data, edits]);
  const current = modules.find((m) => m.name === selected) || modules[0];
  const changes = Object.keys(edits).length ? edits : undefined;

  const validate = useAction(async () => {
    const r = await policy.validate(edits);
    setProblems(r.errors || []);
    setNotice(r.ok ? "The changes compile." : "");
  });
  const apply = useAction(async () => {
    await policy.apply(edits);
    setEdits({});
    setProblems(null);
    setNotice("The changes are in force on every gateway.");
    doc.reload();
  });

  if (doc.loading && !doc.data) return <Loading what="the policy" />;
  if (doc.error && !doc.data) return <ErrorBox error={doc.error} onRetry={doc.reload} />;

  const editable = can("policy.write");
  const source = current ? (edits[current.name] ?? current.source) : "";
  return (
    <section>
      <div class="title-row">
        <h1>Policy</h1>
        {doc.data?.version && <span class="hint mono">version {doc.data.version.slice(0, 12)}</span>}
      </div>
      {notice && <Notice>{notice}</Notice>}
      <div class="policy-layout">
        <nav class="modules" aria-label="Rego modules">
          <ul class="plain">
            {modules.map((m) => (
              <li key={m.name}>
                <button type="button" class="linkish" aria-current={current?.name === m.name ? "true" : undefined} onClick={() => setSelected(m.name)}>
                  {m.name}
                  {m.name in edits && " •"}
                </button>
                {m.package && <div class="hint mono">{m.package}</div>}
              </li>
            ))}
          </ul>
          {editable && (
            <form
              class="stack"
              onSubmit={(e) => {
                e.preventDefault();
                const n = newName.trim().endsWith(".rego") ? newName.trim() : `${newName.trim()}.rego`;
                if (!newName.trim() || modules.some((m) => m.name === n)) return;
                setEdits({ ...edits, [n]: NEW_MODULE });
                setSelected(n);
                setNewName("");
              }}
            >
              <Field label="New module" id="new-module">
                <input id="new-module" placeholder="my_rules.rego" value={newName} onInput={(e) => setNewName(e.currentTarget.value)} />
              </Field>
              <button type="submit" class="small">
                Add module
              </button>
            </form>
          )}
        </nav>
        <div class="editor-pane">
          {!current ? (
            <Empty>
              <p>No modules.</p>
            </Empty>
          ) : (
            <>
              <Field label={`${current.name}${editable ? "" : " (read-only: your role may not change the policy)"}`} id="rego-source">
                <textarea
                  id="rego-source"
                  class="mono code"
                  rows={24}
                  spellcheck={false}
                  readOnly={!editable}
                  value={source}
                  onInput={(e) => setEdits({ ...edits, [current.name]: e.currentTarget.value })}
                  data-testid="rego-source"
                />
              </Field>
              {problems && problems.length > 0 && (
                <div class="error" role="alert" data-testid="policy-problems">
                  <p>
                    <strong>The policy does not compile:</strong>
                  </p>
                  <ul>
                    {problems.map((p, i) => (
                      <li key={i}>
                        <button type="button" class="linkish" onClick={() => p.module && setSelected(p.module)}>
                          {p.module}:{p.row}:{p.col}
                        </button>{" "}
                        {p.message}
                      </li>
                    ))}
                  </ul>
                </div>
              )}
              <ErrorBox error={validate.error || apply.error} />
              {editable && (
                <div class="actions">
                  <button type="button" onClick={() => validate.run()} disabled={!changes || validate.busy} data-testid="policy-validate">
                    {validate.busy ? "Validating…" : "Validate"}
                  </button>
                  <button type="button" class="primary" onClick={() => apply.run()} disabled={!changes || apply.busy} data-testid="policy-apply">
                    {apply.busy ? "Applying…" : "Apply"}
                  </button>
                  <button
                    type="button"
                    disabled={!changes}
                    onClick={() => {
                      setEdits({});
                      setProblems(null);
                    }}
                  >
                    Discard changes
                  </button>
                  {changes && <span class="hint">{Object.keys(edits).length} module(s) changed, not applied.</span>}
                </div>
              )}
            </>
          )}
        </div>
      </div>
      <Playground changes={changes} />
      <Tests changes={changes} />
    </section>
  );
}

function Playground({ changes }: { changes?: Record<string, string> }) {
  const [decision, setDecision] = useState("admission");
  const [input, setInput] = useState(JSON.stringify(SAMPLE_INPUTS.admission, null, 2));
  const [answer, setAnswer] = useState<{ result: unknown; explanation?: string[]; defined?: boolean; error?: string } | null>(null);
  const evaluate = useAction(async () => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(input);
    } catch (e) {
      throw new Error(`The input is not valid JSON: ${(e as Error).message}`);
    }
    setAnswer(await policy.evaluate(decision, parsed, changes));
  });
  return (
    <div class="card">
      <h2>Playground</h2>
      <p class="hint">Evaluates the policy in force{changes ? " with your unapplied changes" : ""} on this input.</p>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          evaluate.run();
        }}
      >
        <div class="grid2">
          <div>
            <Field label="Decision" id="pg-decision" hint="access, admission, egress, or a query such as data.sandgate.admission.deny">
              <input id="pg-decision" list="pg-decisions" value={decision} onInput={(e) => setDecision(e.currentTarget.value)} />
              <datalist id="pg-decisions">
                {DECISIONS.map((d) => (
                  <option key={d} value={d} />
                ))}
              </datalist>
            </Field>
            <button type="button" class="small" onClick={() => setInput(JSON.stringify(SAMPLE_INPUTS[decision] ?? {}, null, 2))}>
              Sample input for {DECISIONS.includes(decision) ? decision : "this decision"}
            </button>
            <Field label="Input (JSON)" id="pg-input">
              <textarea id="pg-input" class="mono" rows={12} spellcheck={false} value={input} onInput={(e) => setInput(e.currentTarget.value)} />
            </Field>
            <button type="submit" class="primary" disabled={evaluate.busy} data-testid="pg-evaluate">
              {evaluate.busy ? "Evaluating…" : "Evaluate"}
            </button>
          </div>
          <div>
            <ErrorBox error={evaluate.error} />
            {answer ? (
              <>
                <h3>Result</h3>
                {answer.error && <p class="warn">{answer.error}</p>}
                <pre class="mono output" data-testid="pg-result">
                  {answer.defined === false ? "undefined" : JSON.stringify(answer.result, null, 2)}
                </pre>
                <details open>
                  <summary>Explanation</summary>
                  <pre class="mono output small" data-testid="pg-explanation">
                    {(answer.explanation || []).join("\n") || "(none)"}
                  </pre>
                </details>
              </>
            ) : (
              <p class="hint">The decision and OPA's explanation appear here.</p>
            )}
          </div>
        </div>
      </form>
    </div>
  );
}

function Tests({ changes }: { changes?: Record<string, string> }) {
  const [report, setReport] = useState<{ results: PolicyTestResult[]; pass: number; fail: number } | null>(null);
  const [failedOnly, setFailedOnly] = useState(true);
  const run = useAction(async () => setReport(await policy.test(changes)));
  const rows = (report?.results || []).filter((r) => !failedOnly || !r.pass);
  return (
    <div class="card">
      <div class="title-row">
        <h2>Rego tests</h2>
        <button type="button" onClick={() => run.run()} disabled={run.busy} data-testid="run-tests">
          {run.busy ? "Running…" : `Run tests${changes ? " with changes" : ""}`}
        </button>
        {report && (
          <label class="chip">
            <input type="checkbox" checked={failedOnly} onChange={() => setFailedOnly(!failedOnly)} /> Failures only ({report.fail})
          </label>
        )}
      </div>
      <ErrorBox error={run.error} />
      {report && (
        <>
          <p class={report.fail ? "warn" : "ok"} data-testid="test-summary">
            {report.pass} passed, {report.fail} failed.
          </p>
          {rows.length > 0 && (
          <div class="table-wrap">
            <table class="list">
              <thead>
                <tr>
                  <th scope="col">Test</th>
                  <th scope="col">Result</th>
                  <th scope="col" class="wide">Time</th>
                </tr>
              </thead>
              <tbody>
                {rows.map((r, i) => (
                  <tr key={i}>
                    <td class="mono">
                      {r.package ? `${r.package}.` : ""}
                      {r.name}
                    </td>
                    <td>{r.pass ? <span class="ok">pass</span> : <span class="warn">fail{r.error ? `: ${r.error}` : ""}</span>}</td>
                    <td class="wide">{r.durationMs !== undefined ? `${r.durationMs.toFixed(1)} ms` : "—"}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          )}
        </>
      )}
    </div>
  );
}
