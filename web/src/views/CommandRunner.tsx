// The command runner: one command at a time, its output streamed line by line from the
// agent's /command event stream.
import { useEffect, useRef, useState } from "preact/hooks";
import { agent, type AgentEvent } from "../api";
import { Field } from "../components/Field";
import { ErrorBox } from "../components/Status";

interface Line {
  kind: "stdout" | "stderr" | "info" | "error";
  text: string;
}

export function CommandRunner({ id }: { id: string }) {
  const client = agent(id);
  const [command, setCommand] = useState("");
  const [cwd, setCwd] = useState("");
  const [lines, setLines] = useState<Line[]>([]);
  const [running, setRunning] = useState(false);
  const [result, setResult] = useState("");
  const [error, setError] = useState<unknown>();
  const commandId = useRef("");
  const ctrl = useRef<AbortController | null>(null);
  const out = useRef<HTMLPreElement>(null);

  useEffect(() => () => ctrl.current?.abort(), []);
  useEffect(() => {
    if (out.current) out.current.scrollTop = out.current.scrollHeight;
  }, [lines]);

  const run = async (e: Event) => {
    e.preventDefault();
    if (!command.trim() || running) return;
    setLines([]);
    setResult("");
    setError(undefined);
    setRunning(true);
    commandId.current = "";
    const abort = new AbortController();
    ctrl.current = abort;
    const started = performance.now();
    let buffered: Line[] = [];
    let scheduled = false;
    // Lines arrive faster than a screen refreshes; draw them once a frame.
    const push = (l: Line) => {
      buffered.push(l);
      if (!scheduled) {
        scheduled = true;
        requestAnimationFrame(() => {
          scheduled = false;
          const add = buffered;
          buffered = [];
          setLines((prev) => (prev.length + add.length > 5000 ? [...prev, ...add].slice(-5000) : [...prev, ...add]));
        });
      }
    };
    let ended = "";
    try {
      await client.run(
        command,
        cwd.trim(),
        (ev: AgentEvent) => {
          switch (ev.type) {
            case "init":
              commandId.current = ev.text || "";
              break;
            case "stdout":
            case "stderr":
              push({ kind: ev.type, text: ev.text ?? "" });
              break;
            case "execution_complete":
              ended = "Exit status 0";
              break;
            case "error":
              ended = ev.error?.ename === "CommandExecError" ? `Exit status ${ev.error.evalue}` : `${ev.error?.ename}: ${ev.error?.evalue}`;
              break;
          }
        },
        abort.signal,
      );
      const secs = ((performance.now() - started) / 1000).toFixed(2);
      setResult(ended ? `${ended} · ${secs} s` : `The stream ended without a result · ${secs} s`);
    } catch (err) {
      if ((err as Error).name === "AbortError") setResult("Stopped.");
      else setError(err);
    } finally {
      setRunning(false);
      ctrl.current = null;
    }
  };

  const stop = async () => {
    if (commandId.current) await client.interrupt(commandId.current).catch(setError);
    else ctrl.current?.abort();
  };

  return (
    <div class="card">
      <form class="command-form" onSubmit={run}>
        <Field label="Command" id="cmd-input" hint="Runs with sh -c in the sandbox; output streams as it comes.">
          <input id="cmd-input" class="mono" value={command} onInput={(e) => setCommand(e.currentTarget.value)} placeholder="ls -la /" autoComplete="off" />
        </Field>
        <Field label="Working directory" id="cmd-cwd">
          <input id="cmd-cwd" class="mono" value={cwd} onInput={(e) => setCwd(e.currentTarget.value)} placeholder="(the sandbox's default)" />
        </Field>
        <div class="actions">
          <button type="submit" class="primary" disabled={running || !command.trim()} data-testid="run-command">
            {running ? "Running…" : "Run"}
          </button>
          {running && (
            <button type="button" onClick={stop}>
              Stop
            </button>
          )}
        </div>
      </form>
      <ErrorBox error={error} />
      <pre class="output" ref={out} data-testid="command-output" aria-live="polite" tabIndex={0} aria-label="Command output">
        {lines.length === 0 && !running && !result ? <span class="hint">Output appears here.</span> : null}
        {lines.map((l, i) => (
          <span key={i} class={l.kind}>
            {l.text + "\n"}
          </span>
        ))}
      </pre>
      {result && (
        <p class={result.startsWith("Exit status 0") ? "ok" : "warn"} data-testid="command-result">
          {result}
        </p>
      )}
    </div>
  );
}
