// Builds the chat page into dist/, which think-server serves at / (app/_web.py).
// JSX goes through Vite's own transform (no React plugin: there is no dev-only
// fast refresh to support, and one package fewer to pin).
import { defineConfig } from "vite";

export default defineConfig({
  root: import.meta.dirname,
  base: "/",
  oxc: {
    jsx: { runtime: "automatic", importSource: "react" }
  },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsDir: "assets",
    target: "es2022",
    sourcemap: false,
    // One page, one bundle: the hooks, the AI SDK and React come to about 540 kB (160 kB gzipped).
    chunkSizeWarningLimit: 1024,
    rolldownOptions: {
      onLog(level, log, handler) {
        // swr (under @ai-sdk/react) marks its modules "use client": meaningless in a client-only bundle.
        if (log.code === "MODULE_LEVEL_DIRECTIVE") return;
        handler(level, log);
      }
    }
  },
  server: {
    // `npm run dev`: the page on Vite's server, the chat on a running think-server.
    proxy: {
      "/api": "http://127.0.0.1:8000",
      "/agents": { target: "http://127.0.0.1:8000", ws: true }
    }
  }
});
