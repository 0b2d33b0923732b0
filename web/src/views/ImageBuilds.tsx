// The images the gateway is still building in the background (GET /v1/images, what
// `make run` leaves to the gateway): one line each while it waits, builds or has failed;
// nothing once every build is Ready. Polled while any is unfinished.
import { useEffect, useState } from "preact/hooks";
import { imageBuilds, type ImageBuild } from "../api";

const POLL_MS = 5000;

export function ImageBuilds() {
  const [builds, setBuilds] = useState<ImageBuild[]>([]);
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const poll = async () => {
      let next: ImageBuild[] = [];
      try {
        next = (await imageBuilds.list()).items;
      } catch {
        // The sandbox list says when the gateway is unreachable; this line just waits.
      }
      if (stopped) return;
      setBuilds(next);
      if (next.some((b) => b.state === "Waiting" || b.state === "Building")) timer = setTimeout(poll, POLL_MS);
    };
    void poll();
    return () => {
      stopped = true;
      if (timer) clearTimeout(timer);
    };
  }, []);
  const shown = builds.filter((b) => b.state !== "Ready");
  if (shown.length === 0) return null;
  return (
    <ul class="image-builds" data-testid="image-builds" aria-live="polite">
      {shown.map((b) => (
        <li key={b.images.join(" ")} class={b.state === "Failed" ? "error" : "notice"}>
          <strong>{b.images[0]}</strong>
          {b.images.length > 1 && ` (and ${b.images.length - 1} more)`}
          {b.state === "Waiting" && " waits to be built; sandboxes of it are refused until then."}
          {b.state === "Building" && ` is being built${b.step ? `: ${b.step}` : ""}. Sandboxes of it are refused until it is ready.`}
          {b.state === "Failed" && ` could not be built: ${b.message || "see the gateway's log"}`}
        </li>
      ))}
    </ul>
  );
}
