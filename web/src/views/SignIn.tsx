import { useState } from "preact/hooks";
import { session, type Session } from "../api";
import { ErrorBox, Notice } from "../components/Status";

/** SignIn exchanges an API key for a session cookie; the key itself is not kept. */
export function SignIn({ reason, onSignedIn }: { reason?: string; onSignedIn: (s: Session) => Promise<void> }) {
  const [key, setKey] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>();
  const submit = async (e: Event) => {
    e.preventDefault();
    if (!key.trim()) {
      setError(new Error("Enter an API key."));
      return;
    }
    setBusy(true);
    setError(undefined);
    try {
      const s = await session.signIn(key.trim());
      setKey("");
      await onSignedIn(s);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="center signin">
      <h1>sandgate console</h1>
      {reason && <Notice>{reason}</Notice>}
      <form onSubmit={submit} class="card" aria-describedby="signin-help">
        <div class="field">
          <label for="api-key">API key</label>
          <input id="api-key" name="api-key" type="password" autoComplete="off" value={key} onInput={(e) => setKey(e.currentTarget.value)} autoFocus />
        </div>
        <p id="signin-help" class="hint">
          The key is exchanged for a session cookie; the console does not store it. <code>make run</code> prints one.
        </p>
        <ErrorBox error={error} />
        <button type="submit" class="primary" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </main>
  );
}
