// Hash routing: the console lives under /console/ and every view is #/path, so the
// gateway serves one index.html and reloads land on the same view.
import { useEffect, useState } from "preact/hooks";

export interface Route {
  path: string[]; // "#/sandboxes/abc/files" → ["sandboxes", "abc", "files"]
  query: URLSearchParams;
}

export function parseHash(hash: string): Route {
  const raw = hash.replace(/^#\/?/, "");
  const [p, q = ""] = raw.split("?");
  return { path: p.split("/").filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(q) };
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseHash(location.hash));
  useEffect(() => {
    const on = () => setRoute(parseHash(location.hash));
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return route;
}

export function href(...parts: string[]): string {
  return "#/" + parts.map(encodeURIComponent).join("/");
}

export function navigate(to: string) {
  location.hash = to;
}
