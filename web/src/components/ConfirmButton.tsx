import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";

/** ConfirmButton asks twice before a destructive action, without a blocking dialog. */
export function ConfirmButton(props: {
  onConfirm: () => void;
  children: ComponentChildren;
  confirmLabel?: string;
  disabled?: boolean;
  class?: string;
  testid?: string;
}) {
  const [armed, setArmed] = useState(false);
  if (!armed)
    return (
      <button type="button" class={`danger ${props.class || ""}`} disabled={props.disabled} data-testid={props.testid} onClick={() => setArmed(true)}>
        {props.children}
      </button>
    );
  return (
    <span class="confirm">
      <button
        type="button"
        class="danger"
        data-testid={props.testid ? props.testid + "-confirm" : undefined}
        onClick={() => {
          setArmed(false);
          props.onConfirm();
        }}
        ref={(el) => el?.focus()}
      >
        {props.confirmLabel || "Yes, delete"}
      </button>
      <button type="button" onClick={() => setArmed(false)}>
        Cancel
      </button>
    </span>
  );
}
