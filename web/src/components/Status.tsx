// Loading, empty and error states: every view shows one of these instead of nothing.
import type { ComponentChildren } from "preact";
import { describeError, errorCode } from "../api";

export function Loading({ what }: { what: string }) {
  return (
    <p class="loading" role="status" aria-live="polite">
      <span class="spinner" aria-hidden="true" /> Loading {what}…
    </p>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <div class="empty">{children}</div>;
}

export function ErrorBox({ error, onRetry }: { error: unknown; onRetry?: () => void }) {
  if (!error) return null;
  const code = errorCode(error);
  return (
    <div class="error" role="alert">
      <p>
        <strong>{describeError(error)}</strong>
      </p>
      {code && <p class="code">Error code: {code}</p>}
      {onRetry && (
        <button type="button" onClick={onRetry}>
          Try again
        </button>
      )}
    </div>
  );
}

export function Notice({ children }: { children: ComponentChildren }) {
  return (
    <p class="notice" role="status">
      {children}
    </p>
  );
}
