import { readFileSync } from "node:fs";
import { defineConfig } from "vite";

const version = readFileSync(new URL("../VERSION", import.meta.url), "utf8").trim();

// The console is served by the gateway under /console/ (web/web.go embeds dist/).
// Preact's JSX runtime is configured through esbuild directly: no framework preset.
export default defineConfig({
  base: "/console/",
  define: { __SANDGATE_VERSION__: JSON.stringify(version) },
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: {
    outDir: "dist",
    // dist/README is committed: keep it (the build script clears dist/assets itself).
    emptyOutDir: false,
    target: "es2022",
    sourcemap: false,
    chunkSizeWarningLimit: 600,
  },
  server: {
    // `npm run dev` next to a local gateway (make run) on :8080.
    proxy: { "/v1": { target: "http://127.0.0.1:8080", ws: true } },
  },
});
