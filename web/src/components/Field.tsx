import type { ComponentChildren } from "preact";

/** Field is a label above its control, with an optional hint tied to it for screen readers. */
export function Field({ label, hint, id, children }: { label: string; hint?: string; id: string; children: ComponentChildren }) {
  return (
    <div class="field">
      <label for={id}>{label}</label>
      {children}
      {hint && (
        <small id={`${id}-hint`} class="hint">
          {hint}
        </small>
      )}
    </div>
  );
}
