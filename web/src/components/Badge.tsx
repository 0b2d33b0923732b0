import type { Status } from "../api";

export function StateBadge({ status }: { status?: Status }) {
  const state = status?.state || "Unknown";
  const title = [status?.reason, status?.message].filter(Boolean).join(": ");
  return (
    <span class={`badge state-${state.toLowerCase()}`} title={title || undefined}>
      {state}
    </span>
  );
}
