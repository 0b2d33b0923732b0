// Fails the build when the JavaScript a first visit loads (the entry script of
// dist/index.html and every chunk it preloads) exceeds 200 KB gzipped. Lazily imported
// chunks (the terminal's xterm.js) do not count.
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { join } from "node:path";

const LIMIT = 200 * 1024;
const dist = new URL("../dist/", import.meta.url).pathname;
const html = readFileSync(join(dist, "index.html"), "utf8");
const refs = [...html.matchAll(/<(?:script[^>]*\ssrc|link[^>]*rel="modulepreload"[^>]*\shref)="([^"]+\.js)"/g)].map((m) => m[1]);
if (refs.length === 0) {
  console.error("check-size: dist/index.html references no JavaScript");
  process.exit(1);
}
let total = 0;
for (const ref of refs) {
  const file = join(dist, ref.replace(/^\/console\//, ""));
  const size = gzipSync(readFileSync(file), { level: 9 }).length;
  total += size;
  console.log(`  ${ref}: ${(size / 1024).toFixed(1)} KB gzipped`);
}
console.log(`first-load JavaScript: ${(total / 1024).toFixed(1)} KB gzipped (limit ${LIMIT / 1024} KB)`);
if (total > LIMIT) {
  console.error("check-size: the first load is over the limit; lazy-load the heavy part");
  process.exit(1);
}
