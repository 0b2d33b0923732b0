import type { ComponentChildren } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";

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
  const confirm = useRef<HTMLButtonElement>(null);
  // Focus moves to the question once, when it is asked (not on every re-render of a live list).
  useEffect(() => {
    if (armed) confirm.current?.focus();
  }, [armed]);
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
        ref={confirm}
      >
        {props.confirmLabel || "Yes, delete"}
      </button>
      <button type="button" onClick={() => setArmed(false)}>
        Cancel
      </button>
    </span>
  );
}
